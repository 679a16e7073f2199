"""Every `scg` command with bad arguments: one line naming the condition, and the exit code of its
category (2 bad configuration or arguments). In process; nothing is started."""
from __future__ import annotations

from pathlib import Path

import pytest

from groupmgr.assignors import UnknownAssignorError
from groupmgr.core import ExitCategory, ScgError
from pipelines.cli.arguments import BadArgumentsError
from pipelines.cli.main import main

CASES = Path(__file__).parent / "config_cases"


@pytest.mark.parametrize("argv, condition", [
    ([], "BAD_ARGUMENTS"),
    (["frobnicate"], "BAD_ARGUMENTS"),
    (["run"], "BAD_ARGUMENTS"),
    (["run", "missing.yaml"], "FILE_NOT_FOUND"),
    (["run", str(CASES / "unknown_key_group.yaml")], "UNKNOWN_KEY"),
    (["validate"], "BAD_ARGUMENTS"),
    (["validate", "missing.yaml"], "FILE_NOT_FOUND"),
    (["validate", str(CASES / "unknown_key_group.yaml")], "UNKNOWN_KEY"),
    (["demo", "--records", "0"], "BAD_ARGUMENTS"),
    (["demo", "--partitions", "many"], "BAD_ARGUMENTS"),
    (["kafka"], "BAD_ARGUMENTS"),
    (["kafka", "restart"], "BAD_ARGUMENTS"),
    (["kafka", "start", "--brokers", "0"], "BAD_ARGUMENTS"),
    (["kafka", "start", "--port", "70000"], "BAD_ARGUMENTS"),
    (["assign", "--assignor", "range", "--topic", "t"], "BAD_ARGUMENTS"),
    (["assign", "--assignor", "range", "--topic", "t", "--member", "a"], "BAD_TOPIC_SPEC"),
    (["assign", "--assignor", "range", "--topic", "t:0", "--member", "a"], "BAD_TOPIC_SPEC"),
    (["assign", "--assignor", "range", "--topic", "t:2", "--member", "a:nope"], "BAD_MEMBER_SPEC"),
    (["assign", "--assignor", "no-such", "--topic", "t:2", "--member", "a"], "UNKNOWN_ASSIGNOR"),
    (["assign", "--assignor", "no_such_module:Cls", "--topic", "t:2", "--member", "a"],
     "ASSIGNOR_IMPORT_FAILED"),
    (["check"], "BAD_ARGUMENTS"),
    (["check", "missing.yaml"], "FILE_NOT_FOUND"),
    (["describe"], "BAD_ARGUMENTS"),
    (["describe", "--pipeline", "missing.yaml"], "FILE_NOT_FOUND"),
    (["offsets"], "BAD_ARGUMENTS"),
    (["offsets", "missing.yaml"], "BAD_ARGUMENTS"),
    (["offsets", "missing.yaml", "rewind"], "BAD_ARGUMENTS"),
    (["offsets", "missing.yaml", "show"], "FILE_NOT_FOUND"),
    (["offsets", "missing.yaml", "reset"], "BAD_ARGUMENTS"),
    (["offsets", "missing.yaml", "reset", "--to", "first"], "RESET_BAD_TARGET"),
    (["offsets", "missing.yaml", "reset", "--to", "-3"], "RESET_BAD_TARGET"),
    (["offsets", "missing.yaml", "reset", "--to", "3", "--partitions", "t:0,t"], "RESET_BAD_PARTITIONS"),
    (["offsets", "missing.yaml", "reset", "--to", "3"], "FILE_NOT_FOUND"),
])
def test_bad_arguments_exit_2_naming_the_condition(argv, condition, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"[{condition}]" in lines[0], err
    assert "Traceback" not in err


def test_every_command_has_a_bad_arguments_case():
    from pipelines.cli.main import COMMANDS

    covered = {argv[0] for argv, _ in test_bad_arguments_exit_2_naming_the_condition.pytestmark[0].args[1] if argv}
    assert set(COMMANDS) <= covered


@pytest.mark.parametrize("error, code", [
    (BadArgumentsError("x"), 2),
    (UnknownAssignorError("x", ["range"]), 2),
    (ScgError("x"), 1),
])
def test_exit_code_comes_from_the_error_type(error, code, monkeypatch, capsys):
    from pipelines.cli import main as cli

    def fail(args):
        raise error

    monkeypatch.setitem(cli.COMMANDS, "validate", fail)
    assert main(["validate", "x.yaml"]) == code
    assert f"[{error.condition}]" in capsys.readouterr().err


def test_exit_categories_are_the_documented_codes():
    assert (ExitCategory.RUNTIME, ExitCategory.CONFIG, ExitCategory.ENVIRONMENT) == (1, 2, 3)


def test_headline_does_not_repeat_the_condition():
    class Named(ScgError):
        condition = "NAMED"

    assert Named("[NAMED] already tagged").headline() == "[NAMED] already tagged"
    assert Named("plain").headline() == "[NAMED] plain"


def test_version_prints_the_installed_version_and_exits_0(capsys):
    from importlib.metadata import version

    from pipelines.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"scg {version('spark-consumer-groups')}"
