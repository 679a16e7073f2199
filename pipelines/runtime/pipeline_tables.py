"""From a PipelineConfig to the pieces a member needs: record format, output and dead-letter
tables with their Arrow schemas, Kafka source options and trigger.

The output schema is derived once, before any query starts, by running the parsing (and the
optional SQL transform) over an empty DataFrame shaped like Spark's Kafka source rows, so a
transform that does not analyse fails at start-up, not in the first batch. The same analysis
(:func:`analyse_output`) is what ``scg validate`` runs, so both reject the same files:
a transform that does not analyse (``TRANSFORM_INVALID``), one whose result lacks a Kafka
coordinate (``TRANSFORM_DROPS_COORDINATES``), a ``sink.partition_by`` column the output lacks
(``PARTITION_COLUMN_NOT_IN_OUTPUT``).

Key column compatibility: output tables created before ``key_bytes`` existed (key rule in
:mod:`pipelines.runtime.records`) gain it as a nullable BINARY column when a member opens them
(one Delta metadata commit; rows written before read ``key_bytes = null``).
"""
from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from groupmgr.core import ExitCategory, ScgError

from pipelines.runtime.arrow_records import decodable_in_arrow
from pipelines.runtime.avro_types import AvroFormat
from pipelines.runtime.batch_writer import apply_transform
from pipelines.runtime.changes import (ChangeSpec, EnvelopeError, RowColumnClash, change_rows, classified_changes,
                                       table_columns)
from pipelines.runtime.pipeline_spec import PipelineSpec
from pipelines.runtime.protobuf_types import ProtobufFormat
from pipelines.runtime.records import HEADERS, RecordFormat, classify, dead_letters, good_rows, kafka_row_ddl
from pipelines.runtime.registry_client import RegistrySettings, process_registry
from pipelines.runtime.routing import Routing, routed
from pipelines.runtime.schema_follower import BatchSchema, SchemaFollower
from sinks.txn_table import StorageUnavailable, TxnDeltaTable, startup_storage_options
from sinks.upsert_table import UpsertDeltaTable

COORDINATE_COLUMNS = ("topic", "partition", "offset")
KEY_BYTES = "key_bytes"
ADDED_COLUMNS = (KEY_BYTES, HEADERS)  # nullable columns added to a table written without them
UPGRADE_ATTEMPTS = 5
SQL_CONTEXT_LOGGER = "SQLQueryContextLogger"   # pyspark.errors.exceptions.captured's logger
LARGE_VAR_TYPES_SETTING = "spark.sql.execution.arrow.useLargeVarTypes"  # what toArrow reads for string/binary types


class TransformShapeError(ScgError, ValueError):
    """The pipeline's transform drops a Kafka coordinate column exactly-once needs."""

    condition = "TRANSFORM_DROPS_COORDINATES"
    exit_category = ExitCategory.CONFIG

    def __init__(self, missing, prefix: str = ""):
        self.missing = tuple(missing)
        self.field_path = f"{prefix}transform"  # prefix: ``sink.tables[i].`` for one of several tables
        super().__init__(f"the transform's result lacks the Kafka coordinate column(s) "
                         f"{', '.join(self.missing)}; keep them (e.g. SELECT topic, partition, "
                         "offset, ... FROM input) so exactly-once can be verified")


class TransformInvalidError(ScgError, ValueError):
    """The pipeline's transform SQL does not parse or analyse against the view ``input``."""

    condition = "TRANSFORM_INVALID"
    exit_category = ExitCategory.CONFIG

    def __init__(self, cause: BaseException, columns, prefix: str = ""):
        self.reason = _first_line(cause)
        self.columns = tuple(columns)
        self.field_path = f"{prefix}transform"
        super().__init__(f"the transform does not analyse: {self.reason} (the view `input` has "
                         f"columns {', '.join(self.columns)})")


class PartitionColumnMissingError(ScgError, ValueError):
    """A ``sink.partition_by`` column is not a column of the output (the transform's result)."""

    condition = "PARTITION_COLUMN_NOT_IN_OUTPUT"
    exit_category = ExitCategory.CONFIG

    def __init__(self, column: str, index: int, columns, prefix: str = "sink."):
        self.column, self.index, self.columns = column, index, tuple(columns)
        self.field_path = f"{prefix}partition_by[{index}]"
        super().__init__(f"partition column {column!r} is not in the output; its columns are "
                         f"{', '.join(self.columns)}")


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
    schema_follower: SchemaFollower | None = None  # a registry reader schema that follows its subject
    routed: tuple[TxnDeltaTable, ...] = ()          # the output tables after ``table``, when routes name several
    routing: Routing | None = None                   # ... and the routes of all of them
    changes: ChangeSpec | None = None                # how records change the keys of an upsert table


