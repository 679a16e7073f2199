"""Public assignor plug-in API (mirrors Kafka's ``ConsumerPartitionAssignor``).

A plug-in subclasses :class:`PartitionAssignor`, sets ``name`` (the protocol
name sent in JoinGroup) and implements :meth:`PartitionAssignor.assign`, a pure
function from partition counts and member subscriptions to an assignment.

Member order is defined once, by :class:`MemberInfo`, exactly like Kafka's
``AbstractPartitionAssignor.MemberInfo.compareTo``: static members (with a
``group_instance_id``) first, ordered by instance id, then dynamic members
ordered by member id. Strings compare like ``java.lang.String.compareTo``
(UTF-16 code units), so results equal Kafka's even for non-BMP characters.

Rebalance protocols, like Kafka's ``ConsumerPartitionAssignor.RebalanceProtocol``:
an assignor lists the protocols it supports in ``supported_protocols``
(default: eager only), and :func:`rebalance_protocol` picks the protocol a
member runs with from its configured assignors.
"""

from __future__ import annotations

import abc
import functools
from collections import deque
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Callable, Iterable, Mapping, Sequence

from groupmgr.core.topic_partition import TopicPartition


Assignment = dict[str, list[TopicPartition]]

EAGER = "eager"
"""Every member revokes all its partitions before it rejoins; the leader may move any partition."""
COOPERATIVE = "cooperative"
"""Members keep their partitions while they rejoin; a partition changes owner over two rebalances
(the old owner revokes it, the follow-up rebalance assigns it), never directly within one."""
PROTOCOLS = (EAGER, COOPERATIVE)  # lowest first, like Kafka's RebalanceProtocol ids (0, 1)

_new_tp = functools.partial(tuple.__new__, TopicPartition)


def as_topic_partitions(pairs: Iterable[tuple[str, int]]) -> list[TopicPartition]:
    """``pairs`` as TopicPartition values, built in C (about 0.2 us each); no type checks."""
    return list(map(_new_tp, pairs))


def topic_partitions(topic: str, count: int) -> list[TopicPartition]:
    """``[TopicPartition(topic, 0), ..., TopicPartition(topic, count - 1)]`` (empty if count <= 0)."""
    return as_topic_partitions(zip([topic] * max(count, 0), range(count)))


def extend_each(buckets: Mapping[str, list] | list[list], keys: Iterable, chunks: Iterable[list]) -> None:
    """``buckets[key].extend(chunk)`` for each (key, chunk) pair, stopping at the shorter input.

    The loop runs in C (``map``): assignors call this once per member and
    topic, which in a Python loop costs about a millisecond per 1,000 members.
    """
    deque(map(list.extend, map(buckets.__getitem__, keys), chunks), maxlen=0)


def append_each(buckets: Mapping[str, list] | list[list], keys: Iterable, items: Iterable) -> None:
    """``buckets[key].append(item)`` for each (key, item) pair, stopping at the shorter input; loops in C."""
    deque(map(list.append, map(buckets.__getitem__, keys), items), maxlen=0)


def java_string_key(text: str) -> bytes:
    """Sort key that orders strings like Java's ``String.compareTo`` (UTF-16 code units).

    Python compares code points; Java compares UTF-16 units, which differs only
    when characters beyond U+FFFF meet characters in U+E000..U+FFFF.
    """
    return text.encode("utf-16-be", "surrogatepass")


def _as_str_tuple(value: Iterable[str], what: str) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{what} must be a collection of strings, not a single {type(value).__name__}")
    items = tuple(value)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{what} must contain strings, got {item!r}")
    return items


def _as_partitions(value: Iterable[Sequence]) -> tuple[TopicPartition, ...]:
    items = tuple(value)
    if (set(map(type, items)) <= {TopicPartition}
            and set(map(type, map(itemgetter(0), items))) <= {str}
            and set(map(type, map(itemgetter(1), items))) <= {int}):
        return items  # fast path, checked in C: already well-typed TopicPartitions
    out = []
    for item in items:
        topic, partition = item
        if not isinstance(topic, str) or isinstance(partition, bool) or not isinstance(partition, int):
            raise TypeError(f"owned partition must be (str, int), got {item!r}")
        out.append(TopicPartition(topic, partition))
    return tuple(out)


