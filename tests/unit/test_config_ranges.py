"""Every duration and count a pipeline file sets has the range of the setting it maps to: the
bound is accepted, one past it is OUT_OF_RANGE at the field, and the reference page shows it."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.config import Condition, ConfigError
from pipelines.config.fields import Ctx, as_duration_ms, as_positive_int, as_str
from pipelines.config.model import DURATION, POSITIVE_INT
from pipelines.config.ranges import FIELD_LENGTHS, FIELD_RANGES, JAVA_INT_MAX, WIDEST, duration_text, range_of
from pipelines.config.reference import documented_keys, reference_markdown
from pipelines.config.yaml_nodes import Node

DURATIONS = sorted(key.path for key in documented_keys() if key.doc.kind.startswith(DURATION))
COUNTS = sorted(key.path for key in documented_keys() if key.doc.kind == POSITIVE_INT)


def _ctx() -> Ctx:
    return Ctx("p.yaml", Path("."), {})


def _scalar(value: object, text: str | None = None) -> Node:
    return Node("scalar", value, 7, text=str(value) if text is None else text)


def test_every_duration_and_count_field_has_a_range_and_every_range_is_a_field():
    assert set(DURATIONS) | set(COUNTS) == set(FIELD_RANGES)
    documented = {key.path for key in documented_keys()}
    assert set(FIELD_LENGTHS) <= documented


@pytest.mark.parametrize("path", DURATIONS)
def test_a_duration_at_its_bound_is_read_and_one_past_it_is_out_of_range(path):
    high = FIELD_RANGES[path].high
    assert as_duration_ms(_ctx(), _scalar(f"{high}ms"), path) == high
    with pytest.raises(ConfigError) as info:
        as_duration_ms(_ctx(), _scalar(f"{high + 1}ms"), path)
    assert (info.value.condition, info.value.field_path, info.value.line) == (Condition.OUT_OF_RANGE, path, 7)
    assert info.value.params["bound"] == high


@pytest.mark.parametrize("path", COUNTS)
def test_a_count_at_its_bound_is_read_and_one_past_it_is_out_of_range(path):
    high = FIELD_RANGES[path].high
    assert as_positive_int(_ctx(), _scalar(high), path) == high
    with pytest.raises(ConfigError) as info:
        as_positive_int(_ctx(), _scalar(high + 1), path)
    assert (info.value.condition, info.value.params["bound"]) == (Condition.OUT_OF_RANGE, high)


@pytest.mark.parametrize("text", ["99999999999d", "1" * 5_000 + "s", "0" * 5_000 + "3000000000ms"])
def test_a_duration_of_any_number_of_digits_is_out_of_range_not_a_crash(text):
    with pytest.raises(ConfigError) as info:
        as_duration_ms(_ctx(), _scalar(text), "group.session_timeout")
    assert (info.value.condition, info.value.params["bound"]) == (Condition.OUT_OF_RANGE, JAVA_INT_MAX)


def test_a_path_without_a_range_gets_the_widest():
    assert range_of("no.such.field") == WIDEST


@pytest.mark.parametrize("path", sorted(FIELD_LENGTHS))
def test_a_string_is_bounded_in_utf8_bytes(path):
    high = FIELD_LENGTHS[path].high
    assert as_str(_ctx(), _scalar("a" * high), path) == "a" * high
    with pytest.raises(ConfigError) as info:
        as_str(_ctx(), _scalar("é" * (high // 2 + 1)), path)  # two bytes each
    assert (info.value.condition, info.value.params["bound"]) == (Condition.OUT_OF_RANGE, high)


def test_the_reference_page_states_each_bound():
    page = reference_markdown()
    for path, bound in FIELD_RANGES.items():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{path}`"))
        assert (duration_text(bound.high) if path in DURATIONS else f"{bound.high:,}") in row


def test_duration_text_uses_the_largest_exact_unit():
    assert [duration_text(ms) for ms in (1_800_000, 1_500, 90_000, 86_400_000)] == ["30m", "1500ms", "90s", "1d"]
    assert duration_text(JAVA_INT_MAX) == "2147483647ms (24.9 days)"
