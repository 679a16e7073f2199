"""Immutable Kafka offset ranges.

Convention everywhere (docs/DESIGN.md, invariant 2): an offset is **the next offset to read**, as
in Kafka committed offsets. A range ``[start, end)`` covers records ``start <= offset < end``; the
Delta transaction version recorded for a partition after writing that range is ``end``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from groupmgr.core.topic_partition import TopicPartition


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The records ``start <= offset < end`` of one partition that a micro-batch planned to read.

    The range is what the query planned (Spark records it before the batch runs), not the min/max
    of the rows: transaction markers, compaction and filtered records leave gaps, and a partition
    can have a range but no rows. Immutable and thread safe."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def count(self) -> int:
        """How many offsets the range spans (records plus any gaps)."""
        return self.end - self.start


def ranges_between(start: Mapping[TopicPartition, int],
                   end: Mapping[TopicPartition, int]) -> tuple[OffsetRange, ...]:
    """Ranges for every partition in ``end``; a partition new in ``end`` starts at its start
    offset if known, else at ``end`` (an empty range). Sorted by (topic, partition)."""
    return tuple(OffsetRange(tp.topic, tp.partition, start.get(tp, end[tp]), end[tp])
                 for tp in sorted(end))
