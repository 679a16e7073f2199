"""Sticky assignor: balanced, and moves as few partitions as possible.

Inputs beyond Range/RoundRobin: each member's ``Subscription.owned_partitions``
(what it owned in ``Subscription.generation_id``). A claim only counts if the
member still subscribes to the topic and the partition still exists. When
several members claim one partition the highest generation wins; if the
highest generation is claimed twice, nobody keeps it (Kafka's
``AbstractStickyAssignor`` does the same). An uncontested claim from an older
generation is kept: ownership here is a stickiness hint only, fencing is done
by generation-checked offset commits.

Equal subscriptions (every member subscribes to the same topics with
metadata), P partitions, M members: ``q, r = divmod(P, M)``; exactly ``r``
members get ``q + 1`` partitions, the others ``q``. The ``q + 1`` slots go first
to members that own more than ``q`` (in MemberInfo order), every member keeps
its owned partitions up to its quota (lowest (topic, partition) first), and
the freed and unowned partitions, in (topic, partition) order, fill the
members below quota in MemberInfo order. That keeps the largest possible
number of owned partitions. Cost: O(P + M log M).

Worked example (reproduced by ``tests/unit/test_assignor_sticky.py``): topic t
with 6 partitions; C0 owned [t0, t1, t2], C1 owned [t3, t4, t5]; C2 joins::

    C0: [t0, t1]      (keeps 2, frees t2)
    C1: [t3, t4]      (keeps 2, frees t5)
    C2: [t2, t5]

Uneven subscriptions (best effort): all valid claims are kept, unowned
partitions go to the least-loaded subscribers (topics with the fewest
subscribers first, "water filling"), then partitions move from a member to a
less-loaded subscriber of the same topic while their counts differ by two or
more (newly assigned partitions move before owned ones). At that fixed point
members with equal subscriptions differ by at most one partition; the group
as a whole may not reach the best possible balance when that would need a
chain of moves through members with other subscriptions. Cost:
O(P log P + T*M) plus O(log M) per move.

Always: every partition of a subscribed topic with metadata is assigned
exactly once, only to a subscriber; the result does not depend on the
iteration order of the inputs; lists are sorted by (topic, partition).
"""

from __future__ import annotations

import heapq
from collections import deque
from itertools import accumulate, chain, compress, filterfalse, repeat
from operator import itemgetter, sub
from typing import Mapping, Sequence

from .api import (
    Assignment,
    PartitionAssignor,
    Subscription,
    TopicPartition,
    as_topic_partitions,
    extend_each,
    sorted_member_ids,
    topic_partitions,
)
from .range import range_chunks


def effective_topics(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription],
                     members: Sequence[str]) -> list[frozenset[str]]:
    """Per member (in ``members`` order): its subscribed topics that have at least one partition.

    Computed once per distinct subscription, so members with equal subscriptions share one set."""
    with_partitions = frozenset(t for t, count in partitions_per_topic.items() if count and count > 0)
    raws = [subscriptions[m].topics for m in members]
    if raws and raws.count(raws[0]) == len(raws):  # the usual group: one subscription
        return [with_partitions.intersection(raws[0])] * len(raws)
    per_subscription = {raw: with_partitions.intersection(raw) for raw in set(raws)}
    return list(map(per_subscription.__getitem__, raws))


def _valid_claims(claimed: Sequence[Sequence[TopicPartition]], topics: Sequence[frozenset[str]],
                  universe: set[TopicPartition]) -> list[list[TopicPartition]]:
    """Per member: its distinct claimed partitions that exist and that it still subscribes to.

    Keeps the claim order (usually sorted already), which makes the final sort cheap.
    """
    every_topic = frozenset().union(*set(topics))
    claims = []
    for owned, subscribed in zip(claimed, topics):
        distinct = dict.fromkeys(owned)
        if not distinct:
            claims.append([])
        elif subscribed == every_topic:
            claims.append(list(filter(universe.__contains__, distinct)))
        else:
            claims.append([tp for tp in distinct if tp in universe and tp.topic in subscribed])
    return claims


