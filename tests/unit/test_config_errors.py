"""Broken pipeline files: each stops with one named condition at the right field and line.

Every file in ``config_cases/`` starts with ``# expect: CONDITION FIELD.PATH LINE`` (``-`` for no
field path); the test loads the file and compares condition, field path and line, never message text.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipelines.config import Condition, ConfigError, load_pipeline, main_validate
from pipelines.config.yaml_nodes import parse_yaml

CASES = Path(__file__).parent / "config_cases"
ENV = {"KAFKA_USER": "alice", "KAFKA_PASSWORD": "pw-from-env"}
# need a private key: their files are made by tests/unit/test_validate_client_keys.py, no key is kept here
KEY_PAIR_CONDITIONS = {"CLIENT_KEY_MISMATCH", "CLIENT_KEY_PASSWORD_MISSING", "CLIENT_KEY_PASSWORD_WRONG",
                       "TLS_FILE_REFUSED"}
_EXPECT = re.compile(r"#\s*expect:\s*(\S+)\s+(\S+)\s+(\d+)\s*$")


def _expectation(path: Path) -> tuple[str, str, int]:
    match = _EXPECT.match(path.read_text().splitlines()[0])
    if match is None:
        raise ValueError(f"{path.name}: first line must be '# expect: CONDITION FIELD LINE'")
    condition, field, line = match.groups()
    return condition, "" if field == "-" else field, int(line)


def _load_error(path: Path, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_pipeline(path, env=ENV if env is None else env)
    return info.value


CASE_FILES = sorted(CASES.glob("*.yaml"))


def test_there_are_enough_cases():
    assert len(CASE_FILES) >= 20
    assert {_expectation(p)[0] for p in CASE_FILES} >= {c.value for c in Condition} - {
        "FILE_NOT_FOUND", "FILE_NOT_READABLE", "SECRET_FILE_UNREADABLE"} - KEY_PAIR_CONDITIONS


@pytest.mark.parametrize("path", CASE_FILES, ids=[p.stem for p in CASE_FILES])
def test_broken_file_reports_condition_field_and_line(path: Path):
    condition, field, line = _expectation(path)
    error = _load_error(path)
    assert (error.condition, error.field_path, error.line) == (condition, field, line), str(error)
    assert error.file == str(path)
    assert str(error).startswith(f"{path}:{line}: {field or '(document)'}: ")
    assert "\n" not in str(error)


@pytest.mark.parametrize("name", ["inline_secret.yaml", "inline_secret_client_config.yaml"])
def test_inline_secret_error_does_not_echo_the_secret(name: str):
    error = _load_error(CASES / name)
    assert "hunter2" not in str(error)
    assert "hunter2" not in repr(error.params)


def test_unknown_key_suggests_closest_key():
    error = _load_error(CASES / "unknown_key_group.yaml")
    assert error.params["suggestion"] == "assignor"
    assert error.params["key"] == "assignr"


def test_unknown_top_level_key_suggests_topics():
    assert _load_error(CASES / "unknown_key_top.yaml").params["suggestion"] == "topics"


def test_unknown_assignor_suggests_and_lists_available():
    error = _load_error(CASES / "unknown_assignor.yaml")
    assert error.params["suggestion"] == "range"
    assert {"range", "roundrobin"} <= set(error.params["available"])


def test_bad_enum_suggests_closest_value():
    assert _load_error(CASES / "bad_enum_starting_offsets.yaml").params["suggestion"] == "earliest"


def test_env_var_not_set_names_the_variable():
    assert _load_error(CASES / "env_var_not_set.yaml").params["var"] == "SCG_TEST_SURELY_UNSET"


def test_duplicate_key_names_first_line():
    assert _load_error(CASES / "duplicate_key.yaml").params == {"key": "id", "first_line": 7}


def test_file_not_found(tmp_path: Path):
    missing = tmp_path / "nope.yaml"
    error = _load_error(missing)
    assert (error.condition, error.line, error.field_path) == (Condition.FILE_NOT_FOUND, 0, "")
    assert str(error).startswith(f"{missing}:0: ")


def test_directory_is_not_a_file(tmp_path: Path):
    assert _load_error(tmp_path).condition == Condition.FILE_NOT_FOUND


def test_binary_garbage_is_yaml_syntax(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"name: \xff\xfe\x00\x01")
    assert _load_error(path).condition == Condition.YAML_SYNTAX


def test_recursive_alias_is_rejected():
    with pytest.raises(ConfigError) as info:
        parse_yaml("a: &x [1, *x]\n", "inline.yaml")
    assert info.value.condition == Condition.YAML_SYNTAX


def test_unsupported_tag_is_rejected():
    with pytest.raises(ConfigError) as info:
        parse_yaml("a: !!python/object:os.system {}\n", "inline.yaml")
    assert (info.value.condition, info.value.field_path, info.value.line) == (Condition.YAML_SYNTAX, "a", 1)


def test_secret_file_unreadable(tmp_path: Path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\xff\xfe\xfd")
    path = tmp_path / "p.yaml"
    path.write_text((CASES / "secret_file_not_found.yaml").read_text()
                    .replace("no-such-secret.txt", "secret.bin"))
    error = _load_error(path)
    assert (error.condition, error.field_path) == (Condition.SECRET_FILE_UNREADABLE,
                                                   "kafka.security.sasl_password_file")


def test_main_validate_prints_one_error_line_and_exits_2(capsys):
    code = main_validate(CASES / "unknown_key_group.yaml")
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"{CASES / 'unknown_key_group.yaml'}:8: group.assignr: [UNKNOWN_KEY] ")


def test_config_error_survives_pickling():
    import pickle

    error = _load_error(CASES / "unknown_key_group.yaml")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.condition, copy.field_path, copy.line, copy.params, str(copy)) == (
        error.condition, error.field_path, error.line, error.params, str(error))
