"""A pipeline file past a bound is refused as YAML_LIMIT at the line where the bound was passed,
before PyYAML builds the rest of the tree; bytes that are not UTF-8 are refused at their line."""
from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from pipelines.config import Condition, ConfigError
from pipelines.config import load_pipeline
from pipelines.config.yaml_limits import MAX_DEPTH, MAX_FILE_BYTES, MAX_KEY_CHARS, MAX_NODES
from pipelines.config.yaml_nodes import MAX_DETAIL_CHARS, ConfigError as NodeError, load_yaml, parse_yaml


def _refusal(text: str | bytes) -> ConfigError:
    with pytest.raises(NodeError) as info:
        parse_yaml(text, "p.yaml")
    return info.value


def _limit(text: str | bytes) -> tuple[str, str, int]:
    error = _refusal(text)
    assert error.condition == Condition.YAML_LIMIT, error.headline()
    return error.params["limit"], error.line


def test_a_file_larger_than_the_bound_is_refused_without_reading_it_all(tmp_path: Path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:  # sparse: 8 GiB of zero bytes on disk in no time
        handle.truncate(8 * 1024 ** 3)
    with pytest.raises(NodeError) as info:
        load_yaml(path)
    assert (info.value.condition, info.value.params["limit"]) == (Condition.YAML_LIMIT, "file size")


def test_a_file_of_exactly_the_bound_is_read(tmp_path: Path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"a: 1\n" + b"#" * (MAX_FILE_BYTES - 6) + b"\n")
    assert load_yaml(path).value["a"].value == 1


@pytest.mark.parametrize("text", [
    "a: " + "[" * 20_000 + "]" * 20_000,
    "".join(f"{'  ' * depth}-\n" for depth in range(500)),
    "a: " + "{b: " * 20_000 + "1" + "}" * 20_000,
], ids=["flow-lists", "block-lists", "flow-mappings"])
def test_deep_nesting_is_refused_at_the_line_that_passes_the_bound(text):
    limit, line = _limit(text)
    assert limit == "nesting depth"
    assert line in (1, MAX_DEPTH + 1)  # flow: one line; block: the line of the first too deep item


def test_nesting_to_the_bound_is_read():
    depth = MAX_DEPTH - 1  # the root mapping is one level
    assert parse_yaml("a: " + "[" * depth + "]" * depth) is not None


def test_too_many_nodes_stops_at_the_node_past_the_bound():
    limit, line = _limit("- a\n" * (MAX_NODES + 50_000))
    assert (limit, line) == ("nodes", MAX_NODES)  # the root list is the first node


def test_a_long_key_is_refused_at_its_line():
    assert _limit("a: 1\n\n? " + "k" * (MAX_KEY_CHARS + 1) + "\n: 1") == ("key length", 3)
    assert parse_yaml("k" * MAX_KEY_CHARS + ": 1") is not None


def test_a_value_is_bounded_only_by_the_file():
    value = "x" * (MAX_FILE_BYTES - 10)
    assert len(parse_yaml("b: " + value).value["b"].value) == len(value)


def test_a_200_kb_transform_and_a_2000_field_schema_are_accepted(tmp_path: Path):
    """Generated SQL and wide DDL are as long as they need to be: Spark bounds neither."""
    columns = [f"field_{i:04d}" for i in range(2_000)]
    schema = ", ".join(f"{name} STRING" for name in columns)
    select = ", ".join(f"upper({name}) AS {name}" for name in columns)
    transform = f"SELECT {select} FROM `input` WHERE " + " OR ".join(
        f"{columns[i % 2_000]} = 'value-{i:05d}'" for i in range(4_500))
    assert 200_000 < len(transform) and len(schema) > 30_000
    path = tmp_path / "wide.yaml"
    path.write_text("name: wide\nkafka: {bootstrap_servers: 127.0.0.1:9092}\ntopics: [t]\ngroup: {id: g}\n"
                    f"format:\n  schema: \"{schema}\"\ntransform: \"{transform}\"\nsink: {{path: out}}\n")
    assert path.stat().st_size < MAX_FILE_BYTES
    config = load_pipeline(path, env={})
    assert config.transform == transform and len(config.format.schema) == 2_000


def test_an_alias_bomb_is_refused():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    limit, _ = _limit("\n".join(lines))
    assert limit == "nodes"


def test_aliases_that_nest_past_the_depth_bound_are_refused():
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 200)]
    limit, _ = _limit("\n".join(lines))
    assert limit == "nesting depth"


def test_a_merge_key_bomb_is_refused():
    lines = ["m0: &m0 {k: v}"] + [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}]}}" for i in range(1, 40)]
    limit, _ = _limit("\n".join(lines))
    assert limit == "nodes"


def test_a_byte_that_is_not_utf8_is_reported_at_its_line_and_column():
    data = b"".join(b"k%d: v\n" % i for i in range(12)) + b"name: ab\xffc\n"
    error = _refusal(data)
    assert (error.condition, error.line) == (Condition.YAML_SYNTAX, 13)
    assert error.params["column"] == 9


def test_a_control_character_is_reported_at_its_line():
    error = _refusal("a: 1\nb: 2\nc: x\x07y\n")
    assert (error.condition, error.line, error.params["column"]) == (Condition.YAML_SYNTAX, 3, 5)


def test_utf16_with_a_byte_order_mark_and_utf8_with_one_are_read():
    assert parse_yaml(codecs.BOM_UTF16_LE + "name: é\n".encode("utf-16-le")).value["name"].value == "é"
    assert parse_yaml(codecs.BOM_UTF8 + "name: é\n".encode()).value["name"].value == "é"


def test_an_error_detail_is_one_bounded_line_however_long_the_value_it_quotes():
    error = NodeError("p.yaml", 1, "name", Condition.BAD_VALUE, "bad " + "x\n" * 100_000)
    assert len(error.detail) <= MAX_DETAIL_CHARS and "\n" not in error.headline()


@pytest.mark.parametrize("value", ["1" * 5_000, "2024-13-45", "2024-02-30 10:00:00"], ids=["huge-int", "month", "day"])
def test_a_scalar_the_safe_constructor_cannot_make_is_yaml_syntax_at_its_field(value):
    error = _refusal(f"a: 1\nb: {value}\n")
    assert (error.condition, error.line, error.field_path) == (Condition.YAML_SYNTAX, 2, "b")


def test_a_key_that_does_not_print_is_quoted_so_the_path_stays_on_one_line():
    from pipelines.config.yaml_nodes import child_path

    assert child_path("spark", "a.b") == 'spark["a.b"]' and child_path("", "name") == "name"
    assert child_path("spark", "a\nb") == 'spark["a\\nb"]' and child_path("x", 'q"') == 'x["q\\""]'
