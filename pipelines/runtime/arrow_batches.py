"""One micro-batch of an ``scg-kafka`` query without a transform, read, decoded and written in one
Arrow pass per task on the executors: no record enters the JVM.

Spark still plans the batch (the ``scg-kafka`` source writes its offsets to the checkpoint), and
schedules and retries its tasks; but the batch's DataFrame is never computed. Instead the batch's
planned ranges are grouped into tasks in whole waves over the application's cores
(:func:`~pipelines.runtime.assigned_offsets.task_groups`, up to :data:`RECORDS_PER_TASK` records
per task and core a wave), and one Spark job of that many tasks (a Python RDD of the group
numbers: no query plan to analyse or compile per batch) runs :func:`write_ranges` in each: read
each range with confluent-kafka (:func:`~pipelines.runtime.kafka_range_reader.read_range`),
split every block into output rows and dead letters
(:class:`~pipelines.runtime.arrow_records.BlockDecoder`) and write both tables' Parquet files;
the task returns only the files' metadata. The driver commits them as for any batch
(:class:`~pipelines.runtime.batch_writer.BatchWriter`).

A task holds one block (at most ``FETCH_ROWS`` records and their decoded rows) plus one row group
per open file. A retried task reads its ranges again and writes new files; the failed attempt's
files are never committed. The two-pass path (a retry after the dead-letter commit, or a table's
plan that changed before its commit) reads the batch through Spark SQL
(:class:`~pipelines.runtime.batch_writer.SparkBatch`), which classifies records by the same rule.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from groupmgr.core import OffsetRange
from pipelines.runtime.arrow_records import BlockDecoder, FramedBlockDecoder, arrow_decodable
from pipelines.runtime.assigned_offsets import task_groups
from pipelines.runtime.batch_writer import (BatchRows, DeadLetterDecisions, PlannedWrite, SparkBatch,
                                           write_both_tables)
from pipelines.runtime.kafka_range_reader import read_range
from pipelines.runtime.records import DEAD_LETTER, OUTPUT, RecordFormat
from pipelines.runtime.task_gc import task_gc
from sinks.data_files import WrittenFiles


RECORDS_PER_TASK = 250_000  # a task holds one block whatever its ranges hold: fewer, longer tasks


@dataclass(frozen=True)
class RangesTasks:
    """What every task of one batch's job gets (picklable): the librdkafka settings (secrets
    included, never shown), the record format, the tasks' range groups and both tables' writes."""

    client_config: Mapping[str, object] = field(repr=False)
    fmt: RecordFormat
    groups: tuple[tuple[OffsetRange, ...], ...]
    dead: PlannedWrite
    output: PlannedWrite


def write_ranges(tasks: RangesTasks, numbers: Iterable[int]) -> Iterator[dict]:
    """One Spark task (an executor's Python worker): for each group number it is given, read that
    group's ranges, write both tables' files, and yield their metadata rows named by table.
    Python's cyclic garbage collector is paused meanwhile, and the worker's long-lived objects
    frozen after its first task (:func:`~pipelines.runtime.task_gc.task_gc`)."""
    decoder = block_decoder(tasks.fmt)
    with task_gc():
        for number in numbers:
            for metadata in _write_group(tasks, decoder, tasks.groups[number]):
                yield from metadata.to_pylist()


def block_decoder(fmt: RecordFormat) -> BlockDecoder | FramedBlockDecoder:
    """The decoder of ``fmt``'s blocks (an Arrow-decodable format)."""
    return FramedBlockDecoder(fmt) if fmt.framed is not None else BlockDecoder(fmt)


def _write_group(tasks: RangesTasks, decoder: BlockDecoder | FramedBlockDecoder, ranges: tuple[OffsetRange, ...]) -> Iterator[pa.RecordBatch]:
    columns = {DEAD_LETTER: tasks.dead.writer.schema.names, OUTPUT: tasks.output.writer.schema.names}

    def rows_by_table() -> Iterator[tuple[str, pa.Table]]:
        for rng in ranges:
            for block in read_range(tasks.client_config, rng, headers=tasks.fmt.headers):
                split = decoder.split(block)
                for name, rows in ((DEAD_LETTER, split.dead_letters), (OUTPUT, split.output)):
                    yield name, rows.select(columns[name])

    return write_both_tables(tasks.dead, tasks.output, rows_by_table())


@dataclass
class ArrowKafkaBatch:
    """A micro-batch over ``ranges`` written in one Arrow pass on the executors (one pass:
    :meth:`write_both`); its two passes, when needed, go through ``fallback`` (Spark SQL over
    the batch's DataFrame). Runs on the driver."""

    spark: object
    ranges: tuple[OffsetRange, ...]
    fmt: RecordFormat
    client_config: Mapping[str, object] = field(repr=False)
    task_slots: int
    fallback: SparkBatch
    one_pass: bool = True

    def write_both(self, dead: PlannedWrite, output: PlannedWrite) -> tuple[WrittenFiles, WrittenFiles]:
        groups = tuple(task_groups(self.ranges, self.task_slots, RECORDS_PER_TASK))
        if not groups:
            return WrittenFiles((), 0), WrittenFiles((), 0)
        tasks = RangesTasks(self.client_config, self.fmt, groups, dead, output)
        numbers = self.spark.sparkContext.parallelize(range(len(groups)), len(groups))
        metadata = numbers.mapPartitions(functools.partial(write_ranges, tasks)).collect()
        return WrittenFiles.from_metadata(metadata, DEAD_LETTER), WrittenFiles.from_metadata(metadata, OUTPUT)

    @property
    def dead(self) -> BatchRows:
        return self.fallback.dead

    def output(self, decided: DeadLetterDecisions | None, index: int = 0) -> BatchRows:
        return self.fallback.output(decided, index)

    def release(self) -> None:
        self.fallback.release()


def arrow_batches(spark, fmt: RecordFormat, transform: str | None, client_config: Mapping[str, object],
                  task_slots: Callable[[], int]):
    """The batch writer's ``prepare`` for an ``scg-kafka`` query: :class:`ArrowKafkaBatch` when
    the pipeline has no transform and its records are decoded in Arrow
    (:func:`~pipelines.runtime.arrow_records.arrow_decodable`), else None (the Spark SQL path).
    A batch is decoded with the format it is prepared with (``fmt`` or one that follows it: the
    same kind, another reader schema).
    ``client_config``: the source's librdkafka settings; ``task_slots()``: the cores the
    application has now."""
    if transform or not arrow_decodable(fmt):
        return None
    from pipelines.runtime.batch_writer import without_partitions

    def prepare(batch_df, ranges, left_out, batch_fmt: RecordFormat) -> ArrowKafkaBatch:
        fallback = SparkBatch(without_partitions(batch_df, left_out), batch_fmt, transform)
        return ArrowKafkaBatch(spark, tuple(ranges), batch_fmt, dict(client_config), max(1, task_slots()), fallback)

    return prepare
