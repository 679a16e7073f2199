"""Registry (built-ins, entry points, module:Class) and the run_assignor / validate_assignment guard."""

from __future__ import annotations

import itertools
import textwrap
from importlib.metadata import EntryPoint

import pytest

from groupmgr.assignors import (
    AssignorError,
    AssignorFailedError,
    AssignorImportError,
    DuplicateAssignorError,
    InvalidAssignmentError,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    TopicPartition,
    UnknownAssignorError,
    get_assignor,
    list_assignors,
    run_assignor,
    validate_assignment,
)
from groupmgr.assignors import registry

TP = TopicPartition
_module_ids = itertools.count()

PLUGIN_SOURCE = textwrap.dedent('''
    from groupmgr.assignors import PartitionAssignor

    class FirstMember(PartitionAssignor):
        """Everything to the lexicographically first member (valid when all subscribe to everything)."""
        name = "first"
        def assign(self, partitions_per_topic, subscriptions):
            first = min(subscriptions)
            out = {m: [] for m in subscriptions}
            out[first] = [(t, p) for t in sorted(partitions_per_topic) for p in range(partitions_per_topic[t])]
            return out

    class Misnamed(FirstMember):
        name = "something-else"

    class Broken(PartitionAssignor):
        name = "broken"
        def __init__(self):
            raise RuntimeError("no config")
        def assign(self, partitions_per_topic, subscriptions):
            return {}

    class NotAnAssignor:
        name = "nope"

    instance = FirstMember()
''')


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """Name of a fresh importable module holding test plug-ins."""
    name = f"scg_test_plugins_{next(_module_ids)}"
    (tmp_path / f"{name}.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def fake_entry_points(monkeypatch, *pairs):
    eps = [EntryPoint(name, value, registry.ENTRY_POINT_GROUP) for name, value in pairs]
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep for ep in eps if ep.group == group])


def sub(*topics):
    return Subscription(topics)


# --- lookup ---

@pytest.mark.parametrize("name, cls", [("range", RangeAssignor), ("roundrobin", RoundRobinAssignor),
                                       ("sticky", StickyAssignor)])
def test_builtins_resolve_with_real_entry_points(name, cls):
    assignor = get_assignor(name)
    assert type(assignor) is cls and assignor.name == name
    assert get_assignor(name) is not assignor  # a fresh instance each time


@pytest.mark.parametrize("name", ["range", "roundrobin", "sticky"])
def test_builtins_resolve_without_any_entry_points(monkeypatch, name):
    fake_entry_points(monkeypatch)
    assert get_assignor(name).name == name
    assert list_assignors() == ["range", "roundrobin", "sticky"]


def test_entry_point_plugin_is_listed_and_loaded(monkeypatch, plugin_module):
    fake_entry_points(monkeypatch, ("first", f"{plugin_module}:FirstMember"))
    assert list_assignors() == ["first", "range", "roundrobin", "sticky"]
    assert get_assignor("first").name == "first"


def test_module_class_spec(plugin_module):
    assert get_assignor(f"{plugin_module}:FirstMember").name == "first"
    assert get_assignor(f"{plugin_module}:instance").name == "first"


def test_unknown_name_lists_what_is_available(monkeypatch):
    fake_entry_points(monkeypatch)
    with pytest.raises(UnknownAssignorError) as info:
        get_assignor("rnage")
    assert info.value.condition == "UNKNOWN_ASSIGNOR"
    assert info.value.name == "rnage"
    assert info.value.available == ("range", "roundrobin", "sticky")


@pytest.mark.parametrize("attr, cause", [
    ("Missing", AttributeError), ("Broken", RuntimeError), ("NotAnAssignor", TypeError), ("Misnamed", None),
])
def test_bad_module_class_specs(plugin_module, attr, cause):
    if cause is None:  # loads fine through a spec: only registry names must match assignor.name
        assert get_assignor(f"{plugin_module}:{attr}").name == "something-else"
        return
    with pytest.raises(AssignorImportError) as info:
        get_assignor(f"{plugin_module}:{attr}")
    assert info.value.condition == "ASSIGNOR_IMPORT_FAILED"
    assert info.value.spec == f"{plugin_module}:{attr}"
    assert isinstance(info.value.cause, cause)


def test_missing_module_is_an_import_error():
    with pytest.raises(AssignorImportError) as info:
        get_assignor("no_such_module_xyz:Thing")
    assert isinstance(info.value.cause, ModuleNotFoundError)
    assert isinstance(info.value, ImportError)


