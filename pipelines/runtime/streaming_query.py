"""Start the Structured Streaming query of one assignment: exactly the owned partitions.

The query reads with Spark's Kafka source (``assign`` + explicit numeric ``startingOffsets``) and
writes through :class:`pipelines.runtime.batch_writer.BatchWriter`. Each start gets a fresh checkpoint
directory: the Delta table, not the checkpoint, is the source of truth for offsets, so a
checkpoint only has to live as long as its query.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping

from groupmgr.core import TopicPartition
from pipelines.runtime.hadoop_fs import HadoopFileSystem, join
from pipelines.runtime.spark_offsets import assign_json, to_spark_json


def new_checkpoint(root: str, label: str) -> str:
    """A fresh checkpoint location under ``root`` (any Hadoop path or URI)."""
    return join(root, label, uuid.uuid4().hex[:12])


def start_query(spark, source_options: Mapping[str, str], starts: Mapping[TopicPartition, int],
                writer, checkpoint: str, trigger: Mapping, name: str):
    """Start and return the StreamingQuery over ``starts``' partitions from those offsets.

    ``source_options`` are the Kafka source options (``kafka.*``, rate limits, failOnDataLoss);
    ``trigger`` the keyword arguments of ``DataStreamWriter.trigger``."""
    stream = (spark.readStream.format("kafka").options(**source_options)
              .option("assign", assign_json(starts))
              .option("startingOffsets", to_spark_json(starts))
              .load())
    return (stream.writeStream.queryName(name).foreachBatch(writer)
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start())


def remove_checkpoint(fs: HadoopFileSystem, checkpoint: str) -> None:
    """Delete a stopped query's checkpoint (best effort: a leftover is only wasted space)."""
    try:
        fs.delete(checkpoint)
    except Exception:  # noqa: BLE001 - the table holds the offsets; nothing depends on this
        pass
