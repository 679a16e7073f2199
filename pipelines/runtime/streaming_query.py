"""Start the Structured Streaming query of one assignment: exactly the owned partitions.

The query reads with Spark's Kafka source (``assign`` + explicit numeric ``startingOffsets``) and
writes through :class:`pipelines.runtime.batch_writer.BatchWriter`. Each start gets a fresh checkpoint
directory: the Delta table, not the checkpoint, is the source of truth for offsets, so a
checkpoint only has to live as long as its query. :func:`failure_text` spells out why a query
failed, cause chain included, for :mod:`pipelines.runtime.failure_rules`.
"""
from __future__ import annotations

import time
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


def start_assigned_query(spark, source_options: Mapping[str, str], writer, checkpoint: str,
                         trigger: Mapping, name: str):
    """Start and return the StreamingQuery over the ``scg-kafka`` source
    (:mod:`pipelines.runtime.assigned_source`, registered on the session): it reads whatever the
    assignment file named in ``source_options`` says at each micro-batch."""
    from pipelines.runtime.assigned_source import SOURCE_NAME

    stream = spark.readStream.format(SOURCE_NAME).options(**source_options).load()
    return (stream.writeStream.queryName(name).foreachBatch(writer)
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start())


# Spark's status message once a trigger has planned (MicroBatchExecution): the sources are
# initialised, their planner answered
PLANNED_STATUS = ("Waiting for data to arrive", "Waiting for next trigger", "Processing new data")


def wait_until_planned(query, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Wait until ``query`` has been through one trigger (its status says so), has ended, or
    ``timeout_s`` passed; True when it planned."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if not query.isActive:
                return False
            if query.status["message"].startswith(PLANNED_STATUS):
                return True
        except Exception:  # noqa: BLE001 - a query that cannot answer is the main loop's to report
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def remove_checkpoint(fs: HadoopFileSystem, checkpoint: str) -> None:
    """Delete a stopped query's checkpoint (best effort: a leftover is only wasted space)."""
    try:
        fs.delete(checkpoint)
    except Exception:  # noqa: BLE001 - the table holds the offsets; nothing depends on this
        pass


FAILURE_TEXT_LIMIT = 200_000


def failure_text(error: BaseException) -> str:
    """``error`` and its whole cause chain as text: Python causes, and for a Spark error the JVM
    exceptions it wraps with their class names (pyspark's ``str`` gives only the top message, e.g.
    ``[STREAM_FAILED] ... terminated with exception: Timeout of 60000ms expired ...``, without the
    ``org.apache.kafka.common.errors.TimeoutException`` that caused it). Never raises; bounded."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < 20:
        seen.add(id(current))
        parts.append(_describe(current))
        trace = _safe(lambda c=current: getattr(c, "_stackTrace", None))
        if trace:
            parts.append(str(trace))
        current = (_safe(lambda c=current: getattr(c, "_cause", None)) or current.__cause__
                   or (None if current.__suppress_context__ else current.__context__))
    return "\n".join(parts)[:FAILURE_TEXT_LIMIT]


def _describe(error: BaseException) -> str:
    text = _safe(lambda: getattr(error, "_desc", None)) or _safe(lambda: str(error)) or ""
    return f"{type(error).__name__}: {text}"


def _safe(get):
    try:
        return get()
    except Exception:  # noqa: BLE001 - a JVM that is gone cannot describe its exception
        return None
