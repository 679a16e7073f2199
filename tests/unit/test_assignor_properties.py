"""Property tests of the assignor invariants, plus a cross-check against kafka-python's assignors.

Invariants (hypothesis): every subscribed partition with metadata is assigned
exactly once and only to a subscriber; every member appears; balance where
promised; results do not depend on input dict order; Range/RoundRobin equal a
literal port of Kafka's Java loops; Sticky keeps what it can.
"""

from __future__ import annotations

import random
from collections import Counter, namedtuple
from itertools import cycle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupmgr.assignors import (
    InvalidAssignmentError,
    MemberInfo,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    TopicPartition,
    run_assignor,
)
from groupmgr.assignors.api import sorted_member_ids

TP = TopicPartition
ASSIGNORS = [RangeAssignor(), RoundRobinAssignor(), StickyAssignor()]
# Topic names include a pair whose Java (UTF-16) and Python (code point) order differ.
TOPIC_POOL = ["a", "b", "c", "\uffff", "\U00010000"]
ASCII_TOPICS = ["a", "b", "c", "d", "e"]  # for kafka-python, which sorts topics as Python strings
PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Member ids mix ASCII with characters whose Java (UTF-16) and Python (code point) order differ.
member_ids = st.text(alphabet=st.sampled_from("abcXYZ09-_\uffff\U00010000"), min_size=1, max_size=4)
counts_strategy = st.dictionaries(st.sampled_from(TOPIC_POOL), st.integers(0, 12), max_size=5)


@st.composite
def groups(draw, equal_subscriptions=False, min_members=1):
    """(partitions_per_topic, subscriptions); topics may lack metadata; some members are static."""
    counts = draw(counts_strategy)
    ids = draw(st.lists(member_ids, min_size=min_members, max_size=8, unique=True))
    shared = draw(st.lists(st.sampled_from(TOPIC_POOL), max_size=5, unique=True))
    instances = iter(draw(st.lists(member_ids, min_size=len(ids), max_size=len(ids), unique=True)))
    subscriptions = {}
    for member_id in ids:
        topics = shared if equal_subscriptions else draw(st.lists(st.sampled_from(TOPIC_POOL), max_size=5))
        instance = next(instances) if draw(st.booleans()) else None
        subscriptions[member_id] = Subscription(topics, group_instance_id=instance)
    return counts, subscriptions


def shuffled(mapping, seed):
    items = list(mapping.items())
    random.Random(seed).shuffle(items)
    return dict(items)


def subscribed_partitions(counts, subscriptions):
    topics = {t for s in subscriptions.values() for t in s.topics}
    return {TP(t, p) for t in topics for p in range(counts.get(t, 0))}


def member_order(subscriptions):
    return [i.member_id for i in sorted(MemberInfo.of(m, s) for m, s in subscriptions.items())]


@PROPS
@given(group=groups(), seed=st.integers(0, 2**32))
def test_sorted_member_ids_is_memberinfo_order(group, seed):
    _, subscriptions = group
    assert sorted_member_ids(shuffled(subscriptions, seed)) == member_order(subscriptions)


# --- invariants for every assignor ---

@pytest.mark.parametrize("assignor", ASSIGNORS, ids=lambda a: a.name)
@PROPS
@given(group=groups(), seed=st.integers(0, 2**32))
def test_each_subscribed_partition_exactly_once_to_a_subscriber(assignor, group, seed):
    counts, subscriptions = group
    result = assignor.assign(counts, subscriptions)
    assert set(result) == set(subscriptions)
    flat = [tp for ps in result.values() for tp in ps]
    assert Counter(flat) == Counter(subscribed_partitions(counts, subscriptions))
    for member_id, partitions in result.items():
        assert {tp.topic for tp in partitions} <= set(subscriptions[member_id].topics)
    assert run_assignor(assignor, counts, subscriptions)  # the validator agrees


@pytest.mark.parametrize("assignor", ASSIGNORS, ids=lambda a: a.name)
@PROPS
@given(group=groups(), seed=st.integers(0, 2**32))
def test_result_independent_of_input_dict_order(assignor, group, seed):
    counts, subscriptions = group
    expected = run_assignor(assignor, counts, subscriptions)
    again = run_assignor(assignor, shuffled(counts, seed), shuffled(subscriptions, seed + 1))
    assert again == expected


@pytest.mark.parametrize("assignor", [RoundRobinAssignor(), StickyAssignor()], ids=lambda a: a.name)
@PROPS
@given(group=groups(equal_subscriptions=True))
def test_equal_subscriptions_balance_within_one(assignor, group):
    counts, subscriptions = group
    sizes = [len(ps) for ps in assignor.assign(counts, subscriptions).values()]
    assert max(sizes) - min(sizes) <= 1


