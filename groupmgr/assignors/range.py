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

from itertools import chain
from typing import Iterable, Mapping

from .api import (
    Assignment,
    PartitionAssignor,
    Subscription,
    TopicPartition,
    append_each,
    extend_each,
    sorted_member_ids,
    topic_partitions,
)


def subscribers_per_topic(subscriptions: Mapping[str, Subscription]) -> dict[str, list[str]]:
    """Topic -> subscribed member ids in MemberInfo order, each member at most once per topic.

    Members are grouped by their (deduplicated) topic set first, so a group whose members share
    a subscription costs O(members + topics), not O(members x topics). Lists may be shared
    between topics: read only."""
    ordered = sorted_member_ids(subscriptions)
    raws = [subscriptions[member_id].topics for member_id in ordered]
    if raws and raws.count(raws[0]) == len(raws):  # the usual group: everybody subscribes to the same topics
        return {topic: ordered for topic in dict.fromkeys(raws[0])}
    distinct: dict[tuple[str, ...], tuple[str, ...]] = {}  # raw topics -> de-duplicated, computed once
    by_topics: dict[tuple[str, ...], list[str]] = {}
    for member_id, raw in zip(ordered, raws):
        topics = distinct.get(raw)
        if topics is None:
            topics = distinct[raw] = tuple(dict.fromkeys(raw))
        by_topics.setdefault(topics, []).append(member_id)
    if len(by_topics) == 1:
        (topics, members), = by_topics.items()
        return {topic: members for topic in topics}
    rank = {member_id: i for i, member_id in enumerate(ordered)}
    per_topic: dict[str, list[str]] = {}
    for topics, members in by_topics.items():
        for topic in topics:
            per_topic.setdefault(topic, []).extend(members)
    return {topic: sorted(members, key=rank.__getitem__) for topic, members in per_topic.items()}


def range_chunks(partitions: list[TopicPartition], members: int) -> Iterable[list[TopicPartition]]:
    """Consecutive ranges of ``partitions`` for ``members`` members in order: ``len div members`` each,
    the first ``len mod members`` one more; empty ranges at the end are left out.

    Built in C with the "grouper" idiom (``zip`` over one shared iterator), so
    1,000 members cost a fraction of a millisecond.
    """
    quota, extra = divmod(len(partitions), members)
    split = extra * (quota + 1)
    longer = map(list, zip(*[iter(partitions[:split])] * (quota + 1)))
    return chain(longer, map(list, zip(*[iter(partitions[split:])] * quota))) if quota else longer


def range_assign(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Assignment:
    """Kafka's range assignment; lists are sorted by (topic, partition)."""
    assignment: Assignment = {member_id: [] for member_id in subscriptions}
    per_topic = subscribers_per_topic(subscriptions)
    for topic in sorted(per_topic):
        count = partitions_per_topic.get(topic)
        if not count or count <= 0:
            continue
        members, partitions = per_topic[topic], topic_partitions(topic, count)
        if count <= len(members):  # one each for the first `count` members
            append_each(assignment, members, partitions)
        else:
            extend_each(assignment, members, range_chunks(partitions, len(members)))
    return assignment


class RangeAssignor(PartitionAssignor):
    """Protocol ``range``; same result as Kafka's ``RangeAssignor`` for every input (see module doc)."""

    name = "range"

    def assign(self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Assignment:
        return range_assign(partitions_per_topic, subscriptions)