class RouteInvalidError(ScgError, ValueError):
    """A table's route does not analyse against the output row's columns."""

    condition = "ROUTE_INVALID"
    exit_category = ExitCategory.CONFIG

    def __init__(self, cause: BaseException, columns):
        self.reason = _first_line(cause)
        self.columns = tuple(columns)
        self.field_path = "sink.tables"
        super().__init__(f"a route does not analyse: {self.reason} (the output row has columns "
                         f"{', '.join(self.columns)})")


class UpsertInvalidError(ScgError, ValueError):
    """An upsert table's key, ordering or envelope does not fit the records' output row."""

    condition = "UPSERT_INVALID"
    exit_category = ExitCategory.CONFIG

    def __init__(self, field_path: str, reason: str):
        self.field_path, self.reason = field_path, reason
        super().__init__(reason)


@dataclass(frozen=True)
class OutputShape:
    """The analysed result of a pipeline's parsing and transform over no rows: the record format
    and the Arrow schemas of the output and dead-letter tables."""

    record_format: RecordFormat
    output_schema: pa.Schema
    dead_letter_schema: pa.Schema
    routed_schemas: tuple[pa.Schema, ...] = ()  # the output tables' after the first, with several


def pipeline_routing(config: PipelineSpec) -> Routing | None:
    """The routes of ``config``'s output tables (None: one table, taking every record)."""
    tables = config.sink.output_tables(config.transform)
    if len(tables) == 1 and tables[0].route is None:
        return None
    return Routing(tuple(None if t.route is None else t.route.condition() for t in tables),
                   tuple(t.transform for t in tables), config.sink.route == "all")


def pipeline_changes(config: PipelineSpec) -> ChangeSpec | None:
    """How ``config``'s records change an upsert table's keys (None: the table takes appends)."""
    sink = config.sink
    if sink.mode != "upsert":
        return None
    return ChangeSpec(sink.key, sink.order_by, sink.delete_on_tombstone, config.format.envelope)


def batches_take_arrow_path(config: PipelineSpec) -> bool:
    """Whether ``config``'s batches run the one-pass Arrow path's jobs, as far as the pipeline
    file says: the ``scg-kafka`` reader, no transform, one output table taking appends (a record
    format the Arrow decoder cannot read still sends them through Spark SQL:
    :func:`~pipelines.runtime.arrow_batches.arrow_batches`)."""
    return (config.source.reader == "scg-kafka" and not config.transform
            and pipeline_routing(config) is None and pipeline_changes(config) is None)


def batches_skip_the_jvm(config: PipelineSpec) -> bool:
    """Whether no record of ``config``'s batches passes through the driver's JVM, as far as the
    pipeline file says: they take the one-pass Arrow path (:func:`batches_take_arrow_path`) and
    its records are decoded in Arrow (:func:`~pipelines.runtime.arrow_records.decodable_in_arrow`).
    A batch the Arrow path hands to Spark SQL after all (a retry after the dead-letter commit)
    still runs, only slower."""
    return batches_take_arrow_path(config) and decodable_in_arrow(config.format.type, config.format.schema_ddl())


def record_format(config: PipelineSpec, reader_text: str | None = None) -> RecordFormat:
    """How ``config``'s records are decoded. An Avro or Protobuf reader schema is ``reader_text``
    when given, else the configured one: a file, or the registry's, fetched now
    (SubjectNotFoundError, RegistryUnavailableError)."""
    fmt = config.format
    framed = key_framed = None
    if fmt.type in ("avro", "protobuf"):
        settings = fmt.registry_settings()
        text = reader_text if reader_text is not None else _reader_text(settings, fmt.reader_schema,
                                                                        reader_subject(config))
        framed = _framed(fmt.type, text, fmt.message, settings)
        key = fmt.key
        if key.type != "string":
            topic = config.topics[0] if config.topics else ""
            key_text = _reader_text(settings, key.reader_schema, key.registry_subject(topic))
            key_framed = _framed(key.type, key_text, key.message, settings)
    return RecordFormat(fmt.type, fmt.schema_ddl(), fmt.max_value_bytes, config.source.include_headers, framed,
                        key_framed)