@PROPS
@given(group=groups())
def test_range_balances_each_topic_and_favours_earlier_members(group):
    counts, subscriptions = group
    result = RangeAssignor().assign(counts, subscriptions)
    order = member_order(subscriptions)
    for topic, count in counts.items():
        subscribers = [m for m in order if topic in subscriptions[m].topics]
        sizes = [sum(1 for tp in result[m] if tp.topic == topic) for m in subscribers]
        assert sizes == sorted(sizes, reverse=True)
        assert not sizes or sizes[0] - sizes[-1] <= 1


CORRUPTIONS = ["twice", "drop", "out_of_range", "negative", "unknown_topic", "non_subscriber"]
EXPECTED_REASON = {"twice": "partition_assigned_twice", "drop": "partition_unassigned",
                   "out_of_range": "unknown_partition", "negative": "unknown_partition",
                   "unknown_topic": "unknown_partition", "non_subscriber": "assigned_to_non_subscriber"}


def corrupt(result, counts, subscriptions, how, data):
    """``result`` with one rule broken, or None when this group cannot show that breakage."""
    broken = {m: list(ps) for m, ps in result.items()}
    holders = [m for m in sorted(broken) if broken[m]]
    members = sorted(broken)
    if how == "twice" and holders:
        tp = data.draw(st.sampled_from(broken[holders[0]]))
        other = [m for m in members if m != holders[0] and tp.topic in subscriptions[m].topics]
        target = data.draw(st.sampled_from(other)) if other else holders[0]
        broken[target].append(tp)
    elif how == "drop" and holders:
        broken[holders[0]].pop(data.draw(st.integers(0, len(broken[holders[0]]) - 1)))
    elif how in ("out_of_range", "negative") and holders:
        tp = broken[holders[0]][0]
        broken[holders[0]].append(TP(tp.topic, counts[tp.topic] + data.draw(st.integers(0, 3))
                                     if how == "out_of_range" else -1))
    elif how == "unknown_topic" and members:
        broken[members[0]].append(TP("zz-not-a-topic", 0))
    elif how == "non_subscriber" and holders:
        tp = broken[holders[0]][0]
        outsiders = [m for m in members if tp.topic not in subscriptions[m].topics]
        if not outsiders:
            return None
        broken[holders[0]].remove(tp)
        broken[data.draw(st.sampled_from(outsiders))].append(tp)
    else:
        return None
    return broken


@pytest.mark.parametrize("how", CORRUPTIONS)
@PROPS
@given(group=groups(), data=st.data())
def test_validator_names_every_broken_rule(how, group, data):
    counts, subscriptions = group
    assignor = RoundRobinAssignor()
    broken = corrupt(assignor.assign(counts, subscriptions), counts, subscriptions, how, data)
    if broken is None:
        return
    with pytest.raises(InvalidAssignmentError) as info:
        run_assignor(Scripted(broken), counts, subscriptions)
    assert info.value.reason == EXPECTED_REASON[how]


class Scripted(RoundRobinAssignor):
    name = "scripted"

    def __init__(self, result):
        self.result = result

    def assign(self, partitions_per_topic, subscriptions):
        return self.result


# --- Range and RoundRobin equal literal ports of Kafka's Java loops ---

def java_range(counts, subscriptions):
    order = member_order(subscriptions)
    out = {m: [] for m in subscriptions}
    for topic, count in counts.items():
        consumers = list(dict.fromkeys(m for m in order if topic in subscriptions[m].topics))
        if not consumers or count <= 0:
            continue
        per, extra = divmod(count, len(consumers))
        for i, member in enumerate(consumers):
            start = per * i + min(i, extra)
            out[member] += [TP(topic, p) for p in range(start, start + per + (1 if i + 1 <= extra else 0))]
    return {m: sorted(ps) for m, ps in out.items()}


def java_roundrobin(counts, subscriptions):
    order = member_order(subscriptions)
    out = {m: [] for m in subscriptions}
    topics = sorted({t for s in subscriptions.values() for t in s.topics}, key=lambda t: t.encode("utf-16-be"))
    partitions = [TP(t, p) for t in topics for p in range(counts.get(t, 0))]
    ring = cycle(order)
    peek = next(ring) if order else None
    for tp in partitions:
        while tp.topic not in subscriptions[peek].topics:
            peek = next(ring)
        out[peek].append(tp)
        peek = next(ring)
    return {m: sorted(ps) for m, ps in out.items()}


@PROPS
@given(group=groups())
def test_range_equals_kafka_java_loop(group):
    counts, subscriptions = group
    assert RangeAssignor().assign(counts, subscriptions) == java_range(counts, subscriptions)