def test_entry_point_name_must_match_assignor_name(monkeypatch, plugin_module):
    fake_entry_points(monkeypatch, ("renamed", f"{plugin_module}:Misnamed"))
    with pytest.raises(AssignorImportError) as info:
        get_assignor("renamed")
    assert isinstance(info.value.cause, ValueError)


def test_two_entry_points_same_name_different_targets(monkeypatch, plugin_module):
    fake_entry_points(monkeypatch, ("first", f"{plugin_module}:FirstMember"), ("first", "other.pkg:First"))
    with pytest.raises(DuplicateAssignorError) as info:
        get_assignor("first")
    assert info.value.condition == "DUPLICATE_ASSIGNOR"
    assert info.value.name == "first"
    assert info.value.sources == (f"{plugin_module}:FirstMember", "other.pkg:First")
    assert get_assignor("range").name == "range"  # other names are unaffected


def test_plugin_cannot_hijack_a_builtin_name(monkeypatch):
    fake_entry_points(monkeypatch, ("range", "evil.pkg:Range"))
    with pytest.raises(DuplicateAssignorError) as info:
        get_assignor("range")
    assert info.value.sources == ("groupmgr.assignors.range:RangeAssignor", "evil.pkg:Range")


def test_same_target_registered_twice_is_not_a_conflict(monkeypatch):
    target = "groupmgr.assignors.sticky:StickyAssignor"
    fake_entry_points(monkeypatch, ("sticky", target), ("sticky", target))
    assert get_assignor("sticky").name == "sticky"


def test_non_string_name_is_a_type_error():
    with pytest.raises(TypeError):
        get_assignor(None)


# --- run_assignor / validate_assignment ---

class Scripted(PartitionAssignor):
    """Returns a fixed result (or raises) so each invalid case can be produced."""

    name = "scripted"

    def __init__(self, result):
        self.result = result

    def assign(self, partitions_per_topic, subscriptions):
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


MEMBERS = {"a": sub("t"), "b": sub("t", "u")}
COUNTS = {"t": 2, "u": 1}


def test_valid_result_is_normalised_and_sorted():
    raw = {"b": [("u", 0), TP("t", 1)], "a": [("t", 0)]}
    assert run_assignor(Scripted(raw), COUNTS, MEMBERS) == {"a": [TP("t", 0)], "b": [TP("t", 1), TP("u", 0)]}


def test_any_iterable_of_pairs_is_accepted_and_the_result_shares_no_list():
    given = [TP("t", 1), TP("u", 0)]
    result = run_assignor(Scripted({"a": iter([("t", 0)]), "b": given}), COUNTS, MEMBERS)
    given.append(TP("t", 0))
    assert result == {"a": [TP("t", 0)], "b": [TP("t", 1), TP("u", 0)]}


def test_assignor_exception_becomes_assignor_failed():
    with pytest.raises(AssignorFailedError) as info:
        run_assignor(Scripted(ZeroDivisionError("boom")), COUNTS, MEMBERS)
    assert info.value.condition == "ASSIGNOR_FAILED"
    assert info.value.name == "scripted"
    assert isinstance(info.value.cause, ZeroDivisionError)


@pytest.mark.parametrize("raw, reason", [
    ({"a": [("t", 0), ("t", 1)], "b": [("t", 1), ("u", 0)]}, "partition_assigned_twice"),
    ({"a": [("t", 0), ("t", 0)], "b": [("t", 1), ("u", 0)]}, "partition_assigned_twice"),
    ({"a": [("t", 0), ("u", 0)], "b": [("t", 1)]}, "assigned_to_non_subscriber"),
    ({"a": [("t", 0)], "b": [("t", 1), ("u", 0)], "ghost": []}, "unknown_member"),
    ({"a": [("t", 0), ("t", 1), ("u", 0)]}, "missing_member"),
    ({"a": [("t", 0)], "b": [("u", 0)]}, "partition_unassigned"),
    ({"a": [("t", 0)], "b": [("t", 1), ("u", 0), ("u", 7)]}, "unknown_partition"),
    ({"a": [("t", 0)], "b": [("t", 1), ("u", 0), ("nope", 0)]}, "unknown_partition"),
    ({"a": [("t", 0), ("t", -1)], "b": [("t", 1), ("u", 0)]}, "unknown_partition"),
    ({"a": [("t", 0)], "b": [("t", 1), ("u", 0), ("u", 1)]}, "unknown_partition"),  # below t's count, not u's
    ({"a": [("t", 0)], "b": [("t", True), ("u", 0)]}, "bad_result_type"),
    ({"a": [("t", 0, 0)], "b": []}, "bad_result_type"),
    ({"a": None, "b": []}, "bad_result_type"),
    ({"a": [TP("t", 0)], "b": [TP("t", 1), TP("u", 0), tuple.__new__(TP, ("t", 0, 1))]}, "bad_result_type"),
    ({"a": [TP("t", 0), TP("t", 1)], "b": [tuple.__new__(TP, ("u",))]}, "bad_result_type"),
    ({"a": [("t", 0), ("t", 1)], b"b": [("u", 0)]}, "bad_result_type"),
    ({"a": "t0", "b": []}, "bad_result_type"),
    ({"a": [("t", "0")], "b": []}, "bad_result_type"),
    ([("t", 0)], "bad_result_type"),
])
def test_invalid_results_are_named(raw, reason):
    with pytest.raises(InvalidAssignmentError) as info:
        run_assignor(Scripted(raw), COUNTS, MEMBERS)
    assert info.value.reason == reason
    assert info.value.condition == f"INVALID_ASSIGNMENT.{reason.upper()}"
    assert info.value.name == "scripted"
    assert isinstance(info.value, AssignorError)


