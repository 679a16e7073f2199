"""Subscription's checked fields and the member-order helper of the assignor API
(groupmgr.assignors.api): what a plug-in and the leader may rely on, matched on types and values."""
from __future__ import annotations

import pytest

from groupmgr.assignors import Subscription, TopicPartition as TP
from groupmgr.assignors.api import sorted_member_ids


# -- owned partitions ------------------------------------------------------------------------------
def test_owned_partitions_given_as_pairs_become_a_tuple_of_topic_partitions():
    subscription = Subscription(("t", "u"), owned_partitions=[("t", 0), ["u", 3], TP("t", 1)])
    assert subscription.owned_partitions == (TP("t", 0), TP("u", 3), TP("t", 1))
    assert type(subscription.owned_partitions) is tuple
    assert all(type(tp) is TP for tp in subscription.owned_partitions)
    assert [(tp.topic, tp.partition) for tp in subscription.owned_partitions] == [("t", 0), ("u", 3), ("t", 1)]


def test_owned_topic_partitions_are_kept_as_a_tuple():
    owned = [TP("t", 0), TP("t", 1)]
    subscription = Subscription(("t",), owned_partitions=owned)
    assert subscription.owned_partitions == (TP("t", 0), TP("t", 1)) and type(subscription.owned_partitions) is tuple
    assert Subscription(("t",), owned_partitions=iter(owned)).owned_partitions == (TP("t", 0), TP("t", 1))
    assert Subscription(("t",)).owned_partitions == ()


@pytest.mark.parametrize("item", [
    ("t", "0"),        # partition not an int
    (0, 0),            # topic not a str
    (b"t", 0),         # bytes are not a topic
    ("t", True),       # bool is not a partition number
    ("t", 1.0),
    (None, 0),
])
def test_an_owned_partition_that_is_not_str_int_is_a_type_error(item):
    with pytest.raises(TypeError):
        Subscription(("t",), owned_partitions=[("t", 0), item])
    with pytest.raises(TypeError):
        Subscription(("t",), owned_partitions=[item])


def test_topic_partitions_with_wrong_field_types_are_refused_too():
    with pytest.raises(TypeError):
        Subscription(("t",), owned_partitions=[TP("t", "0")])
    with pytest.raises(TypeError):
        Subscription(("t",), owned_partitions=[TP(0, 0)])


# -- the other fields ----------------------------------------------------------------------------------
@pytest.mark.parametrize("generation_id", ["1", 1.0, None, True, False])
def test_generation_id_must_be_a_plain_int(generation_id):
    with pytest.raises(TypeError):
        Subscription(("t",), generation_id=generation_id)


def test_generation_id_and_instance_id_are_kept():
    subscription = Subscription(("t",), generation_id=7, group_instance_id="i-1")
    assert (subscription.generation_id, subscription.group_instance_id) == (7, "i-1")
    assert Subscription(("t",), generation_id=-1).generation_id == -1


@pytest.mark.parametrize("topics", ["t", b"t", ["t", 1], [None]])
def test_topics_must_be_a_collection_of_strings(topics):
    with pytest.raises(TypeError):
        Subscription(topics)


def test_topics_are_stored_as_a_tuple_in_the_given_order():
    assert Subscription(["u", "t"]).topics == ("u", "t")


@pytest.mark.parametrize("instance", [1, b"i", ("i",)])
def test_group_instance_id_must_be_a_string_or_none(instance):
    with pytest.raises(TypeError):
        Subscription(("t",), group_instance_id=instance)


# -- member order of a chosen subset ---------------------------------------------------------------------
def test_sorted_member_ids_orders_only_the_given_members():
    subscriptions = {m: Subscription(("t",)) for m in ("c", "a", "b", "d")}
    subscriptions["s"] = Subscription(("t",), group_instance_id="i-0")
    assert sorted_member_ids(subscriptions) == ["s", "a", "b", "c", "d"]
    assert sorted_member_ids(subscriptions, ["d", "b"]) == ["b", "d"]
    assert sorted_member_ids(subscriptions, iter(["c", "s", "a"])) == ["s", "a", "c"]
    assert sorted_member_ids(subscriptions, []) == []
