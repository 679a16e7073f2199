"""The offset ranges Spark planned for each micro-batch, read from the query's checkpoint."""
from __future__ import annotations

from collections.abc import Callable, Mapping

from groupmgr.core import OffsetRange, TopicPartition, ranges_between
from pipelines.runtime.assigned_offsets import INITIAL, SourceOffset, batch_ranges
from pipelines.runtime.hadoop_fs import join
from pipelines.runtime.spark_offsets import from_spark_json


class CheckpointOffsetLog:
    """Reads the offsets Spark planned for each micro-batch from a query's checkpoint.

    Spark writes ``<checkpoint>/offsets/<batchId>`` (a write-ahead log) before the batch runs:
    line 1 is the format version, line 2 the batch metadata, then one line per source. The batch's
    start offsets are the previous entry's end offsets, or for the first batch of a checkpoint the
    initial offsets the query started from, which the runner always passes as explicit numbers.
    ``read_text`` reads a file by URI the way Spark resolves it (see :mod:`hadoop_fs`); the
    checkpoint may be on any Hadoop file system. Offsets are next-offset-to-read. Thread safe
    (read only).
    """

    def __init__(self, checkpoint: str, initial: Mapping[TopicPartition, int],
                 read_text: Callable[[str], str]):
        self.checkpoint = str(checkpoint)
        self.initial = dict(initial)
        self._read_text = read_text

    def end_offsets(self, batch_id: int) -> dict[TopicPartition, int]:
        return from_spark_json(_source_line(self._read_text, self.checkpoint, batch_id))

    def ranges(self, batch_id: int) -> tuple[OffsetRange, ...]:
        end = self.end_offsets(batch_id)
        start = self.end_offsets(batch_id - 1) if batch_id > 0 else self.initial
        return ranges_between(start, end)


class AssignedOffsetLog:
    """The same for a query over the ``scg-kafka`` source (:mod:`pipelines.runtime.assigned_source`):
    each batch's offset carries where its newly claimed partitions start, so a batch's ranges
    follow from its entry and the previous one (the first batch's previous is the source's
    empty initial offset). Thread safe (read only)."""

    def __init__(self, checkpoint: str, read_text: Callable[[str], str]):
        self.checkpoint = str(checkpoint)
        self._read_text = read_text

    def offset(self, batch_id: int) -> SourceOffset:
        if batch_id < 0:
            return INITIAL
        return SourceOffset.from_json(_source_line(self._read_text, self.checkpoint, batch_id))

    def ranges(self, batch_id: int) -> tuple[OffsetRange, ...]:
        return batch_ranges(self.offset(batch_id - 1), self.offset(batch_id))


def _source_line(read_text: Callable[[str], str], checkpoint: str, batch_id: int) -> str:
    """The one source's line of ``offsets/<batch_id>`` (line 1 the log version, line 2 the batch
    metadata)."""
    return read_text(join(checkpoint, "offsets", str(batch_id))).splitlines()[2]
