"""Range assignor: Apache Kafka's ``RangeAssignor`` (non-rack-aware path).

Works per topic. The topic's partitions are laid out in numeric order and the
members subscribed to that topic in :class:`~groupmgr.assignors.api.MemberInfo`
order (static members by instance id, then dynamic members by member id).
With P partitions and C such members each member gets ``P div C`` consecutive
partitions and the first ``P mod C`` members one more.

Worked example (reproduced by ``tests/unit/test_assignor_range.py``): members
C0 and C1, topics t0 and t1 with 3 partitions each::

    C0: [t0p0, t0p1, t1p0, t1p1]
    C1: [t0p2, t1p2]

Guarantees: every partition of a subscribed topic with metadata is assigned
exactly once, only to a subscriber; per topic the counts differ by at most
one; members earlier in MemberInfo order never get fewer partitions of a topic
than later ones (which is why C0 can end up with many more partitions overall
when topics are co-partitioned). Every member id appears in the result.
"""

from __future__ import annotations

from typing import Mapping

from .api import Assignment, PartitionAssignor, Subscription, TopicPartition, sorted_member_ids, topic_partitions


def subscribers_per_topic(subscriptions: Mapping[str, Subscription]) -> dict[str, list[str]]:
    """Topic -> subscribed member ids in MemberInfo order, each member at most once per topic.

    Members are grouped by their (deduplicated) topic set first, so a group whose members share
    a subscription costs O(members + topics), not O(members x topics)."""
    ordered = sorted_member_ids(subscriptions)
    by_topics: dict[tuple[str, ...], list[str]] = {}
    for member_id in ordered:
        by_topics.setdefault(tuple(dict.fromkeys(subscriptions[member_id].topics)), []).append(member_id)
    if len(by_topics) == 1:
        (topics, members), = by_topics.items()
        return {topic: members for topic in topics}
    rank = {member_id: i for i, member_id in enumerate(ordered)}
    per_topic: dict[str, list[str]] = {}
    for topics, members in by_topics.items():
        for topic in topics:
            per_topic.setdefault(topic, []).extend(members)
    return {topic: sorted(members, key=rank.__getitem__) for topic, members in per_topic.items()}


def range_split(partitions: list[TopicPartition], members: list[str]) -> dict[str, list[TopicPartition]]:
    """Split ``partitions`` into consecutive ranges: ``len div n`` each, first ``len mod n`` get one more."""
    quota, extra = divmod(len(partitions), len(members))
    out: dict[str, list[TopicPartition]] = {}
    start = 0
    for index, member_id in enumerate(members if quota else members[:extra]):  # skip empty ranges
        length = quota + (1 if index < extra else 0)
        out[member_id] = partitions[start:start + length]
        start += length
    return out


def range_assign(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Assignment:
    """Kafka's range assignment; lists are sorted by (topic, partition)."""
    assignment: Assignment = {member_id: [] for member_id in subscriptions}
    per_topic = subscribers_per_topic(subscriptions)
    for topic in sorted(per_topic):
        count = partitions_per_topic.get(topic)
        if not count or count <= 0:
            continue
        for member_id, chunk in range_split(topic_partitions(topic, count), per_topic[topic]).items():
            assignment[member_id].extend(chunk)
    return assignment


class RangeAssignor(PartitionAssignor):
    """Protocol ``range``; same result as Kafka's ``RangeAssignor`` for every input (see module doc)."""

    name = "range"

    def assign(self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Assignment:
        return range_assign(partitions_per_topic, subscriptions)
