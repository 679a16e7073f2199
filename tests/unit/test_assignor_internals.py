"""Small pieces of the assignor package the property tests reach only indirectly: MemberInfo
identity, an assignor's repr, the sticky claim settlement, and what a bad_result_type error names."""
from __future__ import annotations

from collections import namedtuple

import pytest

from groupmgr.assignors import RangeAssignor, StickyAssignor, Subscription, TopicPartition as TP
from groupmgr.assignors.api import MemberInfo
from groupmgr.assignors.assignor_errors import InvalidAssignmentError
from groupmgr.assignors.sticky import _settle_conflicts
from groupmgr.assignors.validate import validate_assignment


def test_member_info_equality_and_hash_follow_the_identity():
    assert MemberInfo("a") == MemberInfo("a") and hash(MemberInfo("a")) == hash(MemberInfo("a"))
    assert MemberInfo("a", "i") == MemberInfo("a", "i") and MemberInfo("a", "i") != MemberInfo("a")
    assert MemberInfo("a") != MemberInfo("b")
    assert len({MemberInfo("a"), MemberInfo("a"), MemberInfo("b"), MemberInfo("b", "i")}) == 3
    assert MemberInfo("a") != "a" and MemberInfo.__eq__(MemberInfo("a"), "a") is NotImplemented


def test_assignor_repr_names_class_and_protocol():
    assert repr(RangeAssignor()) == "RangeAssignor(name='range')"
    assert repr(StickyAssignor()) == "StickyAssignor(name='sticky')"


def subs(*generations):
    return {f"m{i}": Subscription(("t",), generation_id=g) for i, g in enumerate(generations)}


@pytest.mark.parametrize("generations, owner", [
    ((1, 1, 2), 2),      # a tie at generation 1, then a higher claimer: it wins, the tie is void
    ((2, 1, 1), 0),      # the highest claimer first; lower ties later do not matter
    ((1, 2, 2), None),   # a tie at the top: nobody keeps it
    ((1, 1), None),
    ((3,), 0),
])
def test_each_claimed_partition_goes_to_its_unique_highest_generation_claimer(generations, owner):
    members = sorted(subs(*generations))
    owned = _settle_conflicts(subs(*generations), members, [[TP("t", 0)] for _ in members])
    assert owned == [[TP("t", 0)] if i == owner else [] for i in range(len(members))]


# -- bad_result_type names the member and the offending value -----------------------------------
def bad(result, members=("a", "b")):
    subscriptions = {m: Subscription(("t",)) for m in members}
    with pytest.raises(InvalidAssignmentError) as raised:
        validate_assignment("x", {"t": 2}, subscriptions, result)
    assert raised.value.reason == "bad_result_type"
    return raised.value.details


def test_a_result_that_is_not_a_collection_names_member_and_value():
    assert bad({"a": [TP("t", 0), TP("t", 1)], "b": "t0"}) == {"member": "b", "value": "'t0'"}
    assert bad({"a": 7, "b": []}) == {"member": "a", "value": "7"}
    assert bad({"a": (), "b": "x" * 300})["value"] == repr("x" * 300)[:200]


Malformed = namedtuple("Malformed", "topic partition extra")


@pytest.mark.parametrize("item, shown", [
    (("t", "0"), "('t', '0')"),          # partition not an int
    ((0, 0), "(0, 0)"),                  # topic not a str
    (("t", 0, 1), "('t', 0, 1)"),        # three fields
    (("t",), "('t',)"),                  # one field
    (["t", 0], "['t', 0]"),              # a list, not a tuple
    (("t", True), "('t', True)"),        # bool is not int here
    (Malformed("t", 0, 1), "('t', 0, 1)"),  # a namedtuple shown as a plain tuple
])
def test_the_first_malformed_partition_is_named(item, shown):
    good = TP("t", 1)
    details = bad({"a": [good, item], "b": []})
    assert details == {"member": "a", "value": shown}


def test_only_the_first_malformed_item_is_shown():
    assert bad({"a": [TP("t", 0), ("t", "1"), ("u", "2")], "b": []})["value"] == "('t', '1')"
    assert bad({"a": [], "b": [TP("t", 0), ("t", "x" * 400)]}) == {"member": "b", "value": repr(("t", "x" * 400))[:200]}


# -- the other rules name member and partition too -------------------------------------------------
def test_unknown_partition_names_its_owner_and_the_partition():
    subscriptions = {"a": Subscription(("t",)), "b": Subscription(("t",))}
    with pytest.raises(InvalidAssignmentError) as raised:
        validate_assignment("x", {"t": 2}, subscriptions, {"a": [TP("t", 0)], "b": [TP("t", 1), TP("t", 2)]})
    assert raised.value.reason == "unknown_partition"
    assert raised.value.details == {"member": "b", "partition": TP("t", 2)}


@pytest.mark.parametrize("bad", [TP("t", -1), TP("t", 0)])
def test_partition_numbers_are_checked_from_zero(bad):
    counts = {"t": 1} if bad.partition == 0 else {"t": 2}
    result = {"a": [bad] if bad.partition < 0 else [TP("t", 0)], "b": [TP("t", 1)] if bad.partition < 0 else []}
    subscriptions = {"a": Subscription(("t",)), "b": Subscription(("t",))}
    if bad.partition < 0:
        with pytest.raises(InvalidAssignmentError) as raised:
            validate_assignment("x", counts, subscriptions, result)
        assert raised.value.reason == "unknown_partition" and raised.value.details["partition"] == bad
    else:
        validate_assignment("x", counts, subscriptions, result)   # partition 0 is a real partition


def test_non_subscriber_names_the_member_and_its_first_foreign_partition():
    subscriptions = {"a": Subscription(("t",)), "b": Subscription(("u",))}
    result = {"a": [TP("t", 0)], "b": [TP("u", 0), TP("t", 1)]}
    with pytest.raises(InvalidAssignmentError) as raised:
        validate_assignment("x", {"t": 2, "u": 1}, subscriptions, result)
    assert raised.value.reason == "assigned_to_non_subscriber"
    assert raised.value.details == {"member": "b", "partition": TP("t", 1)}


def test_member_info_order_is_strict_and_handles_lone_surrogates():
    assert not MemberInfo("a") < MemberInfo("a") and MemberInfo("a") < MemberInfo("b")
    lone = "\ud800"                                       # not encodable without surrogatepass
    assert sorted([MemberInfo("\uffff"), MemberInfo(lone)]) == [MemberInfo(lone), MemberInfo("\uffff")]
