"""The Arrow path and the Spark SQL path make the same tables from the same records: a corpus of
awkward records, and fuzzed ones (tests/support/record_values.py, a fixed seed), on a real broker, written once by the batch writer through the Arrow pass on
the executors (no transform, ``arrow_batches``) and once through Spark SQL (a transform that
selects everything), into real Delta tables; both output tables and both dead-letter tables are
compared row for row, values and types."""
from __future__ import annotations

import json
import math
import uuid

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.arrow_batches import ArrowKafkaBatch, arrow_batches
from pipelines.runtime.batch_writer import BatchWriter, TableTargets
from pipelines.runtime.pipeline_tables import arrow_schema
from pipelines.runtime.records import (MAX_BRACKETS_TOLD_APART, RecordFormat, classify, dead_letters, good_rows,
                                       kafka_row_ddl)
from sinks.txn_table import TxnDeltaTable
from tests.support.fuzz import FUZZ, FUZZ_EXAMPLES
from tests.support.kafka_data import create_topic
from tests.support.record_values import record_keys, record_values

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
    b'{"d":Inf}', b'{"d":-Inf}', b'{"i":1,"x":[-NaN]}', b'{"s":"Info: Inf"}',
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
    # past the BMP in nested JSON read into a STRING (Jackson escapes the surrogates), and in a string
    '{"s":{"\U0001F600":["\U000e4792","\u00e9\\u0001"]}}'.encode(), b'{"s":["\\ud83d\\ude00"]}',
    '{"s":"\U0001F600"}'.encode(),
]
KEYS = [b"\xff\xfe\x00binary", None, b"plain", "grüße-键".encode(), b"\xc3\x28", b"", b"\x80"]


def _produce(bootstrap: str, topic: str, values, keys) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for n, value in enumerate(values):
        headers = None if n % 3 == 0 else [("h", b"\xff" if n % 2 else b"v"), ("h", None), ("k2", b"")]
        producer.produce(topic, key=keys[n % len(keys)], value=value, partition=n % 2, headers=headers)
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

    def recording(df, planned, left_out, fmt):
        batch = prepare(df, planned, left_out, fmt)
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


def _both_paths(spark, bootstrap, topic, tmp_path, values, keys) -> tuple[dict, int]:
    """``values`` written through the Arrow path and through Spark SQL; both output tables and both
    dead-letter tables compared row for row. Returns the dead letters' reasons by (partition,
    offset) and the number of output rows."""
    create_topic(bootstrap, topic, 2)
    _produce(bootstrap, topic, values, keys)
    from confluent_kafka import Consumer, TopicPartition as KafkaTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    ends = {p: consumer.get_watermark_offsets(KafkaTP(topic, p), timeout=30)[1] for p in (0, 1)}
    consumer.close()
    ranges = tuple(OffsetRange(topic, p, 0, ends[p]) for p in (0, 1))
    fmt = RecordFormat("json", SCHEMA, LIMIT, headers=True)
    batch_df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("assign", json.dumps({topic: [0, 1]})).option("includeHeaders", "true")
                .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    client = {"bootstrap.servers": bootstrap, "isolation.level": "read_uncommitted"}

    arrow_out, arrow_dead = _tables(spark, tmp_path, f"{topic}-arrow", fmt)
    prepared = _write(arrow_out, arrow_dead, fmt, ranges, batch_df,
                      prepare=arrow_batches(spark, fmt, None, client, lambda: 2))
    assert [type(b) for b in prepared] == [ArrowKafkaBatch]  # the Arrow pass wrote this batch
    sql_out, sql_dead = _tables(spark, tmp_path, f"{topic}-sql", fmt)
    _write(sql_out, sql_dead, fmt, ranges, batch_df, transform="SELECT * FROM input")

    for arrow_path, sql_path in ((arrow_out.path, sql_out.path), (arrow_dead.path, sql_dead.path)):
        (arrow_schema_, arrow_rows), (sql_schema, sql_rows) = _rows(arrow_path), _rows(sql_path)
        assert arrow_schema_ == sql_schema
        assert len(arrow_rows) == len(sql_rows)
        for got, expected in zip(arrow_rows, sql_rows):
            assert got == expected
    dead = {(r["partition"], r["offset"]): r["reason"] for r in _rows(arrow_dead.path)[1]}
    output = len(_rows(arrow_out.path)[1])
    assert len(dead) + output == sum(ends.values()) == len(values)  # each record once
    return dead, output


def test_the_arrow_path_and_spark_sql_make_the_same_tables(spark, bootstrap, unique_name, tmp_path):
    good = [json.dumps({"i": n, "s": f"good {n}"}).encode() for n in range(3000)]
    dead, _ = _both_paths(spark, bootstrap, unique_name, tmp_path, VALUES * 3 + good, KEYS)
    assert set(dead.values()) == {"null_value", "value_too_large", "empty_value", "invalid_utf8", "trailing_data",
                                  "malformed_json", "schema_mismatch"}


@settings(FUZZ, max_examples=max(1, FUZZ_EXAMPLES // 100))
@given(records=st.lists(st.tuples(record_values(LIMIT), record_keys), min_size=200, max_size=400))
def test_fuzzed_records_make_the_same_tables_on_both_paths(spark, bootstrap, unique_name, tmp_path, records):
    topic = f"{unique_name}-{uuid.uuid4().hex[:8]}"
    _both_paths(spark, bootstrap, topic, tmp_path, [v for v, _ in records], [k for _, k in records])


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
