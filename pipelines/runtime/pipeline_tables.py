"""From a PipelineConfig to the pieces a member needs: record format, output and dead-letter
tables with their Arrow schemas, Kafka source options and trigger.

The output schema is derived once, before any query starts, by running the parsing (and the
optional SQL transform) over an empty DataFrame shaped like Spark's Kafka source rows, so a
transform that does not analyse fails at start-up, not in the first batch.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from groupmgr.core import ExitCategory, ScgError

from pipelines.runtime.batch_writer import apply_transform
from pipelines.runtime.pipeline_spec import PipelineSpec
from pipelines.runtime.records import RecordFormat, classify, dead_letters, good_rows
from sinks.txn_table import TxnDeltaTable

KAFKA_ROW_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
                 "timestamp TIMESTAMP, timestampType INT")
COORDINATE_COLUMNS = ("topic", "partition", "offset")


class TransformShapeError(ScgError, ValueError):
    """The pipeline's transform drops a Kafka coordinate column exactly-once needs."""

    condition = "TRANSFORM_DROPS_COORDINATES"
    exit_category = ExitCategory.CONFIG

    def __init__(self, missing):
        self.missing = tuple(missing)
        super().__init__(f"the transform's result lacks the Kafka coordinate column(s) "
                         f"{', '.join(self.missing)}; keep them (e.g. SELECT topic, partition, "
                         "offset, ... FROM input) so exactly-once can be verified")


@dataclass(frozen=True)
class PipelineTables:
    """Everything a member's queries need that does not change while it runs: the record format,
    both tables, Spark source options and trigger. Immutable; ``source_options`` hold revealed
    secrets and are left out of ``repr``."""

    record_format: RecordFormat
    table: TxnDeltaTable
    dead_table: TxnDeltaTable
    source_options: Mapping[str, str] = field(repr=False)
    trigger: Mapping = field(default_factory=dict)


def open_tables(config: PipelineSpec, spark) -> PipelineTables:
    """Build the tables and options of ``config``; raises TransformShapeError at start-up when
    the transform drops a coordinate column."""
    fmt = RecordFormat(config.format.type, config.format.schema_ddl(), config.format.max_value_bytes)
    empty = spark.createDataFrame([], KAFKA_ROW_DDL)
    classified = classify(empty, fmt)
    output = apply_transform(good_rows(classified, fmt), config.transform)
    missing = [c for c in COORDINATE_COLUMNS if c not in output.columns]
    if missing:
        raise TransformShapeError(missing)
    storage = config.storage.delta_storage_options()
    table = TxnDeltaTable(config.sink.path, config.name, arrow_schema(output),
                          config.sink.partition_by, storage_options=storage)
    dead = TxnDeltaTable(config.sink.dead_letter_path, config.name,
                         arrow_schema(dead_letters(classified)), storage_options=storage)
    options = {**config.kafka.spark_kafka_options(), **config.source.spark_options(),
               "includeHeaders": "false"}
    return PipelineTables(fmt, table, dead, options, config.trigger.spark_trigger_kwargs())


def arrow_schema(df) -> pa.Schema:
    """The Arrow schema Spark's ``toArrow`` produces for ``df`` (timestamps in UTC)."""
    return df.limit(0).toArrow().schema