@PROPS
@given(group=groups())
def test_roundrobin_equals_kafka_java_loop(group):
    counts, subscriptions = group
    assert RoundRobinAssignor().assign(counts, subscriptions) == java_roundrobin(counts, subscriptions)


# --- sticky ---

def rejoined(result, subscriptions, generation=7):
    return {m: Subscription(s.topics, owned_partitions=result[m], generation_id=generation,
                            group_instance_id=s.group_instance_id) for m, s in subscriptions.items()}


@PROPS
@given(group=groups())
def test_sticky_second_run_with_same_members_moves_nothing(group):
    counts, subscriptions = group
    first = run_assignor(StickyAssignor(), counts, subscriptions)
    assert run_assignor(StickyAssignor(), counts, rejoined(first, subscriptions)) == first


@PROPS
@given(group=groups(equal_subscriptions=True, min_members=2), data=st.data())
def test_sticky_member_leaving_moves_only_its_partitions(group, data):
    counts, subscriptions = group
    first = run_assignor(StickyAssignor(), counts, subscriptions)
    leaver = data.draw(st.sampled_from(sorted(subscriptions)))
    remaining = rejoined(first, subscriptions)
    del remaining[leaver]
    second = run_assignor(StickyAssignor(), counts, remaining)
    for member_id in remaining:
        assert set(first[member_id]) <= set(second[member_id])
        assert set(second[member_id]) - set(first[member_id]) <= set(first[leaver])


@st.composite
def groups_with_claims(draw, equal_subscriptions=True):
    """A group plus arbitrary (overlapping, stale, out-of-range, unsubscribed) owned partitions."""
    counts, subscriptions = draw(groups(equal_subscriptions=equal_subscriptions))
    pool = [TP(t, p) for t in TOPIC_POOL for p in range(14)]
    claimed = {}
    for member_id, s in subscriptions.items():
        owned = draw(st.lists(st.sampled_from(pool), max_size=10))
        claimed[member_id] = Subscription(s.topics, owned_partitions=owned, generation_id=draw(st.integers(-1, 3)),
                                          group_instance_id=s.group_instance_id)
    return counts, claimed


@PROPS
@given(group=groups_with_claims(), seed=st.integers(0, 2**32))
def test_sticky_with_arbitrary_claims_is_valid_balanced_and_keeps_up_to_the_floor(group, seed):
    counts, subscriptions = group
    result = run_assignor(StickyAssignor(), counts, subscriptions)
    assert result == run_assignor(StickyAssignor(), shuffled(counts, seed), shuffled(subscriptions, seed))
    sizes = [len(ps) for ps in result.values()]
    assert max(sizes) - min(sizes) <= 1
    floor = min(sizes)
    valid = subscribed_partitions(counts, subscriptions)
    for member_id, s in subscriptions.items():
        rivals = [o for m, o in subscriptions.items() if m != member_id]
        uncontested = {tp for tp in s.owned_partitions if tp in valid and not any(
            tp in o.owned_partitions and o.generation_id >= s.generation_id for o in rivals)}
        assert len(uncontested & set(result[member_id])) >= min(len(uncontested), floor)


@PROPS
@given(group=groups_with_claims(equal_subscriptions=False), seed=st.integers(0, 2**32))
def test_sticky_uneven_members_with_equal_subscriptions_within_one(group, seed):
    counts, subscriptions = group
    result = run_assignor(StickyAssignor(), counts, subscriptions)
    assert result == run_assignor(StickyAssignor(), shuffled(counts, seed), shuffled(subscriptions, seed))
    by_topics = {}
    for member_id, s in subscriptions.items():
        key = frozenset(t for t in s.topics if counts.get(t, 0) > 0)
        by_topics.setdefault(key, []).append(len(result[member_id]))
    for sizes in by_topics.values():
        assert max(sizes) - min(sizes) <= 1


# --- kafka-python's assignors (kafka.coordinator.assignors.*) ---
# They agree with Kafka's Java assignors for dynamic-only groups (RoundRobin: only with identical
# subscriptions), but kafka-python 3.0.12 diverges in three documented cases:
#   1. static + dynamic members interleaved in the JoinGroup order: itertools.groupby without sorting
#      keeps only the LAST run of static (or dynamic) members, so earlier members get nothing;
#   2. RoundRobin with uneven subscriptions raises KeyError as soon as it must skip a member
#      (`member_id = next(member_iter)` binds an (instance_id, member_id) tuple), even on the
#      uneven example of its own docstring;
#   3. a subscription listing a topic twice: Range counts that member twice and overwrites its first
#      range, leaving partitions unassigned (Kafka's RangeAssignor de-duplicates members per topic).
# We implement Kafka's behaviour and test against it, never against kafka-python's.