def _settle_conflicts(subscriptions: Mapping[str, Subscription], members: Sequence[str],
                      claims: list[list[TopicPartition]]) -> list[list[TopicPartition]]:
    """Give each claimed partition to its unique highest-generation claimer; a tie at the top voids it."""
    winner: dict[TopicPartition, int] = {}
    generation: dict[TopicPartition, int] = {}
    contested: set[TopicPartition] = set()
    for index, claimed in enumerate(claims):
        gen = subscriptions[members[index]].generation_id
        for tp in claimed:
            best = generation.get(tp)
            if best is None or gen > best:
                winner[tp], generation[tp] = index, gen
                contested.discard(tp)
            elif gen == best:
                contested.add(tp)
    owned: list[list[TopicPartition]] = [[] for _ in members]
    for tp, index in winner.items():
        if tp not in contested:
            owned[index].append(tp)
    return owned


def partitions_of(counts: Mapping[str, int]) -> list[TopicPartition]:
    """Every partition of ``counts``' topics, sorted by (topic, partition)."""
    return list(chain.from_iterable(topic_partitions(t, counts[t]) for t in sorted(counts)))


def unclaimed(counts: Mapping[str, int], taken: set[TopicPartition]) -> list[TopicPartition]:
    """Partitions of ``counts`` not in ``taken``, sorted by (topic, partition).

    Candidates are plain ``(topic, partition)`` tuples (they hash and compare
    like TopicPartition); only the unclaimed ones become TopicPartition values.
    """
    pool: list[TopicPartition] = []
    for topic in sorted(counts):
        pool += as_topic_partitions(filterfalse(taken.__contains__, zip(repeat(topic), range(counts[topic]))))
    return pool


def _claims_exist(flat: list[TopicPartition], counts: Mapping[str, int], topics: frozenset[str]) -> bool:
    """True only if every claim in non-empty ``flat`` is an existing partition of ``topics``.

    Checked in C without hashing a single TopicPartition: claimed topics
    within ``topics``, partition numbers in ``[0, smallest count)``. False
    can also mean "not sure" (unequal counts); callers then check one by one.
    """
    claimed_topics = set(map(itemgetter(0), flat))
    if not claimed_topics.issubset(topics):
        return False
    numbers = list(map(itemgetter(1), flat))
    return min(numbers) >= 0 and max(numbers) < min(map(counts.__getitem__, claimed_topics))


def resolve_owned(subscriptions: Mapping[str, Subscription], members: Sequence[str],
                  topics: Sequence[frozenset[str]], counts: Mapping[str, int]) -> list[list[TopicPartition]]:
    """Valid, conflict-free owned partitions per member index (fresh lists, in no particular order).

    A claim is valid if the partition exists (``counts``: partitions per
    topic any member subscribes to) and the member subscribes to its topic.
    In the common case (nobody claims a partition twice) the claims are
    returned as they are; otherwise the highest generation wins and a tie voids.
    """
    claimed = [subscriptions[m].owned_partitions for m in members]
    if not any(claimed):  # a new group: nobody owns anything
        return [[] for _ in members]
    flat = list(chain.from_iterable(claimed))
    one_subscription = topics.count(topics[0]) == len(topics)
    if one_subscription and _claims_exist(flat, counts, topics[0]) and len(set(flat)) == len(flat):
        return list(map(list, claimed))  # the steady state: every claim valid and unique
    claims = _valid_claims(claimed, topics, set(partitions_of(counts)))
    if sum(map(len, claims)) == len(set().union(*claims)):
        return claims
    return _settle_conflicts(subscriptions, members, claims)


def _quotas(owned_counts: Sequence[int], total: int) -> list[int]:
    """Per-member quotas summing to ``total``: ``q`` or ``q + 1``; the ``total mod n`` extra slots go to
    members owning more than ``q`` first, then to the others, each group in member order."""
    base, extra = divmod(total, len(owned_counts))
    quotas = [base] * len(owned_counts)
    big = [index for index, count in enumerate(owned_counts) if count > base]
    small = [index for index, count in enumerate(owned_counts) if count <= base] if len(big) < extra else []
    for index in (big + small)[:extra]:
        quotas[index] += 1
    return quotas


