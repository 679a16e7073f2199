"""Every named condition the code can report is on docs/operations.md.

The conditions are collected from the code itself: the ``condition`` of every ``ScgError``
subclass (modules of groupmgr/, pipelines/ and sinks/ imported), the config error conditions,
module-level condition constants (``TOPIC_RECREATED = "TOPIC_RECREATED"``), the conditions the
fault classifiers name in their source (``Fault(TRANSIENT, "IO_ERROR", ...)``) and the ``[NAME]``
tags in string literals. Names made at run time from a Kafka, Spark or Delta error (a broker
error code's name, a Java exception's) are families the page describes, not single names.
"""
from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "operations.md"
PACKAGES = ("groupmgr", "pipelines", "sinks")
NAME = re.compile(r"[A-Z][A-Z0-9_]{2,}[A-Z0-9]")  # not a prefix such as "DELTA_"
TAG = re.compile(r"\[([A-Z][A-Z0-9_]{3,})\]")
# Calls whose string arguments are condition names.
NAMING_CALLS = {"Fault", "_fault", "classify_storage", "PartitionVerdict", "StorageUnavailable"}
# Upper-case module constants and tags that are not conditions.
NOT_CONDITIONS = {
    "CONSUMER",      # groupmgr.server_assignment.CONSUMER_GROUP: confluent-kafka's group type name
    "CONDITION",     # the placeholder in ScgError's docstring
}


def project_modules():
    for package in PACKAGES:
        root = importlib.import_module(package)
        yield root
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if not info.name.endswith("__main__"):
                yield importlib.import_module(info.name)


def error_conditions() -> set[str]:
    from groupmgr.core import ScgError
    from pipelines.config.yaml_nodes import Condition

    found, todo = set(), [ScgError]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        value = cls.__dict__.get("condition")
        if isinstance(value, str):
            found.add(value)
    return found | {condition.value for condition in Condition}


def constant_conditions(modules) -> set[str]:
    found = set()
    for module in modules:
        for name, value in vars(module).items():
            if name.isupper() and isinstance(value, str) and NAME.fullmatch(value):
                found.add(value)
    return found


def source_conditions() -> set[str]:
    """Condition names written in the source: arguments of the classifiers' calls, ``[NAME]``
    tags in strings, and the values of dicts that map error classes to conditions."""
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and _called(node) in NAMING_CALLS:
                    found |= {arg.value for arg in ast.walk(node) if _is_name(arg)}
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found |= set(TAG.findall(node.value))
                elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                    if any(isinstance(t, ast.Subscript) for t in node.targets) and _is_name(node.value):
                        found.add(node.value.value)
                elif isinstance(node, ast.Dict) and node.values and all(_is_name(v) for v in node.values):
                    if all(isinstance(k, ast.Constant) and isinstance(k.value, str) and not _is_name(k)
                           for k in node.keys):
                        found |= {v.value for v in node.values}
    return found


def invalid_assignment_conditions() -> set[str]:
    """``INVALID_ASSIGNMENT.<REASON>`` for every reason the leader's check can give."""
    from groupmgr.assignors.assignor_errors import InvalidAssignmentError

    reasons = set(InvalidAssignmentError.REASONS)
    tree = ast.parse((ROOT / "groupmgr" / "assignors" / "validate.py").read_text())
    reasons |= {node.args[1].value for node in ast.walk(tree) if isinstance(node, ast.Call)
                and _called(node) == "_fail" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)}
    return {f"INVALID_ASSIGNMENT.{reason.upper()}" for reason in reasons}


def _called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _is_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(NAME.fullmatch(node.value))


def code_conditions() -> set[str]:
    modules = list(project_modules())
    found = error_conditions() | constant_conditions(modules) | source_conditions() | invalid_assignment_conditions()
    return found - NOT_CONDITIONS


def test_conditions_are_found():
    names = code_conditions()
    for sample in ("FENCED_WRITER", "UNKNOWN_KEY", "TOPIC_RECREATED", "IO_ERROR", "POLL_TIMEOUT_EXPIRED"):
        assert sample in names


@pytest.mark.parametrize("name", sorted(code_conditions()))
def test_condition_is_on_the_operations_page(name):
    assert f"`{name}`" in PAGE.read_text(), f"docs/operations.md does not explain the condition {name}"
