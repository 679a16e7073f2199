"""RangeAssignor: Kafka's Javadoc example, Kafka's RangeAssignorTest cases, and the seed article's examples."""

from __future__ import annotations

import re

import pytest

from groupmgr.assignors import RangeAssignor, Subscription, TopicPartition, run_assignor
from groupmgr.assignors import range as range_module

TP = TopicPartition
ASSIGNOR = RangeAssignor()


def assign(partitions_per_topic, subscriptions):
    return run_assignor(ASSIGNOR, partitions_per_topic, subscriptions)


def sub(*topics, instance=None):
    return Subscription(topics, group_instance_id=instance)


def short(partitions):
    """Kafka Javadoc notation: [t0p0, t0p1]."""
    return "[" + ", ".join(f"{t}p{p}" for t, p in partitions) + "]"


def test_docstring_example_is_reproduced():
    result = assign({"t0": 3, "t1": 3}, {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")})
    assert result == {
        "C0": [TP("t0", 0), TP("t0", 1), TP("t1", 0), TP("t1", 1)],
        "C1": [TP("t0", 2), TP("t1", 2)],
    }
    doc = " ".join(range_module.__doc__.split())
    for member, partitions in result.items():
        assert f"{member}: {short(partitions)}" in doc


# --- seed article (000-kafka-consumer-groups...): 10 / 11 partitions over C1-0, C2-0, C3-0 ---

SEED_MEMBERS = ("C1-0", "C2-0", "C3-0")


def test_seed_ten_partitions_three_consumers_is_4_3_3():
    result = assign({"T1": 10}, {m: sub("T1") for m in SEED_MEMBERS})
    assert {m: [p for _, p in ps] for m, ps in result.items()} == {
        "C1-0": [0, 1, 2, 3], "C2-0": [4, 5, 6], "C3-0": [7, 8, 9],
    }


def test_seed_eleven_partitions_three_consumers_is_4_4_3():
    result = assign({"T1": 11}, {m: sub("T1") for m in SEED_MEMBERS})
    assert {m: [p for _, p in ps] for m, ps in result.items()} == {
        "C1-0": [0, 1, 2, 3], "C2-0": [4, 5, 6, 7], "C3-0": [8, 9, 10],
    }


def test_seed_two_topics_of_ten_first_consumer_gets_eight():
    result = assign({"T1": 10, "T2": 10}, {m: sub("T1", "T2") for m in SEED_MEMBERS})
    assert [len(result[m]) for m in SEED_MEMBERS] == [8, 6, 6]
    assert result["C1-0"] == [TP(t, p) for t in ("T1", "T2") for p in range(4)]
    assert result["C3-0"] == [TP(t, p) for t in ("T1", "T2") for p in (7, 8, 9)]


# --- ported from Kafka's RangeAssignorTest (non-rack cases) ---

def test_one_consumer_no_topic():
    assert assign({}, {"consumer1": sub()}) == {"consumer1": []}


def test_one_consumer_nonexistent_topic():
    assert assign({}, {"consumer1": sub("topic1")}) == {"consumer1": []}


def test_one_consumer_one_topic():
    assert assign({"topic1": 3}, {"consumer1": sub("topic1")}) == {
        "consumer1": [TP("topic1", 0), TP("topic1", 1), TP("topic1", 2)]}


def test_only_assigns_partitions_from_subscribed_topics():
    result = assign({"topic1": 3, "other": 3}, {"consumer1": sub("topic1")})
    assert result == {"consumer1": [TP("topic1", 0), TP("topic1", 1), TP("topic1", 2)]}


def test_one_consumer_multiple_topics():
    result = assign({"topic1": 1, "topic2": 2}, {"consumer1": sub("topic1", "topic2")})
    assert result == {"consumer1": [TP("topic1", 0), TP("topic2", 0), TP("topic2", 1)]}


def test_two_consumers_one_topic_one_partition():
    result = assign({"topic1": 1}, {"consumer1": sub("topic1"), "consumer2": sub("topic1")})
    assert result == {"consumer1": [TP("topic1", 0)], "consumer2": []}


def test_two_consumers_one_topic_two_partitions():
    result = assign({"topic1": 2}, {"consumer1": sub("topic1"), "consumer2": sub("topic1")})
    assert result == {"consumer1": [TP("topic1", 0)], "consumer2": [TP("topic1", 1)]}


def test_multiple_consumers_mixed_topics():
    result = assign({"topic1": 3, "topic2": 2}, {
        "consumer1": sub("topic1"), "consumer2": sub("topic1", "topic2"), "consumer3": sub("topic1")})
    assert result == {
        "consumer1": [TP("topic1", 0)],
        "consumer2": [TP("topic1", 1), TP("topic2", 0), TP("topic2", 1)],
        "consumer3": [TP("topic1", 2)],
    }


def test_two_static_consumers_compare_by_instance_id_not_member_id():
    result = assign({"topic1": 3, "topic2": 3}, {
        "consumer-b": sub("topic1", "topic2", instance="instance1"),
        "consumer-a": sub("topic1", "topic2", instance="instance2"),
    })
    assert result["consumer-b"] == [TP("topic1", 0), TP("topic1", 1), TP("topic2", 0), TP("topic2", 1)]
    assert result["consumer-a"] == [TP("topic1", 2), TP("topic2", 2)]


def test_static_consumer_sorts_before_dynamic_one():
    result = assign({"topic1": 3, "topic2": 3}, {
        "consumer-b": sub("topic1", "topic2", instance="instance1"),
        "consumer-a": sub("topic1", "topic2"),
    })
    assert result["consumer-b"] == [TP("topic1", 0), TP("topic1", 1), TP("topic2", 0), TP("topic2", 1)]
    assert result["consumer-a"] == [TP("topic1", 2), TP("topic2", 2)]


def static_group(dynamic_id):
    members = {f"consumer{i}": sub("topic1", "topic2", instance=f"instance{i}") for i in (1, 2, 3)}
    members[dynamic_id] = sub("topic1", "topic2")
    return members


def test_static_member_range_assignment_persistent():
    expected = {
        "consumer1": [TP("topic1", 0), TP("topic1", 1), TP("topic2", 0)],
        "consumer2": [TP("topic1", 2), TP("topic2", 1)],
        "consumer3": [TP("topic1", 3), TP("topic2", 2)],
        "consumer4": [TP("topic1", 4), TP("topic2", 3)],
    }
    assert assign({"topic1": 5, "topic2": 4}, static_group("consumer4")) == expected
    expected["consumer5"] = expected.pop("consumer4")
    assert assign({"topic1": 5, "topic2": 4}, static_group("consumer5")) == expected


def test_static_assignment_survives_member_id_changes():
    """Rolling bounce: member ids change, instance ids stay -> same partitions per instance."""
    def by_instance(members):
        result = assign({"topic1": 5, "topic2": 5}, members)
        return {members[m].group_instance_id: ps for m, ps in result.items()}

    before = {"consumer1": sub("topic1", "topic2", instance="instance1"),
              "consumer2": sub("topic1", "topic2", instance="instance2"),
              "consumer3": sub("topic1", "topic2", instance="instance3")}
    after = {"consumer1": before["consumer1"], "consumer5": before["consumer2"], "consumer4": before["consumer3"]}
    assert by_instance(before) == by_instance(after)


def test_dynamic_reorder_after_bounce_shuffles_like_the_javadoc_says():
    """Javadoc: C0 -> C3, C1 -> C2 after a bounce swaps the two dynamic members' ranges."""
    result = assign({"t0": 3, "t1": 3}, {"C3": sub("t0", "t1"), "C2": sub("t0", "t1")})
    assert short(result["C3"]) == "[t0p2, t1p2]"
    assert short(result["C2"]) == "[t0p0, t0p1, t1p0, t1p1]"


def test_more_members_than_partitions_leaves_the_last_ones_empty():
    result = assign({"t": 2}, {f"c{i}": sub("t") for i in range(5)})
    assert result == {"c0": [TP("t", 0)], "c1": [TP("t", 1)], "c2": [], "c3": [], "c4": []}


def test_topics_without_metadata_are_skipped_and_members_still_listed():
    result = assign({"t": 2, "empty": 0}, {"a": sub("t", "missing"), "b": sub("missing", "empty")})
    assert result == {"a": [TP("t", 0), TP("t", 1)], "b": []}


def test_duplicate_topic_in_subscription_counts_member_once():
    result = assign({"t": 4}, {"a": sub("t", "t"), "b": sub("t")})
    assert result == {"a": [TP("t", 0), TP("t", 1)], "b": [TP("t", 2), TP("t", 3)]}


def test_member_order_uses_java_utf16_order_not_code_points():
    # U+10000 is a surrogate pair (0xD800...) in UTF-16, so Java sorts it before U+FFFF.
    high, bmp = "\U00010000", "\uffff"
    result = assign({"t": 2}, {bmp: sub("t"), high: sub("t")})
    assert result == {high: [TP("t", 0)], bmp: [TP("t", 1)]}


@pytest.mark.parametrize("partitions, members, expected_counts", [
    (10, 3, [4, 3, 3]), (11, 3, [4, 4, 3]), (3, 3, [1, 1, 1]), (1, 3, [1, 0, 0]), (7, 1, [7]),
])
def test_counts_follow_div_and_mod(partitions, members, expected_counts):
    result = assign({"t": partitions}, {f"m{i}": sub("t") for i in range(members)})
    assert [len(result[f"m{i}"]) for i in range(members)] == expected_counts


def test_name_is_range():
    assert RangeAssignor.name == "range"
    assert re.fullmatch(r"[a-z]+", ASSIGNOR.name)
