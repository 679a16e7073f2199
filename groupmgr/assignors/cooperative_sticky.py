"""Cooperative sticky assignor: Apache Kafka's ``CooperativeStickyAssignor`` (non-rack-aware path).

A port of Kafka's ``AbstractStickyAssignor`` (constrained assignment when
every member has the same subscription, general assignment otherwise) plus
``CooperativeStickyAssignor.adjustAssignment``: every partition whose owner
changes is left out of its new owner's list in this round. Its old owner
revokes it (it is missing from the old owner's new assignment), the group
rebalances again, and then, no longer owned, it is assigned. So the result of
one round can leave partitions unassigned, but only partitions some member
still reports as owned; :func:`~groupmgr.assignors.validate.run_assignor`
checks exactly that for cooperative assignors.

It differs from this package's ``sticky`` (its own, faster algorithm): here
the results equal Kafka's, including Kafka's member order, which is the
iteration order of Java's ``HashMap`` over member ids. That order is
reproduced from ``String.hashCode``; members whose ids fall into the same
hash bucket are taken in :class:`~groupmgr.assignors.api.MemberInfo` order
(Java takes them in JoinGroup order, which an assignor here does not see), so
the result never depends on the order of the input mapping.

Inputs per member (Kafka's ``MemberData``): ``Subscription.owned_partitions``
and the generation they were owned in, ``Subscription.generation_id`` or,
when that is -1 (a v0/v1 subscription), the 4-byte big-endian generation
Kafka's assignor writes to ``user_data`` (:meth:`CooperativeStickyAssignor.subscription_user_data`
writes the same bytes, so Java members read ours). A partition claimed by
two members of the same generation is owned by neither; of two generations
the higher wins.

Where this port deliberately differs from Kafka's code (Kafka's tests never
reach these cases): claims on partition numbers beyond a topic's count are
ignored (Kafka would assign a nonexistent partition); the highest generation
is taken from this call's subscriptions only (Kafka's instance remembers it
across calls); a member's lists come back in Kafka's order, unsorted.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, insort
from collections import deque
from typing import Iterable, Mapping, Sequence

from .api import (
    COOPERATIVE,
    EAGER,
    Assignment,
    PartitionAssignor,
    Subscription,
    TopicPartition,
    java_string_key,
    sorted_member_ids,
)

DEFAULT_GENERATION = -1
_GENERATION = struct.Struct(">i")  # Kafka's COOPERATIVE_STICKY_ASSIGNOR_USER_DATA_V0: one INT32


# --- Java's hashing, for Kafka's HashMap / HashSet iteration orders ---

def java_hash(text: str) -> int:
    """``java.lang.String.hashCode`` (over UTF-16 code units, 32-bit signed overflow)."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _bucket(h: int, capacity: int) -> int:
    """The table slot ``java.util.HashMap`` uses for hash ``h`` (``h ^ h >>> 16``, masked)."""
    h &= 0xFFFFFFFF
    return (h ^ (h >> 16)) & (capacity - 1)


def _capacity(size: int) -> int:
    """Table size of a default ``HashMap`` after ``size`` puts (16, doubled past 3/4 full)."""
    capacity = 16
    while size > capacity * 3 // 4:
        capacity *= 2
    return capacity


def java_map_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Member ids in the iteration order of a Java ``HashMap`` holding them (see module doc)."""
    members = sorted_member_ids(subscriptions)
    capacity = _capacity(len(members))
    rank = {m: i for i, m in enumerate(members)}
    return sorted(members, key=lambda m: (_bucket(java_hash(m), capacity), rank[m]))


def _tp_hash(tp: TopicPartition) -> int:
    """``org.apache.kafka.common.TopicPartition.hashCode``."""
    return (31 * (31 + tp.partition) + java_hash(tp.topic)) & 0xFFFFFFFF


class _JavaHashSet:
    """Just enough of ``java.util.HashSet<TopicPartition>`` to know what ``iterator().next()`` returns.

    Java iterates slot by slot, each slot in insertion order; the table grows
    (never shrinks) when more than 3/4 full and a split keeps relative order.
    """

    def __init__(self) -> None:
        self._seq: dict[TopicPartition, int] = {}
        self._next = 0
        self._capacity = 16

    def add(self, tp: TopicPartition) -> None:
        if tp not in self._seq:
            self._seq[tp] = self._next
            self._next += 1
            self._capacity = max(self._capacity, _capacity(len(self._seq)))

    def remove(self, tp: TopicPartition) -> None:
        self._seq.pop(tp, None)

    def __bool__(self) -> bool:
        return bool(self._seq)

    def first(self) -> TopicPartition:
        return min(self._seq, key=lambda tp: (_bucket(_tp_hash(tp), self._capacity), self._seq[tp]))


# --- member data ---

def member_generation(subscription: Subscription) -> int:
    """The generation of a member's owned partitions: ``generation_id``, else the one in ``user_data``, else -1."""
    if subscription.generation_id >= 0:
        return subscription.generation_id
    data = subscription.user_data
    if data is None:
        return DEFAULT_GENERATION
    try:
        return _GENERATION.unpack_from(data)[0]
    except struct.error:
        return DEFAULT_GENERATION


