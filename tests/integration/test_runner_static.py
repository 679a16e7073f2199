"""The runner's query lifecycle and the exactly-once sink against real Kafka, Spark and Delta,
with a fixed assignment (group membership is covered by the group and e2e tests)."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from groupmgr.core import TopicPartition
from pipelines.config import load_pipeline
from pipelines.runtime.runner import PipelineRunner
from tests.support.kafka_data import (create_topic, delta_coordinates, json_events,
                                      log_end_offsets, produce, table_reached, write_pipeline)
from tests.support.static_member import StaticMember

pytestmark = pytest.mark.integration


def _run_until(runner, predicate, timeout_s=120.0):
    deadline = time.monotonic() + timeout_s
    runner.run(threading.Event(), until=lambda: predicate() or time.monotonic() > deadline)
    assert predicate(), "pipeline did not reach the expected state in time"


def _recorded_all(runner, partitions, produced):
    ends = log_end_offsets(produced)
    return lambda: table_reached(runner.config.sink.path, runner.config.name, ends)


def test_records_land_once_and_restart_resumes_from_delta(bootstrap, spark, tmp_path, unique_name):
    topic = unique_name
    create_topic(bootstrap, topic, 3)
    produced = produce(bootstrap, topic, json_events(300))
    config = load_pipeline(write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path))
    partitions = [TopicPartition(topic, p) for p in range(3)]
    members = []

    def factory(cfg, listener):
        members.append(StaticMember(listener, partitions))
        return members[-1]

    runner = PipelineRunner.open(config, spark, member_factory=factory, out=lambda _: None)
    _run_until(runner, _recorded_all(runner, partitions, produced))
    produced |= produce(bootstrap, topic, json_events(200, start=300))
    runner = PipelineRunner.open(config, spark, member_factory=factory, out=lambda _: None)
    _run_until(runner, _recorded_all(runner, partitions, produced))

    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)) == 500
    assert set(rows) == produced
    last_commit = members[-1].commits[-1][0]
    assert sum(last_commit.values()) <= 500 and all(isinstance(v, int) for v in last_commit.values())


def test_bad_records_go_once_to_the_dead_letter_table(bootstrap, spark, tmp_path, unique_name):
    topic = unique_name
    create_topic(bootstrap, topic, 2)
    good = [(None, '{"id": 1, "name": "no key"}'), ("k", '{"id": 2, "name": "ok"}'),
            ("k", '{"id": 3}')]
    bad = {"malformed_json": ("k", "{not json"), "schema_mismatch": ("k", '{"id": "x", "name": "y"}'),
           "null_value": ("k", None), "value_too_large": ("k", '{"id": 4, "name": "' + "x" * 5000 + '"}')}
    produced_good = produce(bootstrap, topic, good)
    produced_bad = {reason: produce(bootstrap, topic, [record]) for reason, record in bad.items()}
    config = load_pipeline(write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path,
                                          extra="format: {type: json, schema: 'id BIGINT, name STRING', "
                                                "max_value_bytes: 4096}\n"))
    partitions = [TopicPartition(topic, p) for p in range(2)]
    everything = produced_good.union(*produced_bad.values())

    for _ in range(2):  # the second run replays nothing: the tables already hold every offset
        runner = PipelineRunner.open(config, spark, out=lambda _: None,
                                     member_factory=lambda cfg, lst: StaticMember(lst, partitions))
        _run_until(runner, _recorded_all(runner, partitions, everything))

    assert sorted(delta_coordinates(spark, config.sink.path)) == sorted(produced_good)
    dead = spark.read.format("delta").load(config.sink.dead_letter_path).collect()
    assert len(dead) == len(bad)
    by_reason = {r.reason: r for r in dead}
    for reason, coords in produced_bad.items():
        row = by_reason[reason]
        assert {(row.topic, row.partition, row.offset)} == coords
        assert row.key == b"k"
        expected_value = bad[reason][1]
        assert row.value == (None if expected_value is None else expected_value.encode())
    keys = {r.id: r.key for r in spark.read.format("delta").load(config.sink.path).collect()}
    assert keys == {1: None, 2: "k", 3: "k"}


def test_failed_query_restarts_from_the_table_without_loss_or_duplicates(
        bootstrap, spark, tmp_path, unique_name, monkeypatch):
    from groupmgr.kafka_faults import Backoff
    from pipelines.runtime import runner as runner_module
    from pipelines.runtime.batch_writer import BatchHooks

    topic = unique_name
    create_topic(bootstrap, topic, 2)
    produced = produce(bootstrap, topic, json_events(200))
    config = load_pipeline(write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path))
    partitions = [TopicPartition(topic, p) for p in range(2)]
    calls = []

    def fail_first(batch_id, ranges):  # the first batch fails after preparing, before any commit
        calls.append(batch_id)
        if len(calls) == 1:
            raise RuntimeError("injected transient failure")

    monkeypatch.setattr(runner_module, "RESTART_BACKOFF", Backoff(0.0, 0.0))
    lines: list[str] = []
    runner = PipelineRunner.open(config, spark, out=lines.append, hooks=BatchHooks(before_commit=fail_first),
                                 member_factory=lambda cfg, lst: StaticMember(lst, partitions))
    _run_until(runner, _recorded_all(runner, partitions, produced))
    assert any("restarting from the table's offsets (1/5)" in line for line in lines)
    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)) and set(rows) == produced


def test_the_warm_up_reads_through_the_kafka_source_and_leaves_nothing(bootstrap, spark, tmp_path, unique_name):
    """The spark-kafka reader's warm-up before joining: an available-now query over the last record of the
    first topic's partition 0 runs the batch path; no data file, no table version, no checkpoint
    file and no Kafka commit is left behind."""
    topic = unique_name
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, json_events(20))
    config = load_pipeline(write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path,
                                          reader="spark-kafka"))
    lines, members = [], []

    def factory(cfg, listener):
        members.append(StaticMember(listener, []))
        return members[-1]

    runner = PipelineRunner.open(config, spark, member_factory=factory, out=lines.append)
    tables = [Path(config.sink.path), Path(config.sink.dead_letter_path)]
    before = {t: sorted(p.relative_to(t) for p in t.rglob("*")) for t in tables}
    runner.reader.warm_up(threading.Event())
    warmed = [line for line in lines if "batch path warmed up" in line]
    assert warmed and f"read {topic}-0@" in warmed[0], lines
    assert {t: sorted(p.relative_to(t) for p in t.rglob("*")) for t in tables} == before
    assert [p for p in Path(config.checkpoint_root).rglob("*") if p.is_file()] == []
    assert members[0].commits == []
