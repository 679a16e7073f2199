"""JSON with nested types (arrays, maps, structs, decimals and timestamps inside them), parsed by
the real Spark classification from a pipeline file's schema: values that fit become nested
columns, a nested value of the wrong type makes the record a ``schema_mismatch`` dead letter."""
from __future__ import annotations

import decimal
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pipelines.config import load_pipeline
from pipelines.runtime.records import KAFKA_ROW_DDL, RecordFormat, classify, dead_letters, good_rows

pytestmark = pytest.mark.integration
SCHEMA = ("id BIGINT, tags ARRAY<STRING>, attrs MAP<STRING, INT>, "
          "address STRUCT<city: STRING, `zip code`: INT, lines: ARRAY<STRUCT<n: INT, at: TIMESTAMP>>>, "
          "prices ARRAY<DECIMAL(9,2)>")
VALUES = [
    b'{"id":1,"tags":["a","b"],"attrs":{"x":1},"address":{"city":"Oslo","zip code":150,'
    b'"lines":[{"n":1,"at":"2026-11-27T10:00:00Z"}]},"prices":[1.25]}',
    b'{"id":2}',
    b'{"id":3,"tags":"not an array"}',
    b'{"id":4,"address":{"city":"Oslo","zip code":"x"}}',
    b'{"id":5,"attrs":{"x":"one"}}',
]


def _format(tmp_path: Path) -> RecordFormat:
    path = tmp_path / "p.yaml"
    path.write_text(f"""
name: nested
kafka: {{bootstrap_servers: "127.0.0.1:9092"}}
topics: [t]
group: {{id: g}}
format: {{type: json, schema: "{SCHEMA}"}}
sink: {{path: {tmp_path / 'out'}}}
""")
    config = load_pipeline(path)
    return RecordFormat("json", config.format.schema_ddl(), 1 << 20)


def test_nested_values_become_nested_columns_and_wrong_nested_types_are_dead_letters(spark, tmp_path):
    fmt = _format(tmp_path)
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = spark.createDataFrame([(b"k", v, "t", 0, n, when, 0) for n, v in enumerate(VALUES)], KAFKA_ROW_DDL)
    classified = classify(rows, fmt)
    good = {r["id"]: r for r in good_rows(classified, fmt).toArrow().to_pylist()}
    dead = {r["offset"]: r["reason"] for r in dead_letters(classified, fmt).toArrow().to_pylist()}
    assert sorted(good) == [1, 2] and dead == {2: "schema_mismatch", 3: "schema_mismatch", 4: "schema_mismatch"}
    first = good[1]
    assert first["tags"] == ["a", "b"] and first["attrs"] == [("x", 1)]
    assert first["address"] == {"city": "Oslo", "zip code": 150,
                                "lines": [{"n": 1, "at": datetime(2026, 11, 27, 10, tzinfo=timezone.utc)}]}
    assert first["prices"] == [decimal.Decimal("1.25")]
    assert good[2]["tags"] is None and good[2]["address"] is None
