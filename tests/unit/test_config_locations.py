"""A location is a URL with a valid scheme or a local path; text that starts like a URL with an
invalid scheme is refused, never turned into a path next to the file."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.config import Condition, ConfigError
from pipelines.config.fields import Ctx, as_location
from pipelines.config.yaml_nodes import Node


def _location(text: str) -> str:
    return as_location(Ctx("p.yaml", Path("/base"), {}), Node("scalar", text, 3, text=text), "sink.path")


@pytest.mark.parametrize("text", ["ht!tp://x", "://x", "1s3://bucket/t", "s 3://bucket/t", "s3_a://b/t"])
def test_a_url_with_an_invalid_scheme_is_refused(text):
    with pytest.raises(ConfigError) as info:
        _location(text)
    assert (info.value.condition, info.value.line, info.value.params["scheme"]) == (
        Condition.BAD_VALUE, 3, text.split("://")[0])


@pytest.mark.parametrize("text, expected", [
    ("s3a://lake/orders", "s3a://lake/orders"), ("abfss://c@a.dfs.core.windows.net/t", "abfss://c@a.dfs.core.windows.net/t"),
    ("file:///tmp/t", "file:///tmp/t"), ("out/table", "/base/out/table"), ("/data/x://y", "/data/x:/y"),
    ("dir/a://b", "/base/dir/a:/b"),
])
def test_urls_with_valid_schemes_and_paths_are_kept(text, expected):
    assert _location(text) == expected