def _reader_text(settings: RegistrySettings, reader: str, subject: str) -> str:
    """The text of a reader schema: ``reader`` is ``latest`` or a version of ``subject`` (fetched
    now), or a file."""
    if reader == "latest" or reader.isdigit():
        return process_registry(settings).subject_version(subject, None if reader == "latest" else int(reader)).text
    return Path(reader).read_text(encoding="utf-8")


def _framed(kind: str, text: str, message: str | None, settings: RegistrySettings) -> AvroFormat | ProtobufFormat:
    if kind == "avro":
        return AvroFormat(json.dumps(json.loads(text), sort_keys=True), settings)
    return ProtobufFormat(text, message, settings)


def reader_subject(config: PipelineSpec) -> str:
    """The registry subject of the reader schema (Avro, Protobuf): ``format.subject``, or the one
    ``format.subject_naming`` gives the first topic."""
    return config.format.registry_subject(config.topics[0] if config.topics else "")


def analyse_output(config: PipelineSpec, spark, fmt: RecordFormat | None = None) -> OutputShape:
    """Parse, route and transform an empty Kafka DataFrame as the query would, with ``fmt``
    (default: :func:`record_format`); raises TransformInvalidError, TransformShapeError,
    PartitionColumnMissingError or RouteInvalidError (all CONFIG)."""
    from pyspark.errors import PySparkException
    from pyspark.logger import PySparkLogger

    fmt = fmt or record_format(config)
    empty = spark.createDataFrame([], kafka_row_ddl(fmt.headers))
    classified = classify(empty, fmt)
    routing = pipeline_routing(config)
    tables = config.sink.output_tables(config.transform)
    several = bool(config.sink.tables)
    # pyspark logs a failed spark.sql with the whole JVM stack trace (logger SQLQueryContextLogger)
    # before raising; the named error below carries its first line, so that log is held back.
    context_logger = PySparkLogger.getLogger(SQL_CONTEXT_LOGGER)  # a plain Logger there would break pyspark
    was_disabled, context_logger.disabled = context_logger.disabled, True
    try:
        changes = pipeline_changes(config)
        if changes is not None:
            shape = upsert_schema(classified, fmt, changes)
            return OutputShape(fmt, shape, arrow_schema(dead_letters(classified_changes(classified, fmt, changes), fmt)))
        if routing is not None:
            try:
                classified = routed(classified, fmt, routing)
                classified.columns  # noqa: B018 - analysed now
            except PySparkException as exc:
                raise RouteInvalidError(exc, good_rows(classify(empty, fmt), fmt).columns) from None
        schemas = []
        for index, table in enumerate(tables):
            prefix = f"sink.tables[{index}]." if several else ""
            rows = good_rows(classified, fmt)
            try:
                output = apply_transform(rows, table.transform)
                columns = output.columns
            except PySparkException as exc:
                raise TransformInvalidError(exc, rows.columns, prefix) from None
            missing = [c for c in COORDINATE_COLUMNS if c not in columns]
            if missing:
                raise TransformShapeError(missing, prefix)
            for position, column in enumerate(table.partition_by):
                if column not in columns:
                    raise PartitionColumnMissingError(column, position, columns, prefix or "sink.")
            schemas.append(arrow_schema(output))
    finally:
        context_logger.disabled = was_disabled
    return OutputShape(fmt, schemas[0], arrow_schema(dead_letters(classified, fmt)), tuple(schemas[1:]))


def upsert_schema(classified, fmt: RecordFormat, changes: ChangeSpec) -> pa.Schema:
    """The schema of the upsert table ``classified`` (:func:`records.classify`'s rows, of ``fmt``)
    changes: the change rows' columns, without the change's own; raises UpsertInvalidError when
    the envelope, a key column or the ordering does not fit."""
    from pyspark.errors import PySparkException

    try:
        rows = change_rows(classified_changes(classified, fmt, changes))
        columns = rows.columns
    except (EnvelopeError, RowColumnClash) as exc:
        raise UpsertInvalidError("format.envelope", str(exc)) from None
    except PySparkException as exc:
        field = "sink.order_by" if changes.order_by else "sink.key"
        raise UpsertInvalidError(field, _first_line(exc)) from None
    kept = table_columns(columns)
    for index, column in enumerate(changes.key):
        if column not in kept:
            raise UpsertInvalidError(f"sink.key[{index}]", f"{column!r} is not a column of the output row; its "
                                     f"columns are {', '.join(kept)}")
    return arrow_schema(rows.select(*[f"`{c}`" for c in kept]))