def test_unassigned_details_list_the_partitions():
    with pytest.raises(InvalidAssignmentError) as info:
        run_assignor(Scripted({"a": [], "b": [("u", 0)]}), COUNTS, MEMBERS)
    assert info.value.details == {"count": 2, "partitions": [TP("t", 0), TP("t", 1)]}


def test_assignor_sees_only_subscribed_topics_with_partitions():
    seen = {}

    class Spy(Scripted):
        def assign(self, partitions_per_topic, subscriptions):
            seen.update(partitions_per_topic)
            return {"a": [("t", 0), ("t", 1)], "b": [("u", 0)]}

    run_assignor(Spy(None), {"t": 2, "u": 1, "unsubscribed": 4, "zero": 0}, MEMBERS)
    assert seen == {"t": 2, "u": 1}


@pytest.mark.parametrize("counts, members", [
    ({"t": -1}, MEMBERS), ({"t": "2"}, MEMBERS), ({"t": True}, MEMBERS),
])
def test_malformed_counts_are_caller_errors(counts, members):
    with pytest.raises(ValueError):
        run_assignor(Scripted({}), counts, members)


@pytest.mark.parametrize("members", [{"a": ["t"]}, {1: sub("t")}, {"a": sub("t"), "b": None}])
def test_malformed_subscriptions_are_caller_errors(members):
    with pytest.raises(TypeError):
        run_assignor(Scripted({}), COUNTS, members)


def test_validate_assignment_directly():
    ok = validate_assignment("x", {"t": 1}, {"a": sub("t")}, {"a": [("t", 0)]})
    assert ok == {"a": [TP("t", 0)]}


def test_subscription_rejects_a_bare_string_topic_list():
    with pytest.raises(TypeError):
        Subscription("topic")


@pytest.mark.parametrize("body, cause", [
    ("raise RuntimeError('plug-in broken at import\\nsecond line')", RuntimeError),
    ("def broken(:\n    pass", SyntaxError),
    ("import sys\nsys.exit(0)", SystemExit),
    ("import sys\nsys.exit('bye')", SystemExit),
    ("raise KeyError('k')", KeyError),
])
def test_a_module_failing_on_import_is_an_import_error_with_a_one_line_summary(tmp_path, monkeypatch, body, cause):
    name = f"scg_test_broken_{next(_module_ids)}"
    (tmp_path / f"{name}.py").write_text(body + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AssignorImportError) as info:
        get_assignor(f"{name}:Anything")
    assert isinstance(info.value.cause, cause)
    assert info.value.condition == "ASSIGNOR_IMPORT_FAILED"
    assert "\n" not in str(info.value) and info.value.summary.startswith(cause.__name__)


def test_a_constructor_calling_sys_exit_is_an_import_error(tmp_path, monkeypatch):
    name = f"scg_test_exit_{next(_module_ids)}"
    (tmp_path / f"{name}.py").write_text(
        "import sys\nfrom groupmgr.assignors import PartitionAssignor\n"
        "class Quits(PartitionAssignor):\n    name = 'quits'\n"
        "    def __init__(self):\n        sys.exit(3)\n"
        "    def assign(self, partitions_per_topic, subscriptions):\n        return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AssignorImportError) as info:
        get_assignor(f"{name}:Quits")
    assert isinstance(info.value.cause, SystemExit) and "exit code 3" in info.value.summary


def test_keyboard_interrupt_during_import_is_not_swallowed(tmp_path, monkeypatch):
    name = f"scg_test_interrupt_{next(_module_ids)}"
    (tmp_path / f"{name}.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        get_assignor(f"{name}:Anything")
