"""The Arrow path and the Spark SQL path make the same tables from the same records: one corpus
of awkward records on a real broker, written once by the batch writer through the Arrow pass on
the executors (no transform, ``arrow_batches``) and once through Spark SQL (a transform that
selects everything), into real Delta tables; both output tables and both dead-letter tables are
compared row for row, values and types."""
from __future__ import annotations

import json
import math

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.arrow_batches import ArrowKafkaBatch, arrow_batches
from pipelines.runtime.batch_writer import BatchWriter, TableTargets
from pipelines.runtime.pipeline_tables import arrow_schema
from pipelines.runtime.records import (MAX_BRACKETS_TOLD_APART, RecordFormat, classify, dead_letters, good_rows,
                                       kafka_row_ddl)
from sinks.txn_table import TxnDeltaTable
from tests.support.kafka_data import create_topic

pytestmark = pytest.mark.integration
SCHEMA = "i INT, l BIGINT, d DOUBLE, s STRING, b BOOLEAN, f FLOAT"
LIMIT = 5000
DEEP = 998  # an object holding arrays nested this deep: at the nesting limit, and one past it

VALUES = [
    b'{"i":1,"l":2,"d":3.5,"s":"x","b":true,"f":1.25}', b'{}', b'  {"i":7}  ', b'\t{"i":8}\r\n', b'{"i":null}',
    b'{"i":2147483647,"l":9223372036854775807}', b'{"i":-2147483648,"l":-9223372036854775808}',
    b'{"i":2147483648}', b'{"l":9223372036854775808}', b'{"i":-2147483649}', b'{"i":1.5}', b'{"i":1e2}',
    b'{"i":"5"}', b'{"i":true}', b'{"d":1e400}', b'{"d":-1e400}', b'{"d":1e-400}', b'{"d":5}', b'{"f":3.4e39}',
    b'{"d":NaN}', b'{"d":Infinity}', b'{"d":"NaN"}', b'{"d":-0.0}', b'{"b":"true"}', b'{"b":false}',
    b'{"s":5}', b'{"s":{"a":1, "b" : [1.50, "x\\u00e9", null, {"c":{}}]}}', b'{"s":[1,2]}', b'{"s":true}',
    b'{"s":1e20}', b'{"s":1.0}', b'{"s":0.001}', b'{"s":-2.5e-10}', b'{"s":{"k":1,"k":2}}',
    b'{"s":"\\u00e9\\ud83d\\ude00 \\" \\\\ \\/ \\n"}', b'{"s":"\\ud800"}', b'{"s":"\\udc00x"}',
    b'{"s":"gr\xc3\xbc\xc3\x9fe \xe9\x94\xae"}', b'{"i":1,"i":2}', b'{"I":4}', b'{"x":{"deep":[1,{"a":2}]},"i":3}',
    b'\xef\xbb\xbf{"i":1}', b'{"i":1} xyz', b'{"i":1}{"i":2}', b'{"i":1},{"i":2}', b'[{"i":1}]', b'5', b'"x"',
    b'null', b'true', b'', b'   ', b'{"s":"a\xffb"}', b'{"x":"a\xffb","i":1}', b'\xff', b'{"s":"x\ty"}',
    b'{"s":"a\nb"}', b'{\n"i":9\n}', b'{"i":01}', b'{"i":1,}', b"{'i':1}", b'{"i":1', b'{"i":}',
    b'{"x":' + b"[" * DEEP + b"]" * DEEP + b"}", b'{"x":' + b"[" * (DEEP + 1) + b"]" * (DEEP + 1) + b"}",
    b'{"s":' + b"[" * DEEP + b"]" * DEEP + b"}", b'{"s":"' + b"y" * (LIMIT - 7) + b'"}',
    b'{"s":"' + b"y" * (LIMIT - 6) + b'"}', None,
    # trailing data: the object's own reason, also past a closing bracket; up to the bracket bound
    b'{"i":1}],[{"i":2}', b'{"i":1}]', b'{"i":"x"} xyz', b'{"i":1} \x00', b'[1] x', b'"x" y', b'{"s":"\xff"} x',
    b'{"s":"' + b"[" * (MAX_BRACKETS_TOLD_APART - 2) + b'"} x', b'{"s":"' + b"[" * (MAX_BRACKETS_TOLD_APART - 1) + b'"} x',
    b'{"x":' + b"[" * (DEEP + 1) + b"]" * (DEEP + 1) + b"} x",
]
KEYS = [b"\xff\xfe\x00binary", None, b"plain", "grüße-键".encode(), b"\xc3\x28", b"", b"\x80"]


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for n, value in enumerate(VALUES * 3):  # a block with many good records around the bad ones
        headers = None if n % 3 == 0 else [("h", b"\xff" if n % 2 else b"v"), ("h", None), ("k2", b"")]
        producer.produce(topic, key=KEYS[n % len(KEYS)], value=value, partition=n % 2, headers=headers)
    for n in range(3000):
        producer.produce(topic, value=json.dumps({"i": n, "s": f"good {n}"}).encode(), partition=n % 2)
    assert producer.flush(60) == 0


