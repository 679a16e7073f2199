"""Run an assignor safely and check its result before it is sent to the group.

The group leader calls :func:`run_assignor`, never ``assign`` directly, so a
buggy plug-in can make the rebalance fail with a named error but can never
make the leader send an invalid assignment (invariant 1: after every
rebalance each partition of the subscribed topics has exactly one owner).

Cooperative rounds (Kafka's ``RebalanceProtocol.COOPERATIVE``) get one
explicit allowance and one extra rule, both as in Kafka's
``ConsumerCoordinator.validateCooperativeAssignment``: a partition may be left
unassigned only while some member still reports it in ``owned_partitions``
(its owner changes: the owner revokes it now, the follow-up rebalance assigns
it), and no partition may be given to a member while another member revokes
it in the same round (``partition_moved_in_one_round``).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from itertools import chain
from operator import itemgetter
from typing import Any

from .api import (
    Assignment,
    PartitionAssignor,
    Subscription,
    TopicPartition,
    COOPERATIVE,
    EAGER,
    as_topic_partitions,
    rebalance_protocol,
    sorted_member_ids,
)
from .assignor_errors import AssignorFailedError, InvalidAssignmentError

_MAX_LISTED = 10  # partitions listed in error details; the full count is always given


def assignor_input(partitions_per_topic: Mapping[str, int],
                   subscriptions: Mapping[str, Subscription]) -> tuple[dict[str, int], dict[str, Subscription]]:
    """Checked plain-dict copies; like Kafka, only subscribed topics with > 0 partitions are kept.

    Raises TypeError / ValueError for malformed input (a caller bug, not an assignor's).
    """
    members = dict(subscriptions)
    if not (set(map(type, members)) <= {str} and set(map(type, members.values())) <= {Subscription}):
        for member_id, subscription in members.items():  # slow path: subclasses are fine too
            if not isinstance(member_id, str) or not isinstance(subscription, Subscription):
                raise TypeError(f"subscriptions must map str -> Subscription, got {member_id!r}: {subscription!r}")
    subscribed = set(chain.from_iterable(set(s.topics for s in members.values())))
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


def _as_list(name: str, member_id: str, partitions: Any) -> list[Any]:
    """A fresh list of ``partitions`` (the plug-in keeps no handle on what is validated)."""
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Iterable):
        raise _fail(name, "bad_result_type", member=member_id, value=repr(partitions)[:200])
    return list(partitions)


def _all_topic_partitions(items: list[Any]) -> bool:
    """Every item is a TopicPartition of (str, int); checked over ``map`` in C."""
    return (set(map(type, items)) <= {TopicPartition}
            and set(map(len, items)) <= {2}
            and set(map(type, map(itemgetter(0), items))) <= {str}
            and set(map(type, map(itemgetter(1), items))) <= {int})


def _as_topic_partitions(name: str, member_id: str, items: list[Any]) -> list[TopicPartition]:
    """``items`` as TopicPartitions; every item must be a (str, int) tuple (slow path: not all TopicPartition)."""
    shapes_ok = (
        all(issubclass(kind, tuple) for kind in set(map(type, items)))
        and set(map(len, items)) <= {2}
        and set(map(type, map(itemgetter(0), items))) <= {str}
        and set(map(type, map(itemgetter(1), items))) <= {int}
    )
    if not shapes_ok:
        bad = _first_bad_item(items)
        shown = tuple.__repr__(bad) if isinstance(bad, tuple) else repr(bad)  # a malformed namedtuple's repr fails
        raise _fail(name, "bad_result_type", member=member_id, value=shown[:200])
    return as_topic_partitions(items)


def _normalized(name: str, order: list[str], assignment: Mapping[str, Any]) -> Assignment:
    """Member -> sorted list of TopicPartition, keys in ``order``; raises bad_result_type for anything else.

    Type checks run once over all partitions, in C, so 100,000 partitions cost milliseconds."""
    given = list(map(assignment.__getitem__, order))
    if set(map(type, given)) <= {list}:
        lists = list(map(list.copy, given))
    else:
        lists = [_as_list(name, member_id, items) for member_id, items in zip(order, given)]
    if not _all_topic_partitions(list(chain.from_iterable(lists))):
        lists = [_as_topic_partitions(name, member_id, items) for member_id, items in zip(order, lists)]
    deque(map(list.sort, lists), maxlen=0)
    return dict(zip(order, lists))


def _check_members(name: str, assignment: Any, subscriptions: Mapping[str, Subscription]) -> None:
    if not isinstance(assignment, Mapping):
        raise _fail(name, "bad_result_type", value=type(assignment).__name__)
    if (len(assignment) == len(subscriptions) and set(map(type, assignment)) <= {str}
            and all(map(subscriptions.__contains__, assignment))):
        return
    not_ids = [m for m in assignment if type(m) is not str]
    if not_ids:
        raise _fail(name, "bad_result_type", value=repr(not_ids[0])[:200])
    unknown = sorted(m for m in assignment if m not in subscriptions)
    if unknown:
        raise _fail(name, "unknown_member", members=unknown)
    missing = sorted(m for m in subscriptions if m not in assignment)
    raise _fail(name, "missing_member", members=missing)


def _owner_of(assignment: Mapping[str, list[TopicPartition]], tp: TopicPartition) -> list[str]:
    return sorted(m for m, partitions in assignment.items() for _ in range(partitions.count(tp)))


def _stray_member(assignment: Mapping[str, list[TopicPartition]], subscriptions: Mapping[str, Subscription],
                  assigned_topics: set[str]) -> str | None:
    """The first member (sorted by id) holding a partition of a topic it does not subscribe to, else None."""
    raws = [subscriptions[m].topics for m in assignment]
    if raws and raws.count(raws[0]) == len(raws) and assigned_topics.issubset(raws[0]):
        return None  # one subscription for all, and it covers every assigned topic
    for member_id in sorted(assignment):
        if not set(map(itemgetter(0), assignment[member_id])).issubset(subscriptions[member_id].topics):
            return member_id
    return None


def _unknown_partitions(flat: list[TopicPartition], assigned_topics: set[str],
                        partitions_per_topic: Mapping[str, int]) -> list[TopicPartition]:
    """Sorted distinct items of ``flat`` outside ``0 <= partition < partitions_per_topic[topic]``.

    Fast when all is well: every topic known and every partition number
    below the smallest partition count of those topics (one C pass each).
    """
    if flat and assigned_topics.issubset(partitions_per_topic):
        numbers = list(map(itemgetter(1), flat))
        if min(numbers) >= 0 and max(numbers) < min(map(partitions_per_topic.__getitem__, assigned_topics)):
            return []
    elif not flat:
        return []
    return sorted({tp for tp in flat if not 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0)})


def _check_cooperative(name: str, assignment: Mapping[str, list[TopicPartition]],
                       subscriptions: Mapping[str, Subscription]) -> set[TopicPartition]:
    """Raise if a partition is added to one member while another revokes it; return every owned partition."""
    added: dict[TopicPartition, str] = {}
    revoked: dict[TopicPartition, str] = {}
    owned_anywhere: set[TopicPartition] = set()
    for member_id in sorted(assignment):
        owned = set(subscriptions[member_id].owned_partitions)
        owned_anywhere |= owned
        assigned = set(assignment[member_id])
        added.update((tp, member_id) for tp in assigned - owned)
        revoked.update((tp, member_id) for tp in owned - assigned)
    moved = sorted(set(added) & set(revoked))
    if moved:
        tp = moved[0]
        raise _fail(name, "partition_moved_in_one_round", partition=tp, members=[revoked[tp], added[tp]],
                    count=len(moved))
    return owned_anywhere


def _check_partitions(name: str, assignment: Mapping[str, list[TopicPartition]],
                      partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription],
                      protocol: str = EAGER) -> None:
    """Raise for the first broken rule in this order: unknown, non-subscriber, twice, (cooperative: moved in
    one round), unassigned (cooperative: unless still owned by some member)."""
    flat = list(chain.from_iterable(assignment.values()))
    assigned = set(flat)
    assigned_topics = set(map(itemgetter(0), flat))
    unknown = _unknown_partitions(flat, assigned_topics, partitions_per_topic)
    if unknown:
        raise _fail(name, "unknown_partition", member=_owner_of(assignment, unknown[0])[0], partition=unknown[0])
    stray_member = _stray_member(assignment, subscriptions, assigned_topics)
    if stray_member is not None:
        topics = subscriptions[stray_member].topics
        tp = next(tp for tp in assignment[stray_member] if tp.topic not in topics)
        raise _fail(name, "assigned_to_non_subscriber", member=stray_member, partition=tp)
    if len(flat) > len(assigned):
        counts = Counter(flat)
        tp = min(tp for tp, n in counts.items() if n > 1)
        raise _fail(name, "partition_assigned_twice", partition=tp, members=_owner_of(assignment, tp))
    withheld: set[TopicPartition] = set()
    if protocol == COOPERATIVE:
        withheld = _check_cooperative(name, assignment, subscriptions)
    if len(assigned) < sum(partitions_per_topic.values()):  # assigned is a subset: no unknown partitions
        unassigned = [TopicPartition(t, p) for t in sorted(partitions_per_topic)
                      for p in range(partitions_per_topic[t]) if (t, p) not in assigned and (t, p) not in withheld]
        if not unassigned:
            return
        raise _fail(name, "partition_unassigned", count=len(unassigned), partitions=unassigned[:_MAX_LISTED])


def validate_assignment(name: str, partitions_per_topic: Mapping[str, int],
                        subscriptions: Mapping[str, Subscription], assignment: Any,
                        protocol: str = EAGER) -> Assignment:
    """Check ``assignment`` and return it normalised: keys in MemberInfo order, lists sorted.

    ``partitions_per_topic`` must already be restricted to subscribed topics
    (see :func:`assignor_input`). Raises :class:`InvalidAssignmentError` unless
    every member appears exactly once, every listed partition exists, belongs
    to a topic its member subscribes to, and is listed once, and every
    partition of ``partitions_per_topic`` is listed. With ``protocol``
    :data:`~groupmgr.assignors.api.COOPERATIVE` the cooperative rules of the
    module doc apply instead of the last one. The result shares no list
    with ``assignment``.
    """
    if protocol not in (EAGER, COOPERATIVE):
        raise ValueError(f"unknown rebalance protocol {protocol!r}")
    _check_members(name, assignment, subscriptions)
    normalized = _normalized(name, sorted_member_ids(subscriptions), assignment)
    _check_partitions(name, normalized, partitions_per_topic, subscriptions, protocol)
    return normalized


def run_assignor(assignor: PartitionAssignor, partitions_per_topic: Mapping[str, int],
                 subscriptions: Mapping[str, Subscription], protocol: str | None = None) -> Assignment:
    """Run ``assignor.assign`` on checked input and return a validated, normalised assignment.

    ``protocol`` is the group's rebalance protocol; None means the highest
    one the assignor supports (:func:`~groupmgr.assignors.api.rebalance_protocol`),
    which for an eager-only assignor is the strict eager check.

    Raises :class:`AssignorFailedError` if ``assign`` raises, and
    :class:`InvalidAssignmentError` if its result breaks an invariant.
    """
    counts, members = assignor_input(partitions_per_topic, subscriptions)
    name = getattr(assignor, "name", type(assignor).__name__)
    if protocol is None:
        protocol = rebalance_protocol([assignor])
    try:
        raw = assignor.assign(dict(counts), dict(members))
    except Exception as exc:  # any plug-in failure becomes one named condition
        raise AssignorFailedError(name, exc) from exc
    return validate_assignment(name, counts, members, raw, protocol)