def constrained_assign(counts: Mapping[str, int], owned: list[list[TopicPartition]]) -> list[list[TopicPartition]]:
    """Sticky assignment when every member subscribes to every topic of ``counts``; lists sorted.

    ``owned`` must come from :func:`resolve_owned` (valid, conflict-free); its
    lists are reused and modified. When nobody owns anything (a new group)
    the quotas fall to members in order, so the result is consecutive ranges;
    when the kept partitions cover every partition, no partition list is built.
    """
    if not any(owned):
        ranges = list(range_chunks(partitions_of(counts), len(owned)))
        return ranges + [[] for _ in range(len(owned) - len(ranges))]
    total = sum(counts.values())
    quotas = _quotas(list(map(len, owned)), total)
    kept = [mine if len(mine) <= quota else sorted(mine)[:quota] for quota, mine in zip(quotas, owned)]
    if sum(map(len, kept)) < total:  # kept is valid and unique: it covers everything iff the sizes match
        pool = unclaimed(counts, set().union(*kept))
        needs = list(map(sub, quotas, map(len, kept)))
        ends = list(accumulate(compress(needs, needs)))
        extend_each(kept, compress(range(len(kept)), needs), map(pool.__getitem__, map(slice, [0] + ends[:-1], ends)))
    deque(map(list.sort, kept), maxlen=0)  # in place: no list per member is copied again
    return kept


class _State:
    """Bookkeeping of the general path.

    Topics with the same set of subscribers form a class; a partition can move
    between any two members of its class. ``holdings[member][class]`` lists
    what a member holds of a class: moves take from the end, so partitions
    given last (newly assigned) move before owned ones, high ones before low.
    """

    def __init__(self, topics: list[frozenset[str]], owned: list[list[TopicPartition]]) -> None:
        ids: dict[tuple[int, ...], int] = {}
        self.class_of: dict[str, int] = {}
        for topic in sorted(frozenset().union(*topics)):
            group = tuple(i for i, subscribed in enumerate(topics) if topic in subscribed)
            self.class_of[topic] = ids.setdefault(group, len(ids))
        self.class_members: list[tuple[int, ...]] = list(ids)
        self.count = [0] * len(topics)
        self.holdings: list[dict[int, list[TopicPartition]]] = [{} for _ in topics]
        self.holders: list[set[int]] = [set() for _ in ids]
        for index, mine in enumerate(owned):
            by_class: dict[int, list[TopicPartition]] = {}
            for tp in sorted(mine):
                by_class.setdefault(self.class_of[tp.topic], []).append(tp)
            for class_id, partitions in by_class.items():
                self.give(index, class_id, partitions)

    def give(self, index: int, class_id: int, partitions: list[TopicPartition]) -> None:
        self.holdings[index].setdefault(class_id, []).extend(partitions)
        self.count[index] += len(partitions)
        self.holders[class_id].add(index)

    def take(self, index: int, class_id: int, how_many: int) -> list[TopicPartition]:
        held = self.holdings[index][class_id]
        chunk = held[len(held) - how_many:]
        del held[len(held) - how_many:]
        self.count[index] -= how_many
        if not held:
            self.holders[class_id].discard(index)
        return chunk


def water_fill(counts: Sequence[int], members: Sequence[int], units: int) -> list[tuple[int, int]]:
    """(member, how many) that hands ``units`` partitions to the least-loaded ``members``.

    Same outcome as giving them one at a time to the member with the lowest
    (count, index), in O(m log m) instead of O(units log m).
    """
    ranked = sorted(members, key=lambda i: (counts[i], i))
    level, lifted, remaining = counts[ranked[0]], 1, units
    while lifted < len(ranked) and remaining >= lifted * (counts[ranked[lifted]] - level):
        remaining -= lifted * (counts[ranked[lifted]] - level)
        level, lifted = counts[ranked[lifted]], lifted + 1
    share, extra = divmod(remaining, lifted)
    chosen = sorted(ranked[:lifted])
    return [(i, level + share + (1 if n < extra else 0) - counts[i]) for n, i in enumerate(chosen)]


