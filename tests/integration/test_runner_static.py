"""The runner's query lifecycle and the exactly-once sink against real Kafka, Spark and Delta,
with a fixed assignment (group membership is covered by the group and e2e tests)."""
from __future__ import annotations

import threading
import time

import pytest

from groupmgr.assignors.api import TopicPartition
from pipelines.config import load_pipeline
from pipelines.runner import PipelineRunner
from tests.support.kafka_data import (create_topic, delta_coordinates, json_events, produce,
                                      write_pipeline)
from tests.support.static_member import StaticMember

pytestmark = pytest.mark.integration


def _run_until(runner, predicate, timeout_s=120.0):
    deadline = time.monotonic() + timeout_s
    runner.run(threading.Event(), until=lambda: predicate() or time.monotonic() > deadline)
    assert predicate(), "pipeline did not reach the expected state in time"


def _recorded_all(runner, partitions, produced):
    ends: dict[TopicPartition, int] = {}
    for topic, p, offset in produced:
        tp = TopicPartition(topic, p)
        ends[tp] = max(ends.get(tp, 0), offset + 1)
    return lambda: all((v or 0) >= ends.get(tp, 0)
                       for tp, v in runner.tables.table.recorded_offsets(partitions).items())


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

    runner = PipelineRunner(config, spark, member_factory=factory, out=lambda _: None)
    _run_until(runner, _recorded_all(runner, partitions, produced))
    produced |= produce(bootstrap, topic, json_events(200, start=300))
    runner = PipelineRunner(config, spark, member_factory=factory, out=lambda _: None)
    _run_until(runner, _recorded_all(runner, partitions, produced))

    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)) == 500
    assert set(rows) == produced
    last_commit = members[-1].commits[-1][0]
    assert sum(last_commit.values()) <= 500 and all(isinstance(v, int) for v in last_commit.values())
