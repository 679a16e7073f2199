"""RoundRobinAssignor: Kafka's Javadoc examples and a port of Kafka's RoundRobinAssignorTest."""

from __future__ import annotations

import pytest

from groupmgr.assignors import RoundRobinAssignor, Subscription, TopicPartition, run_assignor
from groupmgr.assignors import roundrobin as roundrobin_module

TP = TopicPartition
ASSIGNOR = RoundRobinAssignor()


def assign(partitions_per_topic, subscriptions):
    return run_assignor(ASSIGNOR, partitions_per_topic, subscriptions)


def sub(*topics, instance=None):
    return Subscription(topics, group_instance_id=instance)


def short(partitions):
    return "[" + ", ".join(f"{t}p{p}" for t, p in partitions) + "]"


def docstring_lines(result):
    doc = " ".join(roundrobin_module.__doc__.split())
    return [f"{m}: {short(ps)}" for m, ps in result.items() if f"{m}: {short(ps)}" not in doc]


def test_docstring_example_identical_subscriptions():
    result = assign({"t0": 3, "t1": 3}, {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")})
    assert short(result["C0"]) == "[t0p0, t0p2, t1p1]"
    assert short(result["C1"]) == "[t0p1, t1p0, t1p2]"
    assert docstring_lines(result) == []


def test_docstring_example_uneven_subscriptions():
    result = assign({"t0": 1, "t1": 2, "t2": 3},
                    {"C0": sub("t0"), "C1": sub("t0", "t1"), "C2": sub("t0", "t1", "t2")})
    assert short(result["C0"]) == "[t0p0]"
    assert short(result["C1"]) == "[t1p0]"
    assert short(result["C2"]) == "[t1p1, t2p0, t2p1, t2p2]"
    assert docstring_lines(result) == []


def test_javadoc_static_members_three_consumers():
    members = {f"C{i}": sub("t0", "t1", instance=f"I{i}") for i in range(3)}
    result = assign({"t0": 3, "t1": 3}, members)
    assert [short(result[f"C{i}"]) for i in range(3)] == ["[t0p0, t1p0]", "[t0p1, t1p1]", "[t0p2, t1p2]"]


def test_javadoc_dynamic_members_shuffle_after_bounce():
    result = assign({"t0": 3, "t1": 3}, {"C5": sub("t0", "t1"), "C3": sub("t0", "t1"), "C4": sub("t0", "t1")})
    assert short(result["C3"]) == "[t0p0, t1p0]"
    assert short(result["C4"]) == "[t0p1, t1p1]"
    assert short(result["C5"]) == "[t0p2, t1p2]"


# --- port of RoundRobinAssignorTest ---

def test_one_consumer_no_topic():
    assert assign({}, {"consumer": sub()}) == {"consumer": []}


def test_one_consumer_nonexistent_topic():
    assert assign({}, {"consumer": sub("topic")}) == {"consumer": []}


def test_one_consumer_one_topic():
    assert assign({"topic": 3}, {"consumer": sub("topic")}) == {"consumer": [TP("topic", p) for p in range(3)]}


def test_only_assigns_partitions_from_subscribed_topics():
    result = assign({"topic": 3, "other": 3}, {"consumer": sub("topic")})
    assert result == {"consumer": [TP("topic", p) for p in range(3)]}


def test_one_consumer_multiple_topics():
    result = assign({"topic1": 1, "topic2": 2}, {"consumer": sub("topic1", "topic2")})
    assert result == {"consumer": [TP("topic1", 0), TP("topic2", 0), TP("topic2", 1)]}


def test_two_consumers_one_topic_one_partition():
    result = assign({"topic": 1}, {"consumer1": sub("topic"), "consumer2": sub("topic")})
    assert result == {"consumer1": [TP("topic", 0)], "consumer2": []}


def test_two_consumers_one_topic_two_partitions():
    result = assign({"topic": 2}, {"consumer1": sub("topic"), "consumer2": sub("topic")})
    assert result == {"consumer1": [TP("topic", 0)], "consumer2": [TP("topic", 1)]}


def test_multiple_consumers_mixed_topics():
    result = assign({"topic1": 3, "topic2": 2}, {
        "consumer1": sub("topic1"), "consumer2": sub("topic1", "topic2"), "consumer3": sub("topic1")})
    assert result == {
        "consumer1": [TP("topic1", 0)],
        "consumer2": [TP("topic1", 1), TP("topic2", 0), TP("topic2", 1)],
        "consumer3": [TP("topic1", 2)],
    }


def test_two_dynamic_consumers_two_topics_six_partitions():
    result = assign({"topic1": 3, "topic2": 3},
                    {"consumer1": sub("topic1", "topic2"), "consumer2": sub("topic1", "topic2")})
    assert result == {
        "consumer1": [TP("topic1", 0), TP("topic1", 2), TP("topic2", 1)],
        "consumer2": [TP("topic1", 1), TP("topic2", 0), TP("topic2", 2)],
    }


def test_two_static_consumers_two_topics_six_partitions():
    result = assign({"topic1": 3, "topic2": 3}, {
        "consumer-b": sub("topic1", "topic2", instance="instance1"),
        "consumer-a": sub("topic1", "topic2", instance="instance2"),
    })
    assert result["consumer-b"] == [TP("topic1", 0), TP("topic1", 2), TP("topic2", 1)]
    assert result["consumer-a"] == [TP("topic1", 1), TP("topic2", 0), TP("topic2", 2)]


def test_one_static_consumer_and_one_dynamic_consumer_two_topics_six_partitions():
    result = assign({"topic1": 3, "topic2": 3}, {
        "consumer-b": sub("topic1", "topic2", instance="instance1"),
        "consumer-a": sub("topic1", "topic2"),
    })
    assert result["consumer-b"] == [TP("topic1", 0), TP("topic1", 2), TP("topic2", 1)]
    assert result["consumer-a"] == [TP("topic1", 1), TP("topic2", 0), TP("topic2", 2)]


def test_static_member_round_robin_assignment_persistent():
    def group(dynamic_id):
        members = {f"consumer{i}": sub("topic1", "topic2", instance=f"instance{i}") for i in (1, 2, 3)}
        members[dynamic_id] = sub("topic1", "topic2")
        return members

    expected = {
        "consumer1": [TP("topic1", 0), TP("topic2", 1)],
        "consumer2": [TP("topic1", 1), TP("topic2", 2)],
        "consumer3": [TP("topic1", 2)],
        "consumer4": [TP("topic2", 0)],
    }
    assert assign({"topic1": 3, "topic2": 3}, group("consumer4")) == expected
    expected["consumer5"] = expected.pop("consumer4")
    assert assign({"topic1": 3, "topic2": 3}, group("consumer5")) == expected


def test_static_member_assignment_persistent_after_member_id_changes():
    def by_instance(members):
        result = assign({"topic1": 5, "topic2": 5}, members)
        return {members[m].group_instance_id: ps for m, ps in result.items()}

    before = {f"consumer{i}": sub("topic1", "topic2", instance=f"instance{i}") for i in (1, 2, 3)}
    expected = {
        "instance1": [TP("topic1", 0), TP("topic1", 3), TP("topic2", 1), TP("topic2", 4)],
        "instance2": [TP("topic1", 1), TP("topic1", 4), TP("topic2", 2)],
        "instance3": [TP("topic1", 2), TP("topic2", 0), TP("topic2", 3)],
    }
    assert by_instance(before) == expected
    after = {"consumer1": before["consumer1"], "consumer5": before["consumer2"], "consumer4": before["consumer3"]}
    assert by_instance(after) == expected


# --- behaviour beyond Kafka's test file ---

def test_iterator_position_carries_over_between_topics_while_skipping():
    # Members a, b, c; t1 only for a and c. After t0p0 -> a, the iterator is at b,
    # which skips t1 (not subscribed) so t1p0 -> c, then t1p1 -> a.
    result = assign({"t0": 1, "t1": 2}, {"a": sub("t0", "t1"), "b": sub("t0"), "c": sub("t0", "t1")})
    assert result == {"a": [TP("t0", 0), TP("t1", 1)], "b": [], "c": [TP("t1", 0)]}


def test_seed_article_hashcode_example_now_uses_sorted_order():
    """The seed describes ordering by hashCode; current Kafka sorts, so partitions go 0,1,2,3 round the members."""
    result = assign({"T1": 10}, {m: sub("T1") for m in ("C1-0", "C1-1", "C2-0", "C2-1")})
    assert {m: [p for _, p in ps] for m, ps in result.items()} == {
        "C1-0": [0, 4, 8], "C1-1": [1, 5, 9], "C2-0": [2, 6], "C2-1": [3, 7]}


def test_more_members_than_partitions():
    result = assign({"t": 2}, {f"c{i}": sub("t") for i in range(4)})
    assert result == {"c0": [TP("t", 0)], "c1": [TP("t", 1)], "c2": [], "c3": []}


def test_topics_without_metadata_are_skipped():
    result = assign({"t": 2}, {"a": sub("t", "gone"), "b": sub("gone")})
    assert result == {"a": [TP("t", 0), TP("t", 1)], "b": []}


@pytest.mark.parametrize("partitions, members", [(10, 3), (100, 7), (5, 5), (3, 8)])
def test_identical_subscriptions_balance_within_one(partitions, members):
    result = assign({"a": partitions, "b": partitions + 1}, {f"m{i}": sub("a", "b") for i in range(members)})
    counts = [len(ps) for ps in result.values()]
    assert max(counts) - min(counts) <= 1
