"""Run an assignor safely and check its result before it is sent to the group.

The group leader calls :func:`run_assignor`, never ``assign`` directly, so a
buggy plug-in can make the rebalance fail with a named error but can never
make the leader send an invalid assignment (invariant 1: after every
rebalance each partition of the subscribed topics has exactly one owner).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from functools import partial
from operator import itemgetter
from typing import Any

from .api import Assignment, PartitionAssignor, Subscription, TopicPartition, sorted_member_ids
from .errors import AssignorFailedError, InvalidAssignmentError

_MAX_LISTED = 10  # partitions listed in error details; the full count is always given
_new_tp = partial(tuple.__new__, TopicPartition)


def assignor_input(partitions_per_topic: Mapping[str, int],
                   subscriptions: Mapping[str, Subscription]) -> tuple[dict[str, int], dict[str, Subscription]]:
    """Checked plain-dict copies; like Kafka, only subscribed topics with > 0 partitions are kept.

    Raises TypeError / ValueError for malformed input (a caller bug, not an assignor's).
    """
    members: dict[str, Subscription] = {}
    for member_id, subscription in subscriptions.items():
        if not isinstance(member_id, str) or not isinstance(subscription, Subscription):
            raise TypeError(f"subscriptions must map str -> Subscription, got {member_id!r}: {subscription!r}")
        members[member_id] = subscription
    subscribed = {topic for s in members.values() for topic in s.topics}
    counts: dict[str, int] = {}
    for topic, count in partitions_per_topic.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"partition count of topic {topic!r} must be an int >= 0, got {count!r}")
        if topic in subscribed and count > 0:
            counts[topic] = count
    return counts, members


def _fail(name: str, reason: str, **details: Any) -> InvalidAssignmentError:
    return InvalidAssignmentError(name, reason, details)


def _first_bad_item(items: list[Any]) -> Any:
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and type(item[0]) is str and type(item[1]) is int):
            return item
    return None


def _normalized_list(name: str, member_id: str, partitions: Any) -> list[TopicPartition]:
    """``partitions`` as a list of TopicPartition; every item must be a (str, int) tuple.

    Type checks run over ``map`` in C, so 100,000 partitions cost milliseconds.
    """
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Iterable):
        raise _fail(name, "bad_result_type", member=member_id, value=repr(partitions)[:200])
    items = list(partitions)
    shapes_ok = (
        all(issubclass(kind, tuple) for kind in set(map(type, items)))
        and set(map(len, items)) <= {2}
        and set(map(type, map(itemgetter(0), items))) <= {str}
        and set(map(type, map(itemgetter(1), items))) <= {int}
    )
    if not shapes_ok:
        raise _fail(name, "bad_result_type", member=member_id, value=repr(_first_bad_item(items))[:200])
    if set(map(type, items)) <= {TopicPartition}:
        return items
    return list(map(_new_tp, items))


def _check_members(name: str, assignment: Any, subscriptions: Mapping[str, Subscription]) -> None:
    if not isinstance(assignment, Mapping):
        raise _fail(name, "bad_result_type", value=type(assignment).__name__)
    unknown = sorted(m for m in assignment if m not in subscriptions)
    if unknown:
        raise _fail(name, "unknown_member", members=unknown)
    missing = sorted(m for m in subscriptions if m not in assignment)
    if missing:
        raise _fail(name, "missing_member", members=missing)


def _owner_of(assignment: Mapping[str, list[TopicPartition]], tp: TopicPartition) -> list[str]:
    return sorted(m for m, partitions in assignment.items() for _ in range(partitions.count(tp)))


def _check_partitions(name: str, assignment: Mapping[str, list[TopicPartition]],
                      partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> None:
    """Raise for the first broken rule in this order: unknown, non-subscriber, twice, unassigned."""
    assigned: set[TopicPartition] = set().union(*assignment.values()) if assignment else set()
    unknown = sorted(tp for tp in assigned if not 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0))
    if unknown:
        raise _fail(name, "unknown_partition", member=_owner_of(assignment, unknown[0])[0], partition=unknown[0])
    for member_id in sorted(assignment):
        stray = set(map(itemgetter(0), assignment[member_id])).difference(subscriptions[member_id].topics)
        if stray:
            tp = next(tp for tp in assignment[member_id] if tp.topic in stray)
            raise _fail(name, "assigned_to_non_subscriber", member=member_id, partition=tp)
    if sum(map(len, assignment.values())) > len(assigned):
        counts = Counter(tp for partitions in assignment.values() for tp in partitions)
        tp = min(tp for tp, n in counts.items() if n > 1)
        raise _fail(name, "partition_assigned_twice", partition=tp, members=_owner_of(assignment, tp))
    if len(assigned) < sum(partitions_per_topic.values()):  # assigned is a subset: no unknown partitions
        unassigned = [TopicPartition(t, p) for t in sorted(partitions_per_topic)
                      for p in range(partitions_per_topic[t]) if (t, p) not in assigned]
        raise _fail(name, "partition_unassigned", count=len(unassigned), partitions=unassigned[:_MAX_LISTED])


def validate_assignment(name: str, partitions_per_topic: Mapping[str, int],
                        subscriptions: Mapping[str, Subscription], assignment: Any) -> Assignment:
    """Check ``assignment`` and return it normalised: keys in MemberInfo order, lists sorted.

    ``partitions_per_topic`` must already be restricted to subscribed topics
    (see :func:`assignor_input`). Raises :class:`InvalidAssignmentError` unless
    every member appears exactly once, every listed partition exists, belongs
    to a topic its member subscribes to, and is listed once, and every
    partition of ``partitions_per_topic`` is listed.
    """
    _check_members(name, assignment, subscriptions)
    normalized = {m: sorted(_normalized_list(name, m, assignment[m])) for m in sorted_member_ids(subscriptions)}
    _check_partitions(name, normalized, partitions_per_topic, subscriptions)
    return normalized


def run_assignor(assignor: PartitionAssignor, partitions_per_topic: Mapping[str, int],
                 subscriptions: Mapping[str, Subscription]) -> Assignment:
    """Run ``assignor.assign`` on checked input and return a validated, normalised assignment.

    Raises :class:`AssignorFailedError` if ``assign`` raises, and
    :class:`InvalidAssignmentError` if its result breaks an invariant.
    """
    counts, members = assignor_input(partitions_per_topic, subscriptions)
    name = getattr(assignor, "name", type(assignor).__name__)
    try:
        raw = assignor.assign(dict(counts), dict(members))
    except Exception as exc:  # any plug-in failure becomes one named condition
        raise AssignorFailedError(name, exc) from exc
    return validate_assignment(name, counts, members, raw)
