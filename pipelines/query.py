"""Start the Structured Streaming query of one assignment: exactly the owned partitions.

The query reads with Spark's Kafka source (``assign`` + explicit numeric ``startingOffsets``) and
writes through :class:`pipelines.batch_writer.BatchWriter`. Each start gets a fresh checkpoint
directory: the Delta table, not the checkpoint, is the source of truth for offsets, so a
checkpoint only has to live as long as its query.
"""
from __future__ import annotations

import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from groupmgr.assignors.api import TopicPartition
from pipelines.offsets import assign_json, to_spark_json


@dataclass(frozen=True)
class SourceOptions:
    kafka_options: Mapping[str, str]          # kafka.bootstrap.servers, kafka.security.*, ...
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay: str | None = None
    fail_on_data_loss: bool = True

    def spark_options(self) -> dict[str, str]:
        options = dict(self.kafka_options)
        options["failOnDataLoss"] = str(self.fail_on_data_loss).lower()
        options["includeHeaders"] = "false"
        if self.max_offsets_per_trigger:
            options["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        if self.min_offsets_per_trigger:
            options["minOffsetsPerTrigger"] = str(self.min_offsets_per_trigger)
            if self.max_trigger_delay:
                options["maxTriggerDelay"] = self.max_trigger_delay
        return options


@dataclass(frozen=True)
class Trigger:
    processing_time: str | None = "2 seconds"
    available_now: bool = False

    def spark_kwargs(self) -> dict:
        return {"availableNow": True} if self.available_now else {"processingTime": self.processing_time}


def new_checkpoint(root: Path, label: str) -> Path:
    return Path(root) / label / uuid.uuid4().hex[:12]


def start_query(spark, source: SourceOptions, starts: Mapping[TopicPartition, int],
                writer, checkpoint: Path, trigger: Trigger, name: str):
    """Start and return the StreamingQuery over ``starts``' partitions from those offsets."""
    stream = (spark.readStream.format("kafka").options(**source.spark_options())
              .option("assign", assign_json(starts))
              .option("startingOffsets", to_spark_json(starts))
              .load())
    return (stream.writeStream.queryName(name).foreachBatch(writer)
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger.spark_kwargs())
            .start())


def remove_checkpoint(checkpoint: Path) -> None:
    shutil.rmtree(checkpoint, ignore_errors=True)
