"""Immutable Kafka offset values with one JSON serialisation point.

Convention everywhere (DESIGN invariant 2): an offset is **the next offset to read**, as in Kafka
committed offsets. A batch range ``[start, end)`` covers records ``start <= offset < end``; the
Delta transaction version recorded for a partition after writing that range is ``end``.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from groupmgr.assignors.api import TopicPartition


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The records ``start <= offset < end`` of one partition that a micro-batch planned to read."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def count(self) -> int:
        return self.end - self.start


def to_spark_json(offsets: Mapping[TopicPartition, int]) -> str:
    """Offsets as Spark's Kafka source JSON: ``{"topic": {"0": 42}}`` (keys sorted)."""
    nested: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        nested.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return json.dumps(nested, sort_keys=True)


def from_spark_json(text: str) -> dict[TopicPartition, int]:
    """Inverse of :func:`to_spark_json`."""
    raw = json.loads(text)
    return {TopicPartition(topic, int(p)): int(o) for topic, parts in raw.items()
            for p, o in parts.items()}


def assign_json(partitions: Iterable[TopicPartition]) -> str:
    """Spark's ``assign`` option: ``{"topic": [0, 1]}``."""
    nested: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        nested.setdefault(tp.topic, []).append(tp.partition)
    return json.dumps(nested, sort_keys=True)


def ranges_between(start: Mapping[TopicPartition, int],
                   end: Mapping[TopicPartition, int]) -> tuple[OffsetRange, ...]:
    """Ranges for every partition in ``end``; a partition new in ``end`` starts at its start
    offset if known, else at ``end`` (an empty range). Sorted by (topic, partition)."""
    return tuple(OffsetRange(tp.topic, tp.partition, start.get(tp, end[tp]), end[tp])
                 for tp in sorted(end))


class CheckpointOffsetLog:
    """Reads the offsets Spark planned for each micro-batch from a query's checkpoint.

    Spark writes ``<checkpoint>/offsets/<batchId>`` (a write-ahead log) before the batch runs:
    line 1 is the format version, line 2 the batch metadata, then one line per source. The batch's
    start offsets are the previous entry's end offsets, or for the first batch of a checkpoint the
    initial offsets the query started from (``sources/0/0``), which this runner always passes as
    explicit numbers. Thread safe (read only).
    """

    def __init__(self, checkpoint: Path, initial: Mapping[TopicPartition, int]):
        self.checkpoint = Path(checkpoint)
        self.initial = dict(initial)

    def end_offsets(self, batch_id: int) -> dict[TopicPartition, int]:
        lines = (self.checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
        return from_spark_json(lines[2])

    def ranges(self, batch_id: int) -> tuple[OffsetRange, ...]:
        end = self.end_offsets(batch_id)
        start = self.end_offsets(batch_id - 1) if batch_id > 0 else self.initial
        return ranges_between(start, end)
