"""Change events → the rows an upsert table merges (Spark column expressions, no I/O).

An upsert table (``sink.mode: upsert``) holds one row per key (``sink.key``). Each good record is
a change of its key: an upsert of the record's row, or a delete. What a record says:

* without an envelope, the record's output row is the key's new row (an upsert);
* with ``format.envelope: debezium`` the record is Debezium's envelope (``before``, ``after``,
  ``op``, ``source``, ...), or a record whose ``payload`` is (Debezium's JSON converter with
  schemas): for ``op`` ``d`` the row is ``before`` and the change a delete; for any other ``op``
  (``c``, ``u``, ``r``) the row is ``after`` and the change an upsert;
* with ``sink.delete_on_tombstone`` a tombstone (a record without a value) deletes the key read
  from the record's Kafka key: a key column that is a record column (``key``, ``topic``, ...) is
  that column; any other is the field of that name of the decoded key (Avro or Protobuf keys), or
  of the key parsed as a JSON object (also under ``payload``, as Debezium's JSON converter with
  schemas writes it). Without it a tombstone stays a dead letter ``null_value``.

A good record whose key columns are not all set (a Debezium event without the row image, a
tombstone whose key lacks a field) is a dead letter ``missing_key``: a change of no key cannot be
applied, and is never dropped silently.

Per batch, :func:`last_changes` keeps each key's last change (the highest ``sink.order_by`` value,
ties and the default broken by the Kafka offset): the executors collapse the batch, so the merge
gets at most one change per key (:mod:`sinks.upsert_table`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from groupmgr.core import TopicPartition
from pipelines.runtime.records import (NULL_VALUE, PARSED_KEY, REASON, RecordFormat, key_text,
                                       output_coordinates)
from sinks.upsert_table import DELETE  # change rows: true for a delete

MISSING_KEY = "missing_key"          # the dead-letter reason of a change whose key columns are not all set
ORDER = "_change_order"              # change rows: the sink.order_by value (null: order by offset)
DEBEZIUM = "debezium"
OFFSET_ORDER = "offset"              # sink.order_by's default: the Kafka offset
_TOMBSTONE = "_change_tombstone"
_RANK = "_change_rank"
_RECORD = "_parsed"                  # the classified record (records.classify)
_RAW = ("_raw_key", "_raw_value")    # the classified columns dead letters keep


@dataclass(frozen=True)
class ChangeSpec:
    """How a pipeline's records are applied to an upsert table: the ``key`` columns (of the output
    row), ``order_by`` (a record field, dotted for a nested one, or ``timestamp``; None: the
    Kafka offset), whether tombstones delete, and the envelope (``debezium`` or None)."""

    key: tuple[str, ...]
    order_by: str | None = None
    delete_on_tombstone: bool = False
    envelope: str | None = None


def classified_changes(classified: DataFrame, fmt: RecordFormat, spec: ChangeSpec) -> DataFrame:
    """``classified`` (:func:`records.classify`'s rows) as change events: each record's change row
    (:func:`change_rows`), then the raw key and value and the reason (with the coordinates, what
    :func:`records.dead_letters` reads). Tombstones are good records when they delete; a good
    record whose key is not all set gets the reason ``missing_key``. Raises RowColumnClash or
    EnvelopeError when the records cannot be such rows."""
    tombstone = F.coalesce(F.col(REASON) == NULL_VALUE, F.lit(False)) if spec.delete_on_tombstone else F.lit(False)
    marked = classified.withColumn(_TOMBSTONE, tombstone).withColumn(REASON, F.when(~F.col(_TOMBSTONE), F.col(REASON)))
    record_type = marked.schema[_RECORD].dataType if _RECORD in marked.columns else None
    image, names = _row_image(fmt, spec, record_type)
    event = _event(record_type)[0] if spec.envelope == DEBEZIUM else None
    columns = dict(output_coordinates(fmt))
    taken = {name.lower() for name in columns}
    clashes = [name for name in names if name.lower() in taken]
    if clashes:
        raise RowColumnClash(clashes)
    for name in names:
        columns[name] = image.getField(name) if image is not None else F.col(name)
    for column in spec.key:
        if column in names and fmt.kind != "raw":  # a raw tombstone has no value to read a key from
            columns[column] = F.when(F.col(_TOMBSTONE), _key_field(fmt, column, _field_type(record_type, spec, column))) \
                .otherwise(columns[column])
    missing = F.lit(False)
    for column in spec.key:
        missing = missing | columns.get(column, F.lit(None)).isNull()
    reason = F.coalesce(F.col(REASON), F.when(missing, F.lit(MISSING_KEY)))
    delete = F.col(_TOMBSTONE)
    if spec.envelope == DEBEZIUM:
        delete = delete | F.coalesce(event.getField("op") == "d", F.lit(False))
    order = _order(spec.order_by)
    return marked.select(*[column.alias(name) for name, column in columns.items()], delete.alias(DELETE),
                         order.alias(ORDER), *[F.col(c) for c in _RAW], reason.alias(REASON))


def change_rows(changes: DataFrame) -> DataFrame:
    """The good records of :func:`classified_changes`: the output row (coordinates, key, the
    row's fields), then :data:`DELETE` and :data:`ORDER`."""
    kept = [c for c in changes.columns if c not in (*_RAW, REASON)]
    return changes.filter(F.col(REASON).isNull()).select(*[F.col(f"`{c}`") for c in kept])


def table_columns(change_row_columns: list[str]) -> list[str]:
    """The upsert table's columns: a change row's, without :data:`DELETE` and :data:`ORDER`."""
    return [c for c in change_row_columns if c not in (DELETE, ORDER)]


def last_changes(rows: DataFrame, key: tuple[str, ...], keep_from: Mapping[TopicPartition, int],
                 ordered: bool = False) -> DataFrame:
    """Each key's last change among ``rows`` (:func:`change_rows`) at or above ``keep_from`` (rows
    of partitions it does not name are left out): the highest :data:`ORDER`, then the highest
    offset, then partition and topic. ``ordered`` (``sink.order_by`` is given): a change without
    an order value (a tombstone has none) takes the highest one of its key's changes before it
    (by offset) in the batch, so it wins over those and loses to later ones. Returns the table's
    columns and :data:`DELETE`."""
    kept = None
    for tp, start in sorted(keep_from.items()):
        test = (F.col("topic") == tp.topic) & (F.col("partition") == tp.partition) & (F.col("offset") >= start)
        kept = test if kept is None else kept | test
    if kept is None:
        return rows.where(F.lit(False)).drop(ORDER)
    keys = [F.col(f"`{k}`") for k in key]
    rows = rows.where(kept)
    if ordered:
        before = Window.partitionBy(*keys).orderBy("offset", "partition", "topic").rowsBetween(
            Window.unboundedPreceding, Window.currentRow)
        rows = rows.withColumn(ORDER, F.coalesce(F.col(ORDER), F.max(ORDER).over(before)))
    last = Window.partitionBy(*keys).orderBy(
        F.col(ORDER).desc_nulls_last(), F.col("offset").desc(), F.col("partition").desc(), F.col("topic").desc())
    return rows.withColumn(_RANK, F.row_number().over(last)).where(F.col(_RANK) == 1).drop(_RANK, ORDER)


def _row_image(fmt: RecordFormat, spec: ChangeSpec, record_type) -> tuple[Column | None, list[str]]:
    """The struct whose fields are the output row's (None: the raw ``value`` column) and their names."""
    if fmt.kind == "raw":
        return None, ["value"]
    if spec.envelope != DEBEZIUM:
        return F.col(_RECORD), list(record_type.fieldNames())
    event, event_type = _event(record_type)
    before = event.getField("before") if "before" in event_type.fieldNames() else F.lit(None)
    image = F.when(event.getField("op") == "d", before).otherwise(event.getField("after"))
    return image, list(event_type["after"].dataType.fieldNames())


def _event(record_type) -> tuple[Column, StructType]:
    """A Debezium record's change event (the record, or its ``payload``) and its type; a named
    error when it has no ``op`` or no ``after`` struct (the row image)."""
    def is_event(struct) -> bool:
        return (isinstance(struct, StructType) and "op" in struct.fieldNames() and "after" in struct.fieldNames()
                and isinstance(struct["after"].dataType, StructType))

    if is_event(record_type):
        return F.col(_RECORD), record_type
    names = record_type.fieldNames() if isinstance(record_type, StructType) else []
    if "payload" in names and is_event(record_type["payload"].dataType):
        return F.col(_RECORD).getField("payload"), record_type["payload"].dataType
    raise EnvelopeError(sorted(names))


def _field_type(record_type, spec: ChangeSpec, column: str):
    struct = _event(record_type)[1]["after"].dataType if spec.envelope == DEBEZIUM else record_type
    return struct[column].dataType


def _key_field(fmt: RecordFormat, column: str, data_type) -> Column:
    """Key column ``column`` of a tombstone, read from its Kafka key (module docstring)."""
    if fmt.key_framed is not None:
        names = fmt.key_framed.arrow_schema().names
        return F.col(PARSED_KEY).getField(column) if column in names else F.lit(None).cast(data_type)
    if fmt.kind == "raw":
        return F.lit(None).cast(data_type)
    name = f"`{column.replace('`', '``')}`"
    parsed = F.from_json(key_text(F.col("_raw_key")),
                         f"{name} {data_type.simpleString()}, payload STRUCT<{name}: {data_type.simpleString()}>")
    return F.coalesce(parsed.getField(column), parsed.getField("payload").getField(column))


def _order(order_by: str | None) -> Column:
    if order_by is None or order_by == OFFSET_ORDER:
        return F.lit(None).cast("long")
    if order_by == "timestamp":
        return F.col("timestamp")
    column = F.col(_RECORD)
    for part in order_by.split("."):
        column = column.getField(part)
    return column


class RowColumnClash(ValueError):
    """Fields of the change's row are named like the columns every output row carries."""

    def __init__(self, names):
        self.names = tuple(names)
        super().__init__(f"the row has fields named like the record's own columns ({', '.join(self.names)}: "
                         "topic, partition, offset, timestamp, key, key_bytes, headers); the table cannot hold both")


class EnvelopeError(ValueError):
    """The records are not Debezium envelopes: they lack ``after`` (a struct) or ``op``."""

    def __init__(self, fields):
        self.fields = tuple(fields)
        super().__init__("format.envelope debezium needs records with the fields `op` and `after` (the row "
                         f"image, a struct); the records have {', '.join(self.fields) or 'no fields'}")