# kafka-python is a declared dependency (setup.cfg): imported plainly, never skipped when missing
import kafka.coordinator.assignors.range as kafka_python_range  # noqa: E402
import kafka.coordinator.assignors.roundrobin as kafka_python_roundrobin  # noqa: E402

KpMember = namedtuple("KpMember", "member_id group_instance_id metadata")
KpSubscription = namedtuple("KpSubscription", "topics")


class KpCluster:
    """The one ClusterMetadata method the kafka-python assignors call."""

    def __init__(self, counts):
        self.counts = counts

    def partitions_for_topic(self, topic):
        return set(range(self.counts[topic])) if topic in self.counts else None


def kafka_python_assign(cls, counts, members):
    """Run a kafka-python assignor on [(member_id, instance_id, topics)] in that JoinGroup order."""
    kp_members = [KpMember(m, i, KpSubscription(list(t))) for m, i, t in members]
    out = cls.assign(KpCluster(counts), kp_members)
    return {m: sorted(TP(tp.topic, tp.partition) for tp in a.partitions()) for m, a in out.items()}


KP_CLASSES = [(kafka_python_range.RangePartitionAssignor, RangeAssignor()),
              (kafka_python_roundrobin.RoundRobinPartitionAssignor, RoundRobinAssignor())]


@pytest.mark.parametrize("kp_cls, ours", KP_CLASSES, ids=["range", "roundrobin"])
@PROPS
@given(counts=st.dictionaries(st.sampled_from(ASCII_TOPICS), st.integers(1, 12), max_size=5),
       ids=st.lists(st.text("abcxyz0123", min_size=1, max_size=4), min_size=1, max_size=6, unique=True),
       data=st.data())
def test_kafka_python_agrees_on_dynamic_only_groups(kp_cls, ours, counts, ids, data):
    shared = data.draw(st.lists(st.sampled_from(sorted(counts) or ASCII_TOPICS), max_size=5, unique=True))
    if ours.name == "range":  # kafka-python's RoundRobin cannot skip members (case 2 above)
        topics = {m: data.draw(st.lists(st.sampled_from(ASCII_TOPICS), max_size=5, unique=True)) for m in ids}
    else:
        topics = {m: shared for m in ids}
    expected = ours.assign(counts, {m: Subscription(t) for m, t in topics.items()})
    assert kafka_python_assign(kp_cls, counts, [(m, None, t) for m, t in topics.items()]) == expected


@pytest.mark.parametrize("kp_cls, ours", KP_CLASSES, ids=["range", "roundrobin"])
def test_kafka_python_drops_static_members_when_join_order_interleaves(kp_cls, ours):
    join_order = [("s1", "i1", ["t"]), ("d1", None, ["t"]), ("s2", "i2", ["t"])]
    theirs = kafka_python_assign(kp_cls, {"t": 6}, join_order)
    kafka = ours.assign({"t": 6}, {m: Subscription(t, group_instance_id=i) for m, i, t in join_order})
    assert theirs["s1"] == []  # kafka-python: s1 is lost by itertools.groupby
    assert [len(kafka[m]) for m in ("s1", "s2", "d1")] == [2, 2, 2]  # Kafka: i1, i2, then dynamic d1
    assert theirs != kafka


def test_kafka_python_range_loses_partitions_on_a_duplicated_topic():
    theirs = kafka_python_assign(kafka_python_range.RangePartitionAssignor, {"t": 4},
                                 [("a", None, ["t", "t"]), ("b", None, ["t"])])
    assert sorted(tp for ps in theirs.values() for tp in ps) == [TP("t", 2), TP("t", 3)]  # t0, t1 unassigned
    ours = RangeAssignor().assign({"t": 4}, {"a": Subscription(["t", "t"]), "b": Subscription(["t"])})
    assert ours == {"a": [TP("t", 0), TP("t", 1)], "b": [TP("t", 2), TP("t", 3)]}


def test_kafka_python_roundrobin_crashes_on_uneven_subscriptions():
    javadoc = [("C0", None, ["t0"]), ("C1", None, ["t0", "t1"]), ("C2", None, ["t0", "t1", "t2"])]
    counts = {"t0": 1, "t1": 2, "t2": 3}
    with pytest.raises(KeyError):
        kafka_python_assign(kafka_python_roundrobin.RoundRobinPartitionAssignor, counts, javadoc)
    ours = RoundRobinAssignor().assign(counts, {m: Subscription(t) for m, _, t in javadoc})
    assert ours["C2"] == [TP("t1", 1), TP("t2", 0), TP("t2", 1), TP("t2", 2)]
