"""The runner with a real group member: several topics in one pipeline, partitions added to a
topic and a new topic matching ``topic_pattern`` picked up by the next rebalance (docs/DESIGN.md
invariants 1 and 5)."""
from __future__ import annotations

import threading

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from groupmgr.core import TopicPartition
from pipelines.config import load_pipeline
from pipelines.runtime.membership import group_member_factory, resolve_topics
from pipelines.runtime.runner import PipelineRunner
from tests.support.kafka_data import (create_topic, delta_coordinates, json_events, log_end_offsets,
                                      produce, table_reached, write_pipeline)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("reader", ["spark-kafka", "scg-kafka"])
def test_two_topics_and_added_partitions(bootstrap, spark, tmp_path, unique_name, reader):
    first, second = f"{unique_name}-a", f"{unique_name}-b"
    create_topic(bootstrap, first, 2)
    create_topic(bootstrap, second, 1)
    produced = produce(bootstrap, first, json_events(200)) | produce(bootstrap, second, json_events(50))
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, first, unique_name, tmp_path, reader=reader)
    path.write_text(path.read_text().replace(f"topics: [{first}]", f"topics: [{first}, {second}]"))
    config = load_pipeline(path)
    lines: list[str] = []
    runner = PipelineRunner.open(config, spark, out=lines.append,
                                 member_factory=lambda c, l: group_member_factory(c, l, metadata_max_age_ms=1000))
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: table_reached(config.sink.path, config.name, log_end_offsets(produced)), 180,
                   "the table to reach every produced offset")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(first, 4)])[first].result(timeout=30)
        produced |= produce(bootstrap, first, json_events(300, start=200))
        wait_until(lambda: TopicPartition(first, 3) in runner.owned.partitions, 120, f"{first}-3 to be assigned")
        wait_until(lambda: table_reached(config.sink.path, config.name, log_end_offsets(produced)), 180,
                   "the table to reach every produced offset")
    finally:
        stop.set()
        thread.join(120)
    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)) and set(rows) == produced
    assert {p for t, p, _ in rows if t == first} == {0, 1, 2, 3}
    assert any("lag 0" in line for line in lines)
    if reader == "scg-kafka":  # the added partitions joined the running query
        assert sum("query started over reader" in line for line in lines) == 1, lines


def test_topic_pattern_picks_up_a_new_matching_topic(bootstrap, spark, tmp_path, unique_name):
    first, later, unrelated = f"{unique_name}-a", f"{unique_name}-b", f"{unique_name}x-c"
    create_topic(bootstrap, first, 2)
    create_topic(bootstrap, unrelated, 1)
    produced = produce(bootstrap, first, json_events(100))
    produce(bootstrap, unrelated, json_events(10))
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, first, unique_name, tmp_path)
    text = path.read_text().replace(f"topics: [{first}]", f'topic_pattern: "{unique_name}-.*"')
    path.write_text(text.replace("  heartbeat_interval: 500ms\n", "  heartbeat_interval: 500ms\n  metadata_max_age: 1s\n"))
    config = load_pipeline(path)
    assert config.group.metadata_max_age_ms == 1000
    runner = PipelineRunner.open(config, spark, out=lambda line: None)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: table_reached(config.sink.path, config.name, log_end_offsets(produced)), 180,
                   "the table to reach every produced offset")
        create_topic(bootstrap, later, 2)
        produced |= produce(bootstrap, later, json_events(100, start=100))
        wait_until(lambda: table_reached(config.sink.path, config.name, log_end_offsets(produced)), 180,
                   "the table to reach every produced offset")
        assert runner.member.topics == resolve_topics(config) == (first, later)
    finally:
        stop.set()
        thread.join(120)
    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)) and set(rows) == produced  # nothing from the unrelated topic
