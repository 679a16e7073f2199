"""storage_error_reason (sinks.txn_table) strips terminal colour codes wherever they are, including in
the innermost cause it returns (the STORAGE_UNAVAILABLE reason is one plain line)."""
import pytest

from sinks.txn_table import storage_error_reason


@pytest.mark.parametrize("text, reason", [
    ("request failed ↳ \x1b[31mConnection refused\x1b[0m", "Connection refused"),
    ("\x1b[1;31mbucket gone\x1b[m", "bucket gone"),
    ("outer\n\x1b[0;1;33mtimed out\x1b[0m ", "timed out"),
    ("<Code>\x1b[1mNoSuchBucket\x1b[0m</Code>", "NoSuchBucket"),
])
def test_colour_codes_are_removed_from_the_reason(text, reason):
    assert storage_error_reason(OSError(text)) == reason


def test_text_that_only_looks_like_a_colour_code_is_kept():
    assert storage_error_reason(OSError("[31m is not escaped")) == "[31m is not escaped"
