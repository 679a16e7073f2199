"""A Spark job for tests/integration/test_task_retry.py, run by spark-submit with ``local[2,3]``
(tasks are retried): one micro-batch's rows written by the executors through the real sink, where
the first task attempt writes its file and then dies. Prints the commit result as JSON.

    spark-submit --master 'local[2,3]' tests/support/task_retry_job.py TABLE MARKER_DIR
    spark-submit --master 'local[2,3]' tests/support/task_retry_job.py TABLE MARKER_DIR BOOTSTRAP TOPIC

The second form runs the Arrow path: the executors read partitions 0 and 1 of TOPIC (JSON
records ``{"id": n}``, offsets 0 to the log end) from the brokers at BOOTSTRAP, decode and write
them (``arrow_batches.ArrowKafkaBatch``), the first attempt that wrote output files dying after it
closed them.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys

import pyarrow as pa

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.batch_writer import SparkRows
from pipelines.runtime.spark_session import get_or_create_spark
from sinks.data_files import DataFileWriter
from sinks.txn_table import TxnDeltaTable

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("value", pa.string())])
ROWS_PER_PARTITION = 1000


@dataclasses.dataclass(frozen=True)
class FailingOnceWriter(DataFileWriter):
    """The first task attempt that writes a file then fails, as a crashed executor would. Tasks
    that wrote nothing (a Spark partition no Kafka partition hashed into) never fail, so the dead
    attempt always leaves a file behind."""

    marker_dir: str = ""

    def write_metadata(self, batches, keep_from=None):
        out = list(super().write_metadata(batches, keep_from))
        if not any(batch.column("path").null_count < batch.num_rows for batch in out):
            yield from out
            return
        try:
            os.close(os.open(os.path.join(self.marker_dir, "failed-once"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            yield from out
            return
        raise RuntimeError("injected executor failure after writing files")


def main(table_path: str, marker_dir: str) -> None:
    spark = get_or_create_spark("task-retry", {})
    partitions = [TopicPartition("t", 0), TopicPartition("t", 1)]
    table = TxnDeltaTable(table_path, "app", SCHEMA)
    epochs = table.claim(partitions)
    rows = [("t", tp.partition, o, f"v{o}") for tp in partitions for o in range(ROWS_PER_PARTITION)]
    df = spark.createDataFrame(rows, "topic STRING, partition INT, offset BIGINT, value STRING").repartition(2, "partition")
    base = table.file_writer()
    writer = FailingOnceWriter(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                               marker_dir=marker_dir)
    ranges = [OffsetRange("t", tp.partition, 0, ROWS_PER_PARTITION) for tp in partitions]
    result = table.commit_files(ranges, epochs, lambda plan: SparkRows(df).write(writer, plan.keep_from))
    print(json.dumps({"rows_written": result.rows_written, "version": result.table_version}))
    spark.stop()


class _FailingOnceFiles:
    """An open file set whose first :meth:`finish` that closed files, in any attempt, raises
    after closing them (the files stay, unreferenced)."""

    def __init__(self, files, marker_dir: str):
        self._files, self._marker_dir = files, marker_dir

    def add(self, batch) -> None:
        self._files.add(batch)

    def abandon(self) -> None:
        self._files.abandon()

    def finish(self):
        written = self._files.finish()
        if not written.files:
            return written
        try:
            os.close(os.open(os.path.join(self._marker_dir, "failed-once"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return written
        raise RuntimeError("injected executor failure after writing files")


@dataclasses.dataclass(frozen=True)
class FailingOnceOpenWriter(DataFileWriter):
    """A writer whose file sets fail once after writing (:class:`_FailingOnceFiles`)."""

    marker_dir: str = ""

    def open(self, keep_from=None):
        return _FailingOnceFiles(super().open(keep_from), self.marker_dir)


def main_arrow(table_path: str, marker_dir: str, bootstrap: str, topic: str) -> None:
    from confluent_kafka import Consumer, TopicPartition as KafkaPartition

    from pipelines.runtime.arrow_batches import ArrowKafkaBatch
    from pipelines.runtime.batch_writer import PlannedWrite
    from pipelines.runtime.records import RecordFormat

    spark = get_or_create_spark("task-retry-arrow", {})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "task-retry-ends"})
    ends = {p: consumer.get_watermark_offsets(KafkaPartition(topic, p), timeout=30)[1] for p in (0, 1)}
    consumer.close()
    ranges = tuple(OffsetRange(topic, p, 0, ends[p]) for p in (0, 1))
    fmt = RecordFormat("json", "id BIGINT", 1_000_000)
    output_schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                               ("timestamp", pa.timestamp("us", tz="UTC")), ("key", pa.string()),
                               ("key_bytes", pa.binary()), ("id", pa.int64())])
    dead_schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                             ("timestamp", pa.timestamp("us", tz="UTC")), ("key", pa.binary()),
                             ("value", pa.binary()), ("reason", pa.string())])
    table = TxnDeltaTable(table_path, "app", output_schema)
    dead = TxnDeltaTable(table_path + "_dead", "app", dead_schema)
    tps = [r.tp for r in ranges]
    epochs, dead_epochs = table.claim(tps), dead.claim(tps)
    base = table.file_writer()
    writer = FailingOnceOpenWriter(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                                   marker_dir=marker_dir)
    client = {"bootstrap.servers": bootstrap, "isolation.level": "read_uncommitted"}
    batch = ArrowKafkaBatch(spark, ranges, fmt, client, 2, None)
    dead_plan, plan = dead.plan(ranges, dead_epochs), table.plan(ranges, epochs)
    dead_written, written = batch.write_both(PlannedWrite(dead.file_writer(), dead_plan.keep_from),
                                             PlannedWrite(writer, plan.keep_from))
    dead.commit_files(ranges, dead_epochs, lambda p: dead_written, dead_plan)
    result = table.commit_files(ranges, epochs, lambda p: written, plan)
    print(json.dumps({"rows_written": result.rows_written, "version": result.table_version}))
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) > 3:
        main_arrow(*sys.argv[1:5])
    else:
        main(sys.argv[1], sys.argv[2])
