"""Kafka rows → parsed output rows and dead letters (Spark column expressions, no I/O).

Output rows keep the Kafka coordinates ``topic, partition, offset, timestamp, key, key_bytes``
next to the parsed fields, so every row can be audited back to its record. Key rule: ``key_bytes``
(BINARY) holds the record key's exact bytes; ``key`` (STRING) is the same key decoded as UTF-8, or
null when those bytes are not valid UTF-8 (never a lossy or invalid string). Both are null when the
record has no key.

Dead-letter rule (docs/DESIGN.md invariant 6; a bad record is never dropped silently), first match wins:

* ``null_value`` — the record has no value (a tombstone). Tombstones carry no data for an
  append-only table, so they are recorded as dead letters rather than silently skipped.
* ``value_too_large`` — the value is longer than ``max_value_bytes``.
* ``malformed_json`` — the value is not a JSON object (json format only).
* ``schema_mismatch`` — valid JSON whose fields do not fit the schema's types (json only).

A null key or a key that is not UTF-8 is not an error: the row is written (``key`` null). Missing JSON fields are null.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

REASON = "_dead_letter_reason"
CORRUPT = "_corrupt_record"


@dataclass(frozen=True)
class RecordFormat:
    """How a pipeline decodes record values: the kind, the JSON schema as Spark DDL, the size
    limit."""

    kind: str                         # "json" | "raw"
    schema_ddl: str | None            # Spark DDL for json, None for raw
    max_value_bytes: int              # longer values are dead letters (format.max_value_bytes)


KAFKA_ROW_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
                 "timestamp TIMESTAMP, timestampType INT")  # the rows of Spark's Kafka source


def classify(kafka_rows: DataFrame, fmt: RecordFormat) -> DataFrame:
    """Kafka source rows → coordinates, raw key/value, parsed fields (json) and a reason column
    that is null for good rows."""
    value_text = F.col("value").cast("string")
    base = [F.col(c) for c in ("topic", "partition", "offset", "timestamp")]
    base += [F.col("key").alias("_raw_key"), F.col("value").alias("_raw_value")]
    if fmt.kind == "raw":
        return kafka_rows.select(*base, F.col("value"), _reason(fmt, None, None).alias(REASON))
    parse_schema = f"{fmt.schema_ddl}, {CORRUPT} STRING"
    parsed = F.from_json(value_text, parse_schema,
                         {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    rows = kafka_rows.select(*base, parsed.alias("_parsed"))
    corrupt = F.col(f"_parsed.{CORRUPT}")
    # Parsed a second time only when the first parse failed: object with wrong types, or not JSON?
    raw_text = F.col("_raw_value").cast("string")
    is_object = F.when(corrupt.isNotNull(), F.from_json(raw_text, "MAP<STRING, STRING>").isNotNull())
    return rows.select("*", _reason(fmt, corrupt, is_object).alias(REASON))


def _reason(fmt: RecordFormat, corrupt: Column | None, is_object: Column | None) -> Column:
    rule = (F.when(F.col("_raw_value").isNull(), F.lit("null_value"))
            .when(F.octet_length("_raw_value") > fmt.max_value_bytes, F.lit("value_too_large")))
    if corrupt is not None:
        rule = (rule.when(corrupt.isNotNull() & ~F.coalesce(is_object, F.lit(False)),
                          F.lit("malformed_json"))
                .when(corrupt.isNotNull(), F.lit("schema_mismatch")))
    return rule.otherwise(F.lit(None).cast("string"))


def good_rows(classified: DataFrame, fmt: RecordFormat) -> DataFrame:
    """Rows without a reason, shaped for the output table (view ``input`` of a transform)."""
    return classified.filter(F.col(REASON).isNull()).select(*_output_columns(classified, fmt))


def _output_columns(classified: DataFrame, fmt: RecordFormat) -> list[Column]:
    coords = [F.col(c) for c in ("topic", "partition", "offset", "timestamp")]
    coords += [key_text(F.col("_raw_key")).alias("key"), F.col("_raw_key").alias("key_bytes")]
    if fmt.kind == "raw":
        return coords + [F.col("value")]
    fields = classified.schema["_parsed"].dataType.fieldNames()
    return coords + [F.col("_parsed").getField(name).alias(name) for name in fields if name != CORRUPT]


def key_text(raw_key: Column) -> Column:
    """The key as UTF-8 text, null when its bytes are not valid UTF-8 (Spark's binary → string
    cast copies the bytes unchecked; readers such as pyarrow and polars refuse invalid UTF-8)."""
    return F.try_validate_utf8(raw_key.cast("string"))


def dead_letters(classified: DataFrame) -> DataFrame:
    """Rows with a reason: coordinates, raw key and value bytes, and the reason."""
    return classified.filter(F.col(REASON).isNotNull()).select(*_dead_letter_columns())


def _dead_letter_columns() -> list[Column]:
    return [F.col(c) for c in ("topic", "partition", "offset", "timestamp")] + [
        F.col("_raw_key").alias("key"), F.col("_raw_value").alias("value"), F.col(REASON).alias("reason")]


OUTPUT, DEAD_LETTER = "output", "dead_letter"


def split_rows(classified: DataFrame, fmt: RecordFormat) -> DataFrame:
    """Both tables' rows in one pass: per record, the struct column ``output`` holds its output
    row (null for a dead letter) and ``dead_letter`` its dead-letter row (null for a good row);
    the structs' fields are exactly :func:`good_rows`' and :func:`dead_letters`' columns."""
    is_dead = F.col(REASON).isNotNull()
    return classified.select(F.when(~is_dead, F.struct(*_output_columns(classified, fmt))).alias(OUTPUT),
                             F.when(is_dead, F.struct(*_dead_letter_columns())).alias(DEAD_LETTER))
