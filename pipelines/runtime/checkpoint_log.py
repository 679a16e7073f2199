"""The offset ranges Spark planned for each micro-batch, read from the query's checkpoint."""
from __future__ import annotations

from collections.abc import Callable, Mapping

from groupmgr.core import OffsetRange, TopicPartition, ranges_between
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
        lines = self._read_text(join(self.checkpoint, "offsets", str(batch_id))).splitlines()
        return from_spark_json(lines[2])

    def ranges(self, batch_id: int) -> tuple[OffsetRange, ...]:
        end = self.end_offsets(batch_id)
        start = self.end_offsets(batch_id - 1) if batch_id > 0 else self.initial
        return ranges_between(start, end)