@dataclass(frozen=True)
class Subscription:
    """What one member sent in JoinGroup (Kafka ``ConsumerPartitionAssignor.Subscription``).

    ``topics`` and ``owned_partitions`` are stored as tuples; ``generation_id``
    is the generation the owned partitions were assigned in (-1: unknown).
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    group_instance_id: str | None = None
    rack_id: str | None = None
    generation_id: int = -1

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", _as_str_tuple(self.topics, "topics"))
        object.__setattr__(self, "owned_partitions", _as_partitions(self.owned_partitions))
        if self.group_instance_id is not None and not isinstance(self.group_instance_id, str):
            raise TypeError(f"group_instance_id must be str or None, got {self.group_instance_id!r}")
        if isinstance(self.generation_id, bool) or not isinstance(self.generation_id, int):
            raise TypeError(f"generation_id must be int, got {self.generation_id!r}")


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class MemberInfo:
    """A member's identity with Kafka's ``MemberInfo.compareTo`` order.

    Static members (``group_instance_id`` set) sort before dynamic ones; two
    static members compare by instance id, two dynamic ones by member id.
    Kafka returns 0 for two static members with the same instance id (the
    broker never lets that happen); here the member id breaks that tie so the
    order is total and deterministic.
    """

    member_id: str
    group_instance_id: str | None = None
    _key: tuple = field(init=False, repr=False)

    def __post_init__(self) -> None:
        member = java_string_key(self.member_id)
        if self.group_instance_id is None:
            key = (1, b"", member)
        else:
            key = (0, java_string_key(self.group_instance_id), member)
        object.__setattr__(self, "_key", key)

    @classmethod
    def of(cls, member_id: str, subscription: Subscription) -> "MemberInfo":
        """The MemberInfo of ``member_id`` with ``subscription``'s instance id."""
        return cls(member_id, subscription.group_instance_id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemberInfo):
            return NotImplemented
        return self._key == other._key

    def __lt__(self, other: "MemberInfo") -> bool:
        if not isinstance(other, MemberInfo):
            return NotImplemented
        return self._key < other._key

    def __hash__(self) -> int:
        return hash(self._key)


def rebalance_protocol(assignors: Iterable["PartitionAssignor"]) -> str:
    """The rebalance protocol a member with these configured assignors runs: :data:`COOPERATIVE`
    only if every one supports it, else :data:`EAGER`.

    Kafka's ``ConsumerCoordinator`` does the same: the highest protocol
    that every configured assignor supports. Raises ValueError when the list
    is empty or the assignors share no protocol (Kafka refuses that
    configuration too). Pure: depends only on each ``supported_protocols``.

    A group changes protocol with Kafka's two rolling bounces: first every
    member lists both assignors (e.g. ``cooperative-sticky`` then ``range``),
    so all still run eager; then every member drops the eager-only one and
    from the next rebalance the group is cooperative. The group agrees on the
    assignor by name in JoinGroup; this function only decides how a member
    revokes (everything before joining, or only what its new assignment lacks).
    """
    common = set(PROTOCOLS)
    names = []
    for assignor in assignors:
        names.append(getattr(assignor, "name", repr(assignor)))
        common &= set(getattr(assignor, "supported_protocols", (EAGER,)))
    if not names:
        raise ValueError("no assignors configured")
    if not common:
        raise ValueError(f"assignors {names} have no common rebalance protocol")
    return COOPERATIVE if COOPERATIVE in common else EAGER


def _text_key(texts: Iterable[str]) -> Callable[[str], str | bytes] | None:
    """Sort key for these strings that orders like Java: ``None`` (plain ``str`` order) when all are ASCII.

    Python's code-point order equals Java's UTF-16 order unless a character
    beyond U+FFFF is involved; ASCII is the cheap sufficient test
    (``str.isascii`` is O(1) in CPython).
    """
    return None if "".join(texts).isascii() else java_string_key


def sorted_member_ids(subscriptions: Mapping[str, Subscription], member_ids: Iterable[str] | None = None) -> list[str]:
    """Member ids in :class:`MemberInfo` order (all of ``subscriptions`` unless ``member_ids`` given).

    The same order as ``sorted(MemberInfo.of(m, subscriptions[m]) ...)`` (a
    property test checks this), computed without building MemberInfo values:
    static members sorted by (instance id, member id), then dynamic members
    by member id, with plain string comparison when every string is ASCII.
    """
    ids = list(subscriptions.keys() if member_ids is None else member_ids)
    instances = [subscriptions[m].group_instance_id for m in ids]
    static = [(instance, m) for m, instance in zip(ids, instances) if instance is not None]
    dynamic = ids if not static else [m for m, instance in zip(ids, instances) if instance is None]
    key = _text_key(ids + [instance for instance, _ in static])
    dynamic = sorted(dynamic, key=key)
    if not static:
        return dynamic
    static.sort(key=None if key is None else lambda pair: (key(pair[0]), key(pair[1])))
    return [m for _, m in static] + dynamic


class PartitionAssignor(abc.ABC):
    """Abstract client-side partition assignor, run by the group leader.

    Contract of :meth:`assign`: pure (no I/O), deterministic, independent of
    the iteration order of its input mappings; every member id of
    ``subscriptions`` appears in the result (possibly with an empty list);
    topics absent from ``partitions_per_topic`` (no metadata) are skipped.
    """

    name: str = ""
    supported_protocols: tuple[str, ...] = (EAGER,)
    """Rebalance protocols this assignor can run under (Kafka's ``supportedProtocols()``).

    An assignor that lists :data:`COOPERATIVE` promises that :meth:`assign`
    never gives a member a partition that another member still owns (see
    ``Subscription.owned_partitions``); such a partition is left unassigned
    in this round and assigned in the follow-up rebalance."""

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        """Opaque bytes sent with this member's subscription (default: none)."""
        return None

    @abc.abstractmethod
    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> Assignment:
        """Map every member id to the partitions it should own."""

    def on_assignment(self, assignment: Sequence[TopicPartition], generation: int) -> None:
        """Called on every member with its own assignment after SyncGroup (default: no-op)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
