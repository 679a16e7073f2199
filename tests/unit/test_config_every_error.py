"""A file with several problems reports every one at once, in file order: each section is
checked on its own, and within a section each field that does not depend on another; a section
that depends on a bad one is not checked, so one cause is reported once. A file with one problem
reads exactly as it always did."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from pipelines.cli.main import main
from pipelines.config import Condition, ConfigError, ConfigErrors, load_pipeline, main_validate

CASES = Path(__file__).parent / "config_cases"
GOOD = """\
name: demo
kafka:
  bootstrap_servers: 127.0.0.1:9092
topics: [events]
group:
  id: demo-group
format:
  schema: "id BIGINT, name STRING"
sink:
  path: out/table
"""
# three problems, three sections: group (line 6), format (line 8), trigger (line 12)
THREE = """\
name: demo
kafka:
  bootstrap_servers: 127.0.0.1:9092
topics: [events]
group:
  id: [demo-group]
format:
  type: jsn
  schema: "id BIGINT, name STRING"
sink:
  path: out/table
trigger:
  processing_time: soon
"""


def _error(tmp_path: Path, text: str) -> ConfigError:
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path, env={})
    return info.value


def _problems(error: ConfigError) -> list[tuple[str, str, int]]:
    return [(e.condition, e.field_path, e.line) for e in error.errors]


def test_three_problems_in_three_sections_are_all_reported_in_file_order(tmp_path: Path):
    error = _error(tmp_path, THREE)
    assert isinstance(error, ConfigErrors)
    assert _problems(error) == [(Condition.WRONG_TYPE, "group.id", 6), (Condition.BAD_ENUM, "format.type", 8),
                                (Condition.BAD_DURATION, "trigger.processing_time", 13)]
    file = tmp_path / "pipeline.yaml"
    lines = str(error).splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == [f"{file}:6", f"{file}:8", f"{file}:13"]
    assert lines[1].startswith(f"{file}:8: format.type: [BAD_ENUM] 'jsn' is not one of json, raw")
    # a caller that looks at one error sees the first
    assert (error.condition, error.field_path, error.line, error.file) == (
        Condition.WRONG_TYPE, "group.id", 6, str(file))
    assert error.exit_category == 2


def test_problems_are_sorted_by_line_not_by_the_order_sections_are_checked(tmp_path: Path):
    text = "metrics:\n  port: 99999\n" + GOOD.replace("name: demo", "name: 'no spaces please'")
    assert _problems(_error(tmp_path, text)) == [(Condition.BAD_VALUE, "metrics.port", 2),
                                                 (Condition.BAD_VALUE, "name", 3)]


def test_a_broken_format_does_not_also_report_the_sink_columns(tmp_path: Path):
    # partition_by names a schema field: with format.type bad, the columns are unknown, not wrong
    text = GOOD.replace("format:\n", "format:\n  type: jsn\n") + "  partition_by: [id]\n"
    assert _problems(_error(tmp_path, text)) == [(Condition.BAD_ENUM, "format.type", 8)]


def test_a_broken_schema_does_not_also_report_the_sink_columns(tmp_path: Path):
    text = GOOD.replace("id BIGINT, name STRING", "id BIGINT, name VARCHAR") + "  partition_by: [name]\n"
    assert _problems(_error(tmp_path, text)) == [(Condition.BAD_SCHEMA, "format.schema", 8)]


def test_a_broken_sink_does_not_also_report_the_checkpoint_root(tmp_path: Path):
    # checkpoint_root inside the (bad) table would be a second report of the same location
    text = GOOD.replace("out/table", "out/table[1]") + "checkpoint_root: out/table[1]/cp\n"
    assert _problems(_error(tmp_path, text)) == [(Condition.BAD_VALUE, "sink.path", 10)]


def test_a_section_depending_on_a_good_one_is_still_checked(tmp_path: Path):
    text = GOOD.replace("id: demo-group", "id: demo-group\n  session_timeout: 10") + "  partition_by: [region]\n"
    assert _problems(_error(tmp_path, text)) == [(Condition.BAD_DURATION, "group.session_timeout", 7),
                                                 (Condition.BAD_PARTITION_COLUMN, "sink.partition_by[0]", 12)]


def test_every_bad_field_and_unknown_key_of_one_section_is_reported(tmp_path: Path):
    group = ("group:\n  id: demo-group\n  assignr: range\n  session_timeout: 10\n  heartbeat_interval: soon\n"
             "  on_server_assignment: never\n")
    text = GOOD.replace("group:\n  id: demo-group\n", group)
    assert _problems(_error(tmp_path, text)) == [
        (Condition.UNKNOWN_KEY, "group.assignr", 7), (Condition.BAD_DURATION, "group.session_timeout", 8),
        (Condition.BAD_DURATION, "group.heartbeat_interval", 9), (Condition.BAD_ENUM, "group.on_server_assignment", 10)]


def test_a_cross_field_rule_is_not_checked_while_one_of_its_fields_is_bad(tmp_path: Path):
    # min > max would be CONFLICTING_FIELDS; with max bad, only max is reported
    text = GOOD + "source:\n  min_offsets_per_trigger: 10\n  max_offsets_per_trigger: many\n"
    assert _problems(_error(tmp_path, text)) == [(Condition.WRONG_TYPE, "source.max_offsets_per_trigger", 13)]


def test_a_misspelt_required_key_is_reported_as_unknown_only(tmp_path: Path):
    # not also "required field 'id' is missing" and "required field 'topics' is missing"
    text = GOOD.replace("id: demo-group", "idd: demo-group").replace("topics: [events]", "topic: [events]")
    assert _problems(_error(tmp_path, text)) == [(Condition.UNKNOWN_KEY, "topic", 4),
                                                 (Condition.UNKNOWN_KEY, "group.idd", 6)]


def test_every_bad_settings_entry_is_reported(tmp_path: Path):
    text = GOOD + 'spark:\n  "bad key!": x\n  spark.sql.x: [1]\n  spark.sql.y: "1"\n'
    assert _problems(_error(tmp_path, text)) == [(Condition.BAD_VALUE, 'spark["bad key!"]', 12),
                                                 (Condition.WRONG_TYPE, 'spark["spark.sql.x"]', 13)]


def test_one_problem_reads_exactly_as_before():
    path = CASES / "unknown_key_group.yaml"
    with pytest.raises(ConfigError) as info:
        load_pipeline(path, env={})
    error = info.value
    assert type(error) is ConfigError and error.errors == (error,)
    assert str(error) == f"{path}:8: group.assignr: unknown key 'assignr' (did you mean 'assignor'?)"
    assert error.headline() == (f"{path}:8: group.assignr: [UNKNOWN_KEY] unknown key 'assignr' "
                                "(did you mean 'assignor'?)")


def test_scg_validate_prints_every_problem_and_exits_2(tmp_path: Path, capsys):
    path = tmp_path / "pipeline.yaml"
    path.write_text(THREE)
    assert main_validate(path) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == str(_error(tmp_path, THREE)).splitlines()
    assert [line.split(": ")[1] for line in err.splitlines()] == ["group.id", "format.type", "trigger.processing_time"]
    assert main(["validate", str(path), str(CASES / "unknown_key_group.yaml")]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 4  # every file checked, each problem a line


def test_other_commands_print_the_first_problem_and_how_many_more(tmp_path: Path, capsys):
    path = tmp_path / "pipeline.yaml"
    path.write_text(THREE)
    assert main(["run", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "[WRONG_TYPE]" in lines[0] and "(and 2 more problems in this file;" in lines[0]


def test_config_errors_survive_pickling(tmp_path: Path):
    error = _error(tmp_path, THREE)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ConfigErrors and str(copy) == str(error) and _problems(copy) == _problems(error)
    assert [e.params for e in copy.errors] == [e.params for e in error.errors]


def test_config_errors_keep_each_problem_once_in_line_order():
    one = ConfigError("f.yaml", 9, "b", Condition.BAD_VALUE, "late")
    two = ConfigError("f.yaml", 2, "a", Condition.BAD_VALUE, "early")
    again = ConfigError("f.yaml", 9, "b", Condition.BAD_VALUE, "late")
    combined = ConfigErrors.of([one, ConfigErrors([two, one]), again])
    assert [e.detail for e in combined.errors] == ["early", "late"]
    assert ConfigErrors.of([one, again]) is one
    with pytest.raises(ValueError):
        ConfigErrors([one])
