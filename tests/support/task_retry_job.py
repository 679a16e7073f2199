"""A Spark job for tests/integration/test_task_retry.py, run by spark-submit with ``local[2,3]``
(tasks are retried): one micro-batch's rows written by the executors through the real sink, where
the first task attempt writes its file and then dies. Prints the commit result as JSON.

    spark-submit --master 'local[2,3]' tests/support/task_retry_job.py TABLE MARKER_DIR
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


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
