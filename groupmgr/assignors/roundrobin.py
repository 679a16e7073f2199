"""Round-robin assignor: Apache Kafka's ``RoundRobinAssignor``.

All partitions of all subscribed topics are laid out sorted by topic, then
partition number. A circular iterator walks over *all* members in
:class:`~groupmgr.assignors.api.MemberInfo` order; each partition goes to the
next member subscribed to its topic (members not subscribed are skipped, and
the iterator position carries over from topic to topic).

Worked examples (reproduced by ``tests/unit/test_assignor_roundrobin.py``).
Members C0 and C1, topics t0 and t1 with 3 partitions each::

    C0: [t0p0, t0p2, t1p1]
    C1: [t0p1, t1p0, t1p2]

Uneven subscriptions: t0, t1, t2 with 1, 2, 3 partitions; C0 subscribes t0,
C1 subscribes t0 and t1, C2 subscribes t0, t1 and t2::

    C0: [t0p0]
    C1: [t1p0]
    C2: [t1p1, t2p0, t2p1, t2p2]

Guarantees: every partition of a subscribed topic with metadata is assigned
exactly once, only to a subscriber; with identical subscriptions the counts
differ by at most one; with static members whose count and subscriptions do
not change, the assignment is stable across restarts. Runs in O(P + M log M + S)
(S: total subscription size).
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import repeat
from typing import Mapping

from .api import (
    Assignment,
    PartitionAssignor,
    Subscription,
    TopicPartition,
    append_each,
    extend_each,
    java_string_key,
    sorted_member_ids,
    topic_partitions,
)


def subscriber_indexes(subscriptions: Mapping[str, Subscription], members: list[str]) -> dict[str, list[int]]:
    """Topic -> ascending indexes into ``members`` of its subscribers (lists may be shared: read only).

    O(members) when every member subscribes to the same topics, else
    O(sum of subscription sizes).
    """
    raws = [subscriptions[m].topics for m in members]
    if raws and raws.count(raws[0]) == len(raws):
        return dict.fromkeys(raws[0], list(range(len(members))))
    out: dict[str, list[int]] = {}
    for index, topics in enumerate(raws):
        for topic in dict.fromkeys(topics):
            out.setdefault(topic, []).append(index)
    return out


def _deal(
    partitions: list[TopicPartition],
    eligible: list[int],
    position: int,
    buckets: list[list[TopicPartition]],
) -> int:
    """Give non-empty ``partitions`` round-robin to ``eligible`` member indexes from ``position`` on.

    Equivalent to Kafka's loop "skip members not subscribed, assign to the
    next one", done with slices: the k-th partition goes to
    ``eligible[(first + k) % len(eligible)]`` where ``first`` is the first
    eligible index at or after ``position`` (circularly). Returns the index of
    the member that got the last partition.
    """
    first = bisect_left(eligible, position) % len(eligible)
    rotated = eligible[first:] + eligible[:first]
    step = len(rotated)
    if len(partitions) <= step:  # one each for the first len(partitions) members of the rotation
        append_each(buckets, rotated, partitions)
    else:  # member k of the rotation gets partitions[k::step]
        extend_each(buckets, rotated, map(partitions.__getitem__, map(slice, range(step), repeat(None), repeat(step))))
    return rotated[(len(partitions) - 1) % step]


def roundrobin_assign(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Assignment:
    """Kafka's round-robin assignment; lists are sorted by (topic, partition)."""
    members = sorted_member_ids(subscriptions)
    eligible_per_topic = subscriber_indexes(subscriptions, members)
    buckets: list[list[TopicPartition]] = [[] for _ in members]
    position = 0  # index of the member the circular iterator points at
    topics = sorted(eligible_per_topic, key=java_string_key)  # Kafka sorts topics as Java strings
    for topic in topics:
        count = partitions_per_topic.get(topic)
        if not count or count <= 0:
            continue
        last = _deal(topic_partitions(topic, count), eligible_per_topic[topic], position, buckets)
        position = (last + 1) % len(members)
    if topics != sorted(topics):  # Java and Python order differ: buckets are not sorted by (topic, partition)
        buckets = [sorted(bucket) for bucket in buckets]
    return dict(zip(members, buckets))


class RoundRobinAssignor(PartitionAssignor):
    """Protocol ``roundrobin``; same result as Kafka's ``RoundRobinAssignor`` for every input (see module doc)."""

    name = "roundrobin"

    def assign(self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Assignment:
        return roundrobin_assign(partitions_per_topic, subscriptions)
