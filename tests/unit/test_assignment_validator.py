"""The assignment validator's error details, its input checks and how it names an assignor
(groupmgr.assignors.validate): every rule is matched on its reason and its structured details, never
on message text."""
from __future__ import annotations

import pytest

from groupmgr.assignors import (AssignorFailedError, InvalidAssignmentError, Subscription,
                                TopicPartition as TP, run_assignor, validate_assignment)
from groupmgr.assignors.validate import assignor_input


def failure(result, counts=None, members=("a", "b")):
    subscriptions = {m: Subscription(("t",)) for m in members}
    with pytest.raises(InvalidAssignmentError) as raised:
        validate_assignment("x", {"t": 2} if counts is None else counts, subscriptions, result)
    return raised.value.reason, raised.value.details


# -- the member keys -------------------------------------------------------------------------------
@pytest.mark.parametrize("result, kind", [([TP("t", 0)], "list"), (None, "NoneType"), ("ab", "str")])
def test_a_result_that_is_not_a_mapping_names_its_type(result, kind):
    assert failure(result) == ("bad_result_type", {"value": kind})


def test_a_member_key_that_is_not_a_string_is_shown_cut_to_200_characters():
    assert failure({"a": [TP("t", 0)], 7: [TP("t", 1)]}) == ("bad_result_type", {"value": "7"})
    long_key = ("k" * 300,)
    reason, details = failure({"a": [], "b": [], long_key: []})
    assert (reason, details) == ("bad_result_type", {"value": repr(long_key)[:200]})
    assert len(details["value"]) == 200


def test_unknown_members_are_listed_sorted():
    result = {"a": [TP("t", 0)], "b": [TP("t", 1)], "z": [], "y": []}
    assert failure(result) == ("unknown_member", {"members": ["y", "z"]})


def test_missing_members_are_listed_sorted():
    assert failure({"b": [TP("t", 0), TP("t", 1)]}, members=("a", "b", "c")) == (
        "missing_member", {"members": ["a", "c"]})


def test_an_unknown_member_is_reported_before_a_missing_one():
    assert failure({"a": [TP("t", 0), TP("t", 1)], "z": []}) == ("unknown_member", {"members": ["z"]})


# -- partitions listed twice -------------------------------------------------------------------------
def test_a_partition_listed_twice_names_the_partition_and_both_owners():
    result = {"a": [TP("t", 0), TP("t", 1)], "b": [TP("t", 1)]}
    assert failure(result) == ("partition_assigned_twice", {"partition": TP("t", 1), "members": ["a", "b"]})


def test_the_lowest_duplicated_partition_is_named_and_one_member_twice_is_listed_twice():
    result = {"a": [TP("t", 0), TP("t", 2), TP("t", 2)], "b": [TP("t", 1), TP("t", 3), TP("t", 3)]}
    assert failure(result, counts={"t": 4}) == (
        "partition_assigned_twice", {"partition": TP("t", 2), "members": ["a", "a"]})


# -- input checks ------------------------------------------------------------------------------------
def test_input_keeps_only_subscribed_topics_with_partitions():
    subscriptions = {"a": Subscription(("t", "u", "empty")), "b": Subscription(("u",))}
    counts, members = assignor_input({"t": 2, "u": 1, "empty": 0, "other": 3}, subscriptions)
    assert counts == {"t": 2, "u": 1}
    assert members == subscriptions and members is not subscriptions


@pytest.mark.parametrize("count", [-1, True, 1.0, "2", None])
def test_a_partition_count_that_is_not_an_int_from_zero_is_a_value_error(count):
    with pytest.raises(ValueError):
        assignor_input({"t": count}, {"a": Subscription(("t",))})


@pytest.mark.parametrize("subscriptions", [{1: Subscription(("t",))}, {"a": ("t",)}, {"a": None}])
def test_subscriptions_must_map_strings_to_subscriptions(subscriptions):
    with pytest.raises(TypeError):
        assignor_input({"t": 1}, subscriptions)


def test_subclasses_of_str_and_subscription_are_accepted():
    class Name(str):
        pass

    class Sub(Subscription):
        pass

    counts, members = assignor_input({"t": 1}, {Name("a"): Sub(("t",))})
    assert counts == {"t": 1} and list(members) == ["a"]


# -- the name an assignor is known by -----------------------------------------------------------------
class Nameless:
    """A duck-typed assignor without a ``name`` attribute (not a PartitionAssignor subclass)."""

    def __init__(self, result=None, error=None):
        self.result, self.error = result, error

    def assign(self, partitions_per_topic, subscriptions):
        if self.error is not None:
            raise self.error
        return self.result


def test_an_assignor_without_a_name_is_named_by_its_class():
    subscriptions = {"a": Subscription(("t",))}
    with pytest.raises(AssignorFailedError) as failed:
        run_assignor(Nameless(error=LookupError("bug")), {"t": 1}, subscriptions)
    assert failed.value.name == "Nameless" and isinstance(failed.value.cause, LookupError)
    with pytest.raises(InvalidAssignmentError) as invalid:
        run_assignor(Nameless(result={"a": []}), {"t": 1}, subscriptions)
    assert invalid.value.name == "Nameless" and invalid.value.reason == "partition_unassigned"
    assert run_assignor(Nameless(result={"a": [("t", 0)]}), {"t": 1}, subscriptions) == {"a": [TP("t", 0)]}