def open_tables(config: PipelineSpec, spark) -> PipelineTables:
    """Build the tables and options of ``config`` (errors of :func:`analyse_output` at start-up);
    existing tables gain the columns of :func:`add_new_columns` they lack."""
    shape = analyse_output(config, spark)
    storage = config.storage.delta_storage_options()
    add_columns = config.sink.schema_evolution == "add_columns"
    changes = pipeline_changes(config)
    table, *routed_tables = (
        TxnDeltaTable(spec.path, config.name, schema, spec.partition_by, storage_options=storage,
                      add_columns=add_columns) if changes is None else
        UpsertDeltaTable(spec.path, config.name, schema, changes.key, spec.partition_by, storage_options=storage)
        for spec, schema in zip(config.sink.output_tables(config.transform),
                                (shape.output_schema, *shape.routed_schemas)))
    dead = TxnDeltaTable(config.sink.dead_letter_path, config.name, shape.dead_letter_schema,
                         storage_options=storage, count_by="reason")
    for each in (table, *routed_tables, dead):
        add_new_columns(each)
    options = {**config.kafka.spark_kafka_options(), **config.source.spark_options()}
    return PipelineTables(shape.record_format, table, dead, options, config.trigger.spark_trigger_kwargs(),
                          schema_follower(config, spark, BatchSchema(shape.record_format, table, tuple(routed_tables))),
                          tuple(routed_tables), pipeline_routing(config), changes)


def schema_follower(config: PipelineSpec, spark, start: BatchSchema) -> SchemaFollower | None:
    """The follower of ``config``'s reader schema, when it is a registry subject's latest version."""
    if start.fmt.framed is None or config.format.reader_schema != "latest":
        return None
    add_columns = config.sink.schema_evolution == "add_columns"

    def tables_for(fmt: RecordFormat) -> tuple[TxnDeltaTable, ...]:
        shape = analyse_output(config, spark, fmt)
        return tuple(table.with_schema(schema, add_columns)
                     for table, schema in zip(start.tables, (shape.output_schema, *shape.routed_schemas)))

    return SchemaFollower(process_registry(start.fmt.framed.registry), reader_subject(config), add_columns,
                          start, functools.partial(record_format, config), tables_for)


def add_new_columns(table: TxnDeltaTable) -> list[str]:
    """Add to an existing table the nullable columns of :data:`ADDED_COLUMNS` that its output
    has and the table lacks (``key_bytes`` for a table written before it existed, ``headers``
    once a pipeline turns on ``source.include_headers``); the names added, in order. A missing
    table is left alone (it is created with the full schema); members starting together may race:
    the loser re-reads."""
    from deltalake import DeltaTable, Schema
    from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

    wanted = [table.schema.field(name) for name in ADDED_COLUMNS if name in table.schema.names]
    if not wanted:
        return []
    options = startup_storage_options(table.storage_options)
    for attempt in range(UPGRADE_ATTEMPTS):
        try:
            existing = DeltaTable(table.path, storage_options=options)
            present = {f.name for f in existing.schema().fields}
            missing = [f.with_nullable(True) for f in wanted if f.name not in present]
            if missing:
                existing.alter.add_columns(Schema.from_arrow(pa.schema(missing)).fields)
            return [f.name for f in missing]
        except TableNotFoundError:
            return []
        except (CommitFailedError, DeltaError):
            if attempt == UPGRADE_ATTEMPTS - 1:
                raise
        except OSError as exc:
            raise StorageUnavailable(table.path, exc) from None
    return []


def arrow_schema(df) -> pa.Schema:
    """The Arrow schema Spark's ``toArrow`` produces for ``df`` (timestamps in UTC), converted
    from ``df``'s Spark schema as ``toArrow`` converts it, without running a job."""
    from pyspark.sql.pandas.types import to_arrow_schema

    large = df.sparkSession.conf.get(LARGE_VAR_TYPES_SETTING, "false") == "true"
    return to_arrow_schema(df.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC",
                           prefers_large_types=large)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:400]
