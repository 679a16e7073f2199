"""Kafka keys that are not UTF-8: the output table keeps every key's exact bytes in ``key_bytes``;
``key`` is the UTF-8 text or null (pipelines/runtime/records.py). The table reads in delta-spark
and in deltalake → pyarrow; an output table created with the schema before ``key_bytes`` existed
gains the column and keeps being written."""
from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from groupmgr.core import TopicPartition
from pipelines.config import load_pipeline
from pipelines.runtime.pipeline_tables import KEY_BYTES, analyse_output
from pipelines.runtime.runner import PipelineRunner
from tests.support.kafka_data import (create_topic, delta_coordinates, log_end_offsets, produce,
                                      table_reached, write_pipeline)
from tests.support.static_member import StaticMember

pytestmark = pytest.mark.integration

KEYS = [b"\xff\xfe\x00binary", None, "plain".encode(), "grüße-键".encode(), b"\xc3\x28", b"", b"\x80"]


def _records(start: int = 0):
    return [(key, f'{{"id": {start + i}, "name": "n{start + i}"}}') for i, key in enumerate(KEYS)]


def _run(config, spark, partitions, produced, timeout_s: float = 180.0) -> None:
    ends = log_end_offsets(produced)
    reached = lambda: table_reached(config.sink.path, config.name, ends)  # noqa: E731
    runner = PipelineRunner.open(config, spark, out=lambda _: None,
                                 member_factory=lambda cfg, listener: StaticMember(listener, partitions))
    deadline = time.monotonic() + timeout_s
    runner.run(threading.Event(), until=lambda: reached() or time.monotonic() > deadline)
    assert reached(), "the table did not reach the produced offsets in time"


def _expected_key(raw: bytes | None) -> str | None:
    try:
        return None if raw is None else raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _assert_keys_read_back(spark, path: str, by_id: dict[int, bytes | None]) -> None:
    spark_rows = spark.read.format("delta").load(path).select("id", "key", KEY_BYTES).collect()
    got = {r.id: (r.key, None if r.key_bytes is None else bytes(r.key_bytes)) for r in spark_rows}
    arrow = DeltaTable(path).to_pyarrow_table(columns=["id", "key", KEY_BYTES])
    from_arrow = dict(zip(arrow.column("id").to_pylist(),
                          zip(arrow.column("key").to_pylist(), arrow.column(KEY_BYTES).to_pylist())))
    expected = {i: (_expected_key(raw), raw) for i, raw in by_id.items()}
    assert got == expected
    assert from_arrow == expected
    assert arrow.schema.field("key").type == pa.string() and arrow.schema.field(KEY_BYTES).type == pa.binary()
    arrow.validate(full=True)  # every string is valid UTF-8


def test_keys_that_are_not_utf8_keep_their_exact_bytes(bootstrap, spark, tmp_path, unique_name):
    topic = unique_name
    create_topic(bootstrap, topic, 2)
    produced = produce(bootstrap, topic, _records())
    config = load_pipeline(write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path))
    partitions = [TopicPartition(topic, p) for p in range(2)]
    _run(config, spark, partitions, produced)

    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)) == len(produced) and set(rows) == produced
    _assert_keys_read_back(spark, config.sink.path, dict(enumerate(KEYS)))
    assert spark.read.format("delta").load(config.sink.dead_letter_path).count() == 0


def test_a_table_created_before_key_bytes_gains_the_column_and_keeps_its_rows(bootstrap, spark, tmp_path,
                                                                             unique_name):
    topic = unique_name
    create_topic(bootstrap, topic, 1)
    config = load_pipeline(write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path))
    new_schema = analyse_output(config, spark).output_schema
    old_schema = new_schema.remove(new_schema.get_field_index(KEY_BYTES))
    old_row = {"topic": ["earlier"], "partition": [0], "offset": [0], "timestamp": [None],
               "key": ["old-key"], "id": [-1], "name": ["written before key_bytes"]}
    write_deltalake(config.sink.path, pa.table(old_row, schema=old_schema))
    produced = produce(bootstrap, topic, _records())
    _run(config, spark, [TopicPartition(topic, 0)], produced)

    assert KEY_BYTES in [f.name for f in DeltaTable(config.sink.path).schema().fields]
    rows = delta_coordinates(spark, config.sink.path)
    assert sorted(rows) == sorted(produced | {("earlier", 0, 0)})
    old = spark.read.format("delta").load(config.sink.path).where("id = -1").collect()
    assert [(r.key, r.key_bytes) for r in old] == [("old-key", None)]
    _assert_keys_read_back_new_rows(spark, config.sink.path)


def _assert_keys_read_back_new_rows(spark, path: str) -> None:
    expected = {i: (_expected_key(raw), raw) for i, raw in enumerate(KEYS)}
    rows = spark.read.format("delta").load(path).where("id >= 0").collect()
    assert {r.id: (r.key, None if r.key_bytes is None else bytes(r.key_bytes)) for r in rows} == expected
    arrow = DeltaTable(path).to_pyarrow_table(columns=["id", "key", KEY_BYTES])
    arrow.validate(full=True)
    got = {i: (k, b) for i, k, b in zip(*(arrow.column(c).to_pylist() for c in ("id", "key", KEY_BYTES)))
           if i >= 0}
    assert got == expected
