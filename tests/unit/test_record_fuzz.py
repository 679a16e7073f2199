"""Fuzzing record values through the Arrow decoder (pipelines/runtime/arrow_records.py), no Spark:
random bytes, near-JSON, and mutations of valid records, in blocks. The contract: every record
ends in exactly one table; a dead letter keeps its key and value bytes unchanged and has a
reason; an output row keeps its key bytes; and a block decides each record exactly as
``decode_value`` decides it alone (the block parser never accepts what the reference refuses,
nor changes a field). The Spark SQL path is held to the same records by
tests/integration/test_arrow_path.py."""
from __future__ import annotations

import math
from datetime import datetime, timezone

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from pipelines.runtime.arrow_records import BlockDecoder, decode_value, schema_fields
from pipelines.runtime.kafka_range_reader import KAFKA_ROW_ARROW
from pipelines.runtime.records import NULL_VALUE, VALUE_TOO_LARGE, RecordFormat
from tests.support.fuzz import FUZZ
from tests.support.record_values import record_keys, record_values

SCHEMA = "i INT, l BIGINT, d DOUBLE, s STRING, b BOOLEAN, f FLOAT"
FIELDS = schema_fields(SCHEMA)
LIMIT = 400
JSON = RecordFormat("json", SCHEMA, LIMIT)
RAW = RecordFormat("raw", None, LIMIT)

_values = record_values(LIMIT)
_keys = record_keys


def _block(values, keys) -> pa.RecordBatch:
    n = len(values)
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.array(["t"] * n), pa.array([0] * n, pa.int32()),
         pa.array(range(n), pa.int64()), pa.array([when] * n, pa.timestamp("us", tz="UTC")),
         pa.array([0] * n, pa.int32())], schema=KAFKA_ROW_ARROW)


def _same(got, expected) -> bool:
    if isinstance(got, float) and isinstance(expected, float) and math.isnan(got):
        return math.isnan(expected)
    return got == expected


def _expected(value: bytes | None) -> tuple[dict | None, str | None]:
    if value is None:
        return None, NULL_VALUE
    if len(value) > LIMIT:
        return None, VALUE_TOO_LARGE
    return decode_value(value, FIELDS)


@FUZZ
@given(st.lists(st.tuples(_values, _keys), min_size=1, max_size=60))
def test_each_record_lands_once_as_the_reference_decides_it_bytes_unchanged(records):
    values, keys = [v for v, _ in records], [k for _, k in records]
    split = BlockDecoder(JSON).split(_block(values, keys))
    output, dead = split.output.to_pylist(), split.dead_letters.to_pylist()
    assert sorted(r["offset"] for r in output + dead) == list(range(len(records)))  # each exactly once
    for row in dead:
        n = row["offset"]
        assert (row["value"], row["key"]) == (values[n], keys[n])  # bytes unchanged
        assert row["reason"] == _expected(values[n])[1]
    for row in output:
        n = row["offset"]
        fields, reason = _expected(values[n])
        assert reason is None and row["key_bytes"] == keys[n]
        assert all(_same(row[f.name], fields[f.name]) for f in FIELDS), (values[n], row, fields)


@FUZZ
@given(st.lists(st.tuples(_values, _keys), min_size=1, max_size=60))
def test_raw_records_keep_their_bytes_and_only_tombstones_and_size_are_dead(records):
    values, keys = [v for v, _ in records], [k for _, k in records]
    split = BlockDecoder(RAW).split(_block(values, keys))
    kept = {r["offset"]: r for r in split.output.to_pylist()}
    dead = {r["offset"]: r["reason"] for r in split.dead_letters.to_pylist()}
    assert sorted([*kept, *dead]) == list(range(len(records)))
    for n, value in enumerate(values):
        if value is None or len(value) > LIMIT:
            assert dead[n] == (NULL_VALUE if value is None else VALUE_TOO_LARGE)
        else:
            assert (kept[n]["value"], kept[n]["key_bytes"]) == (value, keys[n])
