"""Offsets and micro-batch planning of the assignment-following Kafka source (pure: no I/O).

The source (:mod:`pipelines.runtime.assigned_source`) plans every micro-batch over the partitions
the member runs *at that moment*, so a rebalance changes a query's partitions at a batch boundary
without a restart. Three values meet here:

* :class:`Assignment` — what the runner tells the source: per running partition its **claim** (a
  number the runner increases each time it claims a partition, so a partition given up and
  claimed again is a new claim) and the offset the claim starts at (Delta > group commit >
  policy, see :mod:`pipelines.runtime.start_offsets`).
* :class:`SourceOffset` — one micro-batch's end as Spark stores it in the checkpoint's offset log:
  ``end`` (next offset to read after the batch) and ``claims`` for every partition the batch
  covers, and ``starts`` for the partitions whose claim begins with this batch (their range starts
  there, not at the previous batch's end). A batch's ranges follow from its offset and the
  previous one alone (:func:`batch_ranges`): the checkpoint is the whole record.
* :func:`plan_next` — the next end from the previous one, the assignment and the brokers' log
  ends, with Spark's Kafka source admission control (``maxOffsetsPerTrigger`` prorated over the
  partitions by backlog, never starving a partition with one record; ``minOffsetsPerTrigger``
  with ``maxTriggerDelay``).

Offsets are next-offset-to-read (docs/DESIGN.md, invariant 2). A partition the broker did not
answer for keeps its previous end (no records, no error: it is read again at the next batch). A
log end below where the source stands is a data-loss condition the caller raises; the partition
keeps its end meanwhile. Immutable values; thread safe.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from groupmgr.core import OffsetRange, TopicPartition


@dataclass(frozen=True, order=True)
class Claim:
    """One claim of one partition by the runner: ``serial`` (unique per claim within a member's
    query) and the offset its reading starts at."""

    serial: int
    start: int


@dataclass(frozen=True)
class Assignment:
    """The partitions the source may read now, each with its current claim, and the cores the
    application has now (``task_slots``, :func:`task_groups`; None: not said)."""

    claims: Mapping[TopicPartition, Claim] = field(default_factory=dict)
    task_slots: int | None = None

    def to_json(self) -> str:
        raw: dict = {"claims": _nest({tp: [c.serial, c.start] for tp, c in self.claims.items()})}
        if self.task_slots is not None:
            raw["task_slots"] = self.task_slots
        return json.dumps(raw, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Assignment:
        raw = json.loads(text)
        slots = raw.get("task_slots")
        return cls({tp: Claim(int(v[0]), int(v[1])) for tp, v in _flat(raw.get("claims", {})).items()},
                   None if slots is None else max(1, int(slots)))


@dataclass(frozen=True)
class SourceOffset:
    """The end of one micro-batch (see the module docstring); ``starts`` only for the partitions
    whose claim begins with this batch."""

    end: Mapping[TopicPartition, int] = field(default_factory=dict)
    claims: Mapping[TopicPartition, int] = field(default_factory=dict)
    starts: Mapping[TopicPartition, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The JSON-able dict Spark stores (keys sorted when serialised)."""
        return {"end": _nest(self.end), "claims": _nest(self.claims), "starts": _nest(self.starts)}

    @classmethod
    def from_dict(cls, raw: Mapping) -> SourceOffset:
        return cls(*({tp: int(v) for tp, v in _flat(raw.get(key, {})).items()}
                     for key in ("end", "claims", "starts")))

    @classmethod
    def from_json(cls, text: str) -> SourceOffset:
        return cls.from_dict(json.loads(text))

    def begin(self, previous: SourceOffset) -> dict[TopicPartition, int]:
        """Where this batch's range of each partition starts, ``previous`` being the batch before."""
        return {tp: self.starts[tp] if tp in self.starts else previous.end.get(tp, end)
                for tp, end in self.end.items()}


INITIAL = SourceOffset()


def batch_ranges(previous: SourceOffset, current: SourceOffset) -> tuple[OffsetRange, ...]:
    """The ranges of the batch that ends at ``current`` (sorted by topic, partition)."""
    begin = current.begin(previous)
    return tuple(OffsetRange(tp.topic, tp.partition, begin[tp], current.end[tp]) for tp in sorted(current.end))


@dataclass(frozen=True)
class RateLimits:
    """Spark's Kafka source admission control: ``max_rows`` per batch (None: no cap), and with
    ``min_rows`` a batch waits until that many records are ready or ``max_delay_ms`` passed since
    the last batch."""

    max_rows: int | None = None
    min_rows: int | None = None
    max_delay_ms: int = 15 * 60 * 1000


