"""STORAGE_UNAVAILABLE carries the storage client's own last word, one line (sinks.txn_table)."""
import pytest

from sinks.txn_table import SinkError, StorageUnavailable, storage_error_reason


@pytest.mark.parametrize("text, reason", [
    ("Generic S3 error: request failed ↳ Error after 10 retries ↳ tcp connect error: Connection refused",
     "tcp connect error: Connection refused"),
    ("\x1b[1;31mObject at location x not found\x1b[0m\n  caused by\n   No such file ", "No such file"),
    ("first line ↳   ↳ last ", "last"),
    ("Client error 404 ↳ <?xml version='1.0'?><Error><Code>NoSuchBucket</Code><Message>gone</Message></Error>",
     "NoSuchBucket"),
    ("<Code>InvalidAccessKeyId</Code>\n<Code>Other</Code>", "InvalidAccessKeyId"),
    ("x" * 400, "x" * 300),
])
def test_reason_is_the_innermost_cause_without_colours(text, reason):
    assert storage_error_reason(OSError(text)) == reason


@pytest.mark.parametrize("error, reason", [(OSError(), "OSError"), (TimeoutError(" \n ↳ "), "TimeoutError")])
def test_an_empty_message_names_the_error_type(error, reason):
    assert storage_error_reason(error) == reason


def test_storage_unavailable_names_path_reason_and_condition():
    error = StorageUnavailable("s3://bucket/table", OSError("request failed ↳ <Code>AccessDenied</Code>"))
    assert isinstance(error, SinkError) and error.condition == "STORAGE_UNAVAILABLE"
    assert (error.path, error.reason) == ("s3://bucket/table", "AccessDenied")
    assert "s3://bucket/table" in str(error) and "AccessDenied" in str(error)