def _fill_unowned(state: _State, unowned_by_topic: dict[str, list[TopicPartition]]) -> None:
    """Hand out unowned partitions topic by topic (fewest subscribers first), lowest counts first."""
    order = sorted(unowned_by_topic, key=lambda t: (len(state.class_members[state.class_of[t]]), t))
    for topic in order:
        class_id, partitions, start = state.class_of[topic], unowned_by_topic[topic], 0
        for index, how_many in water_fill(state.count, state.class_members[class_id], len(partitions)):
            if how_many:
                state.give(index, class_id, partitions[start:start + how_many])
                start += how_many


def _balance_class(state: _State, class_id: int) -> bool:
    """Move partitions of one class from its fullest holders to its emptiest members until within one.

    Lazy heaps: an entry whose count is out of date is dropped when it surfaces
    (every change pushes a fresh entry). Returns True if anything moved.
    """
    count, holders = state.count, state.holders[class_id]
    low = [(count[i], i) for i in state.class_members[class_id]]
    high = [(-count[i], i) for i in holders]
    heapq.heapify(low)
    heapq.heapify(high)
    moved = False
    while high:
        top, source = high[0]
        least, target = low[0]
        if -top != count[source] or source not in holders:
            heapq.heappop(high)
        elif least != count[target]:
            heapq.heappop(low)
        elif count[source] - count[target] < 2:
            break
        else:
            how_many = min((count[source] - count[target]) // 2, len(state.holdings[source][class_id]))
            state.give(target, class_id, state.take(source, class_id, how_many))
            for member in (source, target):
                heapq.heappush(low, (count[member], member))
                if member in holders:
                    heapq.heappush(high, (-count[member], member))
            moved = True
    return moved


def _balance(state: _State) -> None:
    """Sweep the classes until no member can pass a partition to a subscriber holding 2+ fewer.

    Every move lowers the sum of squared counts, so this terminates; at the
    fixed point members with equal subscriptions differ by at most one.
    """
    moved = True
    while moved:
        moved = False
        for class_id in range(len(state.class_members)):
            moved = _balance_class(state, class_id) or moved


def general_assign(topics: list[frozenset[str]], owned: list[list[TopicPartition]],
                   counts: Mapping[str, int]) -> list[list[TopicPartition]]:
    """Best-effort balanced sticky assignment for uneven subscriptions; lists sorted."""
    state = _State(topics, owned)
    taken = {tp for mine in owned for tp in mine}
    unowned_by_topic: dict[str, list[TopicPartition]] = {}
    for tp in unclaimed(counts, taken):
        unowned_by_topic.setdefault(tp.topic, []).append(tp)
    _fill_unowned(state, unowned_by_topic)
    _balance(state)
    return [sorted(chain.from_iterable(holdings.values())) for holdings in state.holdings]


def sticky_assign(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Assignment:
    """Sticky assignment (see module doc); every member id appears in the result."""
    members = sorted_member_ids(subscriptions)
    if not members:
        return {}
    topics = effective_topics(partitions_per_topic, subscriptions, members)
    counts = {topic: partitions_per_topic[topic] for topic in set().union(*set(topics))}
    owned = resolve_owned(subscriptions, members, topics, counts)
    if topics.count(topics[0]) == len(topics):
        result = constrained_assign(counts, owned)
    else:
        result = general_assign(topics, owned, counts)
    return dict(zip(members, result))


class StickyAssignor(PartitionAssignor):
    """Protocol ``sticky``: balanced like RoundRobin, keeps owned partitions where it can (see module doc)."""

    name = "sticky"

    def assign(self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Assignment:
        return sticky_assign(partitions_per_topic, subscriptions)