@dataclass(frozen=True)
class Plan:
    """The next offset, and the partitions whose log end is below where the source stands (their
    end is kept; the caller reports data loss)."""

    offset: SourceOffset
    behind: Mapping[TopicPartition, tuple[int, int]] = field(default_factory=dict)  # tp -> (stands at, log end)

    def ready(self, previous: SourceOffset) -> int:
        """Records (offsets) this plan reads past ``previous``."""
        begin = self.offset.begin(previous)
        return sum(end - begin[tp] for tp, end in self.offset.end.items())


def plan_next(previous: SourceOffset, assignment: Assignment, log_ends: Mapping[TopicPartition, int],
              max_rows: int | None = None) -> Plan:
    """The next batch's end over ``assignment``'s partitions: each from where it stands (the
    previous end under the same claim, else its claim's start) to its log end, capped by
    ``max_rows`` prorated by backlog as Spark's Kafka source does."""
    stands, end, claims, starts, behind = {}, {}, {}, {}, {}
    for tp, claim in assignment.claims.items():
        claims[tp] = claim.serial
        if previous.claims.get(tp) == claim.serial and tp in previous.end:
            stands[tp] = previous.end[tp]
        else:
            stands[tp] = starts[tp] = claim.start
        log_end = log_ends.get(tp)
        if log_end is not None and log_end < stands[tp]:
            behind[tp] = (stands[tp], log_end)
        end[tp] = stands[tp] if log_end is None or log_end < stands[tp] else log_end
    if max_rows is not None:
        end = prorate(stands, end, max_rows)
    return Plan(SourceOffset(end, claims, starts), behind)


def prorate(begin: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
            limit: int) -> dict[TopicPartition, int]:
    """Cap ``end`` so about ``limit`` offsets are read in all, each partition getting its share of
    the backlog (a share below one rounds up: a partition with a record is never starved, so
    the total may exceed ``limit`` by up to one per partition)."""
    sizes = {tp: e - begin[tp] for tp, e in end.items() if e - begin[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(end)
    capped = dict(end)
    for tp, size in sizes.items():
        share = limit * size / total
        capped[tp] = min(end[tp], begin[tp] + (math.ceil(share) if share < 1 else math.floor(share)))
    return capped


RECORDS_PER_TASK = 100_000  # records a task of the scg-kafka source hands the JVM (two passes cache them)


def task_groups(ranges: Sequence[OffsetRange], slots: int,
                records_per_task: int = RECORDS_PER_TASK) -> list[tuple[OffsetRange, ...]]:
    """The batch's non-empty ``ranges`` grouped into Spark tasks, each range read whole by one
    task (as Spark's Kafka source, which never splits a partition's range by default).

    Tasks come in whole waves: as many as ``slots`` (the cores the application runs tasks on),
    or a multiple of it for a large batch (a wave more per ``records_per_task`` records per
    slot: the default bounds the rows one task of the source hands the JVM, which the two-pass
    path caches), never more than one per range. A wave that fills only some cores leaves the
    others idle while its tasks run, and each task of a Python data source costs a fixed start
    (worker, reader, Arrow stream; about 85 ms on an idle core), so a small batch over many
    partitions, e.g. a partition's first batch in its new owner, runs in one task per core
    instead of one per partition; each task writes its own files, so such a batch also adds
    fewer small files to the table. Ranges go to the task with the fewest records so far,
    largest first; the result is sorted and deterministic."""
    ranges = sorted((r for r in ranges if r.count > 0), key=lambda r: (-r.count, r.topic, r.partition))
    if not ranges:
        return []
    records = sum(r.count for r in ranges)
    slots = max(1, slots)
    count = min(len(ranges), slots * max(1, math.ceil(records / (records_per_task * slots))))
    groups: list[list[OffsetRange]] = [[] for _ in range(count)]
    sizes = [0] * count
    for rng in ranges:
        smallest = min(range(count), key=lambda i: (sizes[i], i))
        groups[smallest].append(rng)
        sizes[smallest] += rng.count
    return sorted(tuple(sorted(group, key=lambda r: (r.topic, r.partition))) for group in groups)


def delay_batch(ready: int, limits: RateLimits, last_batch_ms: float, now_ms: float) -> bool:
    """True when a batch of ``ready`` records should wait (``minOffsetsPerTrigger`` not reached
    and ``maxTriggerDelay`` not passed since the last batch)."""
    if limits.min_rows is None or now_ms - last_batch_ms >= limits.max_delay_ms:
        return False
    return ready < limits.min_rows


def _nest(values: Mapping[TopicPartition, object]) -> dict[str, dict[str, object]]:
    nested: dict[str, dict[str, object]] = {}
    for tp in sorted(values):
        nested.setdefault(tp.topic, {})[str(tp.partition)] = values[tp]
    return nested


def _flat(nested: Mapping[str, Mapping[str, object]]) -> dict[TopicPartition, object]:
    return {TopicPartition(topic, int(p)): v for topic, parts in nested.items() for p, v in parts.items()}