def _key(member: str) -> bytes:
    return java_string_key(member)


def _owned_by_member(counts: Mapping[str, int], subscriptions: Mapping[str, Subscription], order: Sequence[str],
                     generations: Mapping[str, int]) -> tuple[bool, dict[str, list[TopicPartition]], set[TopicPartition]]:
    """Kafka's ``allSubscriptionsEqual``: (all equal?, valid owned partitions per member, doubly claimed partitions)."""
    equal = True
    subscribed: set[str] = set()
    owned: dict[str, list[TopicPartition]] = {}
    previous_owner: dict[TopicPartition, str] = {}
    doubly_claimed: set[TopicPartition] = set()
    for member in order:
        topics = subscriptions[member].topics
        if not subscribed:
            subscribed = set(topics)
        elif equal and not (len(topics) == len(subscribed) and subscribed.issuperset(topics)):
            equal = False
        generation = generations[member]
        mine: list[TopicPartition] = []
        owned[member] = mine
        for tp in subscriptions[member].owned_partitions:
            if not 0 <= tp.partition < counts.get(tp.topic, 0):
                continue
            other = previous_owner.get(tp)
            if other is None:
                mine.append(tp)
                previous_owner[tp] = member
                continue
            other_generation = max(subscriptions[other].generation_id, DEFAULT_GENERATION)  # as Kafka: the field
            if generation == other_generation:
                doubly_claimed.add(tp)
                _discard(owned[other], tp)
                previous_owner[tp] = member
            elif generation > other_generation:
                mine.append(tp)
                _discard(owned[other], tp)
                previous_owner[tp] = member
    return equal, owned, doubly_claimed


def _discard(items: list, item: object) -> None:
    """``java.util.List.remove(Object)``: drop the first occurrence, if any."""
    try:
        items.remove(item)
    except ValueError:
        pass


def _all_partitions(counts: Mapping[str, int], topics: Iterable[str]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for topic in topics for p in range(counts[topic])]


# --- constrained assignment (equal subscriptions) ---

def constrained_assign(counts: Mapping[str, int], order: Sequence[str], owned: dict[str, list[TopicPartition]],
                       doubly_claimed: set[TopicPartition]) -> tuple[Assignment, dict[TopicPartition, str]]:
    """Kafka's ``ConstrainedAssignmentBuilder``: (assignment, partitions changing owner -> new owner)."""
    total = sum(counts.values())
    members = len(order)
    min_quota, extra = divmod(total, members)
    max_quota = min_quota + (1 if extra else 0)
    over_min = 0
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in order}
    assigned: set[TopicPartition] = set()
    maybe_revoked: dict[TopicPartition, str] = {}
    under_min: list[str] = []
    exactly_min: list[str] = []
    for member in order:
        mine = sorted(owned[member], key=lambda tp: (tp.partition, java_string_key(tp.topic)))
        mine = [tp for tp in mine if tp not in doubly_claimed]
        if len(mine) < min_quota:
            keep = len(mine)
            under_min.append(member)
        elif len(mine) >= max_quota and over_min < extra:
            over_min += 1
            if over_min == extra:
                exactly_min.clear()
            keep = max_quota
        else:
            keep = min_quota
            if over_min < extra:
                exactly_min.append(member)
        assignment[member].extend(mine[:keep])
        assigned.update(mine[:keep])
        for tp in mine[keep:]:
            maybe_revoked[tp] = member
    unassigned = [tp for tp in _all_partitions(counts, sorted(counts, key=java_string_key)) if tp not in assigned]
    under_min.sort(key=_key)
    exactly_min.sort(key=_key)
    waiting = deque(exactly_min)
    transferring: dict[TopicPartition, str] = {}
    position = 0  # a java.util.Iterator over under_min: the next index it returns
    for tp in unassigned:
        if position < len(under_min):
            member = under_min[position]
            position += 1
            from_iterator = True
        elif not under_min and not waiting:
            raise RuntimeError("no more unfilled members to assign to (Kafka raises IllegalStateException)")
        elif not under_min:
            member = waiting.popleft()
            from_iterator = False
        else:
            member, position, from_iterator = under_min[0], 1, True
        assignment[member].append(tp)
        if maybe_revoked.get(tp, member) != member or tp in doubly_claimed:
            transferring[tp] = member
        count = len(assignment[member])
        if count == min_quota and from_iterator:
            position -= 1
            del under_min[position]
            waiting.append(member)
        elif count == max_quota:
            over_min += 1
    return assignment, transferring