class _Planned:
    def __init__(self, ranges):
        self._ranges = ranges

    def ranges(self, batch_id):
        return self._ranges


def _tables(spark, tmp_path, name, fmt):
    empty = classify(spark.createDataFrame([], kafka_row_ddl(fmt.headers)), fmt)
    table = TxnDeltaTable(str(tmp_path / f"{name}-out"), "p", arrow_schema(good_rows(empty, fmt)))
    dead = TxnDeltaTable(str(tmp_path / f"{name}-dead"), "p", arrow_schema(dead_letters(empty, fmt)), count_by="reason")
    return table, dead


def _write(table, dead, fmt, ranges, batch_df, transform=None, prepare=None):
    tps = [r.tp for r in ranges]
    targets = TableTargets(table, dead, table.claim(tps), dead.claim(tps))
    prepared = []

    def recording(df, planned, left_out):
        batch = prepare(df, planned, left_out)
        prepared.append(batch)
        return batch

    writer = BatchWriter(fmt, transform, targets, _Planned(ranges), commit_kafka=lambda offsets, meta: True,
                         report=lambda report: None, refused=lambda batch_id, err: None,
                         prepare=recording if prepare else None)
    writer(batch_df, 0)
    return prepared


def _rows(path):
    table = DeltaTable(path).to_pyarrow_table()
    table = table.sort_by([("partition", "ascending"), ("offset", "ascending")])
    return table.schema, [{k: _comparable(v) for k, v in row.items()} for row in table.to_pylist()]


def _comparable(value):
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


def test_the_arrow_path_and_spark_sql_make_the_same_tables(spark, bootstrap, unique_name, tmp_path):
    create_topic(bootstrap, unique_name, 2)
    _produce(bootstrap, unique_name)
    from confluent_kafka import Consumer, TopicPartition as KafkaTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    ends = {p: consumer.get_watermark_offsets(KafkaTP(unique_name, p), timeout=30)[1] for p in (0, 1)}
    consumer.close()
    ranges = tuple(OffsetRange(unique_name, p, 0, ends[p]) for p in (0, 1))
    fmt = RecordFormat("json", SCHEMA, LIMIT, headers=True)
    batch_df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("assign", json.dumps({unique_name: [0, 1]})).option("includeHeaders", "true")
                .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    client = {"bootstrap.servers": bootstrap, "isolation.level": "read_uncommitted"}

    arrow_out, arrow_dead = _tables(spark, tmp_path, "arrow", fmt)
    prepared = _write(arrow_out, arrow_dead, fmt, ranges, batch_df,
                      prepare=arrow_batches(spark, fmt, None, client, lambda: 2))
    assert [type(b) for b in prepared] == [ArrowKafkaBatch]  # the Arrow pass wrote this batch
    sql_out, sql_dead = _tables(spark, tmp_path, "sql", fmt)
    _write(sql_out, sql_dead, fmt, ranges, batch_df, transform="SELECT * FROM input")

    for arrow_path, sql_path in ((arrow_out.path, sql_out.path), (arrow_dead.path, sql_dead.path)):
        (arrow_schema_, arrow_rows), (sql_schema, sql_rows) = _rows(arrow_path), _rows(sql_path)
        assert arrow_schema_ == sql_schema
        assert len(arrow_rows) == len(sql_rows)
        for got, expected in zip(arrow_rows, sql_rows):
            assert got == expected
    dead = {(r["partition"], r["offset"]): r["reason"] for r in _rows(arrow_dead.path)[1]}
    assert set(dead.values()) == {"null_value", "value_too_large", "empty_value", "invalid_utf8", "trailing_data",
                                  "malformed_json", "schema_mismatch"}
    assert len(dead) + len(_rows(arrow_out.path)[1]) == sum(ends.values())  # each record once


def test_a_pipeline_with_a_transform_or_other_types_keeps_spark_sql(spark):
    client = {"bootstrap.servers": "localhost:1"}
    fmt = RecordFormat("json", SCHEMA, LIMIT)
    assert arrow_batches(spark, fmt, None, client, lambda: 1) is not None
    assert arrow_batches(spark, fmt, "SELECT * FROM input", client, lambda: 1) is None
    assert arrow_batches(spark, RecordFormat("json", "t TIMESTAMP, i INT", LIMIT), None, client, lambda: 1) is None
    assert arrow_batches(spark, RecordFormat("raw", None, LIMIT), None, client, lambda: 1) is not None


def test_a_batch_of_no_records_runs_no_job(spark):
    batch = ArrowKafkaBatch(spark, (OffsetRange("t", 0, 5, 5),), RecordFormat("raw", None, 10), {}, 2, None)
    dead, output = batch.write_both(None, None)
    assert dead.rows_written == output.rows_written == 0
