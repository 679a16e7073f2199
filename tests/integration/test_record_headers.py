"""Kafka record headers (``source.include_headers``): with either reader both tables keep each
record's headers exactly as Spark's Kafka source gives them (order, repeated keys, null values,
null for none), a transform can use them, and a table written before gains the column."""
from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable, write_deltalake

from groupmgr.core import TopicPartition
from pipelines.config import load_pipeline
from pipelines.runtime.pipeline_tables import analyse_output
from pipelines.runtime.records import HEADERS
from pipelines.runtime.runner import PipelineRunner
from tests.support.kafka_data import create_topic, log_end_offsets, table_reached, write_pipeline
from tests.support.static_member import StaticMember

pytestmark = pytest.mark.integration

TRANSFORM = "SELECT *, try_element_at(filter(headers, h -> h.key = 'trace-id'), 1).value AS trace FROM input"
RECORDS = [  # value, headers
    ('{"id": 0, "name": "a"}', [("trace-id", b"t0"), ("empty", None)]),
    ('{"id": 1, "name": "b"}', None),
    ("not json", [("trace-id", b"bad"), ("bytes", b"\xff\x00")]),
    ('{"id": 3, "name": "d"}', [("trace-id", b"first"), ("trace-id", b"second")]),
]


def _produce(bootstrap: str, topic: str) -> set[tuple[str, int, int]]:
    produced = set()
    producer = Producer({"bootstrap.servers": bootstrap})
    for value, headers in RECORDS:
        producer.produce(topic, value=value.encode(), partition=0, headers=headers,
                         on_delivery=lambda err, msg: err or produced.add((msg.topic(), msg.partition(), msg.offset())))
    assert producer.flush(30) == 0
    return produced


def _config(tmp_path, bootstrap, topic, group, reader: str):
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, topic, group, tmp_path,
                          extra='format: {type: json, schema: "id BIGINT, name STRING"}\n'
                                f'transform: "{TRANSFORM}"\n', reader=reader)
    text = path.read_text().replace("  starting_offsets: earliest\n",
                                    "  starting_offsets: earliest\n  include_headers: true\n")
    path.write_text(text)
    return load_pipeline(path)


def _run(config, spark, produced, timeout_s: float = 180.0) -> None:
    ends = log_end_offsets(produced)
    reached = lambda: table_reached(config.sink.path, config.name, ends)  # noqa: E731
    runner = PipelineRunner.open(config, spark, out=lambda _: None, member_factory=lambda cfg, listener: StaticMember(
        listener, [TopicPartition(config.topics[0], 0)]))
    deadline = time.monotonic() + timeout_s
    runner.run(threading.Event(), until=lambda: reached() or time.monotonic() > deadline)
    assert reached(), "the table did not reach the produced offsets in time"


def _headers(rows) -> dict[int, list | None]:
    return {r.offset: None if r.headers is None else [(h.key, None if h.value is None else bytes(h.value))
                                                      for h in r.headers] for r in rows}


@pytest.mark.parametrize("reader", ["spark-kafka", "scg-kafka"])
def test_both_tables_keep_each_record_s_headers(bootstrap, spark, tmp_path, unique_name, reader):
    create_topic(bootstrap, unique_name, 1)
    produced = _produce(bootstrap, unique_name)
    config = _config(tmp_path, bootstrap, unique_name, unique_name, reader)
    _run(config, spark, produced)

    output = spark.read.format("delta").load(config.sink.path).collect()
    assert _headers(output) == {0: RECORDS[0][1], 1: None, 3: RECORDS[3][1]}
    assert {r.offset: r.trace for r in output} == {0: b"t0", 1: None, 3: b"first"}
    dead = spark.read.format("delta").load(config.sink.dead_letter_path).collect()
    assert [(r.offset, r.reason) for r in dead] == [(2, "malformed_json")]
    assert _headers(dead) == {2: RECORDS[2][1]}
    arrow = DeltaTable(config.sink.path).to_pyarrow_table(columns=["offset", HEADERS])
    assert dict(zip(arrow.column("offset").to_pylist(), arrow.column(HEADERS).to_pylist()))[3] == [
        {"key": "trace-id", "value": b"first"}, {"key": "trace-id", "value": b"second"}]


def test_a_table_written_without_headers_gains_the_column(bootstrap, spark, tmp_path, unique_name):
    create_topic(bootstrap, unique_name, 1)
    config = _config(tmp_path, bootstrap, unique_name, unique_name, "spark-kafka")
    new_schema = analyse_output(config, spark).output_schema
    old_schema = new_schema.remove(new_schema.get_field_index(HEADERS))
    old_row = {"topic": ["earlier"], "partition": [0], "offset": [0], "timestamp": [None], "key": [None],
               "key_bytes": [None], "id": [-1], "name": ["written before headers"], "trace": [None]}
    write_deltalake(config.sink.path, pa.table(old_row, schema=old_schema))
    produced = _produce(bootstrap, unique_name)
    _run(config, spark, produced)

    assert HEADERS in [f.name for f in DeltaTable(config.sink.path).schema().fields]
    rows = spark.read.format("delta").load(config.sink.path).collect()
    assert {r.id: r.headers for r in rows if r.id == -1} == {-1: None}
    assert _headers(r for r in rows if r.topic == unique_name) == {0: RECORDS[0][1], 1: None, 3: RECORDS[3][1]}