# --- general assignment (different subscriptions) ---

class _SortedMembers:
    """Kafka's ``TreeSet`` of members ordered by (number of partitions, member id)."""

    def __init__(self, sizes: Mapping[str, list]) -> None:
        self._sizes = sizes
        self._entries: list[tuple[int, bytes, str]] = []
        self._entry: dict[str, tuple[int, bytes, str]] = {}

    def add(self, member: str) -> None:
        if member not in self._entry:
            entry = (len(self._sizes[member]), _key(member), member)
            self._entry[member] = entry
            insort(self._entries, entry)

    def remove(self, member: str) -> None:
        entry = self._entry.pop(member, None)
        if entry is not None:
            del self._entries[bisect_left(self._entries, entry)]

    def __iter__(self):
        return iter([entry[2] for entry in self._entries])

    def first(self) -> str:
        return self._entries[0][2]

    def last(self) -> str:
        return self._entries[-1][2]


class _PartitionMovements:
    """Kafka's ``PartitionMovements``: which partitions moved between which two members in this round."""

    def __init__(self) -> None:
        self.moves: dict[TopicPartition, tuple[str, str]] = {}
        self.by_topic: dict[str, dict[tuple[str, str], _JavaHashSet]] = {}

    def _remove(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.moves.pop(tp)
        pairs = self.by_topic[tp.topic]
        pairs[pair].remove(tp)
        if not pairs[pair]:
            del pairs[pair]
        if not pairs:
            del self.by_topic[tp.topic]
        return pair

    def _add(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.moves[tp] = pair
        self.by_topic.setdefault(tp.topic, {}).setdefault(pair, _JavaHashSet()).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.moves:
            source, _ = self._remove(tp)
            if source != new:
                self._add(tp, (source, new))
        else:
            self._add(tp, (old, new))

    def partition_to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        """Move back a partition that went the other way rather than start a new movement."""
        pairs = self.by_topic.get(tp.topic)
        if pairs is None:
            return tp
        if tp in self.moves:
            old = self.moves[tp][0]
        reverse = pairs.get((new, old))
        return tp if reverse is None else reverse.first()


class _General:
    """Kafka's ``GeneralAssignmentBuilder`` (without racks)."""

    def __init__(self, counts: Mapping[str, int], subscriptions: Mapping[str, Subscription], order: Sequence[str],
                 owned: dict[str, list[TopicPartition]], generations: Mapping[str, int]) -> None:
        self.counts = counts
        self.total = sum(counts.values())
        self.subscriptions = subscriptions
        self.order = order
        self.generations = generations
        self.topic_members: dict[str, list[str]] = {topic: [] for topic in counts}
        self.member_topics: dict[str, list[str]] = {}
        for member in order:
            topics = [t for t in subscriptions[member].topics if t in counts]
            self.member_topics[member] = topics
            for topic in topics:
                self.topic_members[topic].append(member)
        self.current = owned
        self.partition_member = {tp: m for m in order for tp in owned[m]}
        topics_sorted = sorted(counts, key=lambda t: (len(self.topic_members[t]), java_string_key(t)))
        self.all_partitions = _all_partitions(counts, topics_sorted)
        self.sorted_members = _SortedMembers(self.current)
        self.movements = _PartitionMovements()
        self.revocation_required = False

    def build(self) -> Assignment:
        previous = self._previous_owners()
        assigned: set[TopicPartition] = set()
        for member in self.order:
            topics = self.subscriptions[member].topics
            kept = []
            for tp in self.current[member]:
                if tp.topic not in topics:
                    self.revocation_required = True  # Kafka keeps partition_member[tp] here; so do we
                else:
                    kept.append(tp)
                    assigned.add(tp)
            self.current[member][:] = kept
        unassigned = [tp for tp in self.all_partitions if tp not in assigned]
        for member in self.current:
            self.sorted_members.add(member)
        self._balance(previous, unassigned)
        return self.current

    def _previous_owners(self) -> dict[TopicPartition, tuple[str, int]]:
        """Kafka's ``prepopulateCurrentAssignments``: claims of members below the highest generation."""
        highest = max([DEFAULT_GENERATION, *self.generations.values()])
        previous: dict[TopicPartition, tuple[str, int]] = {}
        for member in self.order:
            generation = self.generations[member]
            if generation >= highest:
                continue
            for tp in self.subscriptions[member].owned_partitions:
                if tp not in previous or generation > previous[tp][1]:
                    previous[tp] = (member, generation)
        return previous

    def _max_size(self, member: str) -> int:
        topics = self.member_topics[member]
        return self.total if len(topics) == len(self.counts) else sum(self.counts[t] for t in topics)

    def _is_balanced(self) -> bool:
        current = self.current
        if len(current[self.sorted_members.first()]) >= len(current[self.sorted_members.last()]) - 1:
            return True
        owner = {tp: m for m, tps in current.items() for tp in tps}
        for member in self.sorted_members:
            size = len(current[member])
            if size == self._max_size(member):
                continue
            mine = set(current[member])
            for topic in self.member_topics[member]:
                for p in range(self.counts[topic]):
                    tp = TopicPartition(topic, p)
                    other = owner.get(tp)
                    if tp not in mine and other is not None and size + 1 < len(current[other]):
                        return False
        return True

    def _assign(self, tp: TopicPartition) -> None:
        for member in self.sorted_members:
            if tp.topic in self.member_topics[member]:
                self.sorted_members.remove(member)
                self.current[member].append(tp)
                self.partition_member[tp] = member
                self.sorted_members.add(member)
                return

    def _can_move(self, member: str) -> bool:
        partitions = self.current[member]
        if len(partitions) < self._max_size(member):
            return True
        return any(len(self.topic_members[tp.topic]) >= 2 for tp in partitions)

    def _balance(self, previous: dict[TopicPartition, tuple[str, int]], unassigned: list[TopicPartition]) -> None:
        initializing = not self.current[self.sorted_members.last()]
        for tp in unassigned:
            if self.topic_members[tp.topic]:
                self._assign(tp)
        fixed_topics = {t for t, members in self.topic_members.items() if len(members) < 2}
        reassignable = [tp for tp in self.all_partitions if tp.topic not in fixed_topics]
        unassigned = [tp for tp in unassigned if tp.topic not in fixed_topics]
        fixed: dict[str, list[TopicPartition]] = {}
        for member in self.member_topics:
            if not self._can_move(member):
                self.sorted_members.remove(member)
                fixed[member] = self.current.pop(member)
        before = {m: list(tps) for m, tps in self.current.items()}
        before_owner = dict(self.partition_member)
        if not self.revocation_required:
            self._reassign_all(unassigned, previous)
        performed = self._reassign_all(reassignable, previous)
        if not initializing and performed and _balance_score(self.current) >= _balance_score(before):
            self.current.clear()
            self.current.update(before)
            self.partition_member = before_owner
        self.current.update(fixed)

    def _reassign_all(self, partitions: list[TopicPartition], previous: dict[TopicPartition, tuple[str, int]]) -> bool:
        performed = False
        modified = True
        while modified:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                member = self.partition_member.get(tp)
                if member is None or member not in self.current:
                    continue
                size = len(self.current[member])
                earlier = previous.get(tp)
                if earlier is not None and earlier[0] in self.current and size > len(self.current[earlier[0]]) + 1:
                    self._reassign(tp, earlier[0])
                    performed = modified = True
                    continue
                for other in self.topic_members[tp.topic]:
                    if other in self.current and size > len(self.current[other]) + 1:
                        new = next(m for m in self.sorted_members if tp.topic in self.member_topics[m])
                        self._reassign(tp, new)
                        performed = modified = True
                        break
        return performed

    def _reassign(self, tp: TopicPartition, new: str) -> None:
        moved = self.movements.partition_to_move(tp, self.partition_member[tp], new)
        old = self.partition_member[moved]
        self.sorted_members.remove(old)
        self.sorted_members.remove(new)
        self.movements.move(moved, old, new)
        _discard(self.current[old], moved)
        self.current[new].append(moved)
        self.partition_member[moved] = new
        self.sorted_members.add(new)
        self.sorted_members.add(old)


def _balance_score(assignment: Mapping[str, list]) -> int:
    """Sum over member pairs of the difference of their partition counts (Kafka's ``getBalanceScore``)."""
    sizes = sorted(map(len, assignment.values()))
    n = len(sizes)
    return sum((2 * i - n + 1) * size for i, size in enumerate(sizes))


def _transferring(subscriptions: Mapping[str, Subscription], assignment: Assignment) -> dict[TopicPartition, str]:
    """Kafka's ``computePartitionsTransferringOwnership``: added to one member while another revokes it."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for member, partitions in assignment.items():
        owned = subscriptions[member].owned_partitions
        owned_set, assigned_set = set(owned), set(partitions)
        added.update((tp, member) for tp in partitions if tp not in owned_set)
        revoked.update(tp for tp in owned if tp not in assigned_set)
    return {tp: member for tp, member in added.items() if tp in revoked}


def sticky_assignment(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
                      ) -> tuple[Assignment, dict[TopicPartition, str]]:
    """Kafka's ``AbstractStickyAssignor`` result before the cooperative adjustment, and the partitions
    changing owner (partition -> new owner). Lists are in Kafka's order."""
    order = java_map_order(subscriptions)
    if not order:
        return {}, {}
    subscribed = {t for s in subscriptions.values() for t in s.topics}
    counts = {t: n for t, n in partitions_per_topic.items() if t in subscribed and n and n > 0}
    generations = {m: member_generation(subscriptions[m]) for m in order}
    equal, owned, doubly_claimed = _owned_by_member(counts, subscriptions, order, generations)
    if equal:
        return constrained_assign(counts, order, owned, doubly_claimed)
    result = _General(counts, subscriptions, order, owned, generations).build()
    assignment = {m: result[m] for m in order}
    return assignment, _transferring(subscriptions, assignment)


def cooperative_sticky_assign(partitions_per_topic: Mapping[str, int],
                              subscriptions: Mapping[str, Subscription]) -> Assignment:
    """Kafka's ``CooperativeStickyAssignor.assignPartitions``: the sticky assignment without the
    partitions that change owner in this round (see module doc)."""
    assignment, transferring = sticky_assignment(partitions_per_topic, subscriptions)
    for tp, member in transferring.items():
        _discard(assignment[member], tp)
    return dict(sorted(assignment.items(), key=lambda item: _key(item[0])))


class CooperativeStickyAssignor(PartitionAssignor):
    """Protocol ``cooperative-sticky``: Kafka's ``CooperativeStickyAssignor`` (see module doc).

    Supports both rebalance protocols: under eager every member revokes all
    its partitions before it rejoins, owns nothing, and so the result is a
    complete assignment; under cooperative it withholds partitions that change
    owner until the follow-up rebalance.
    """

    name = "cooperative-sticky"
    supported_protocols = (COOPERATIVE, EAGER)

    def __init__(self) -> None:
        self.generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        """The generation of this member's last assignment, 4 bytes big-endian (as Kafka encodes it)."""
        return _GENERATION.pack(self.generation)

    def on_assignment(self, assignment: Sequence[TopicPartition], generation: int) -> None:
        self.generation = generation

    def assign(self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Assignment:
        return cooperative_sticky_assign(partitions_per_topic, subscriptions)
