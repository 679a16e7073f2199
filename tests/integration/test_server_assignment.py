"""A group taken over by the broker's consumer protocol (KIP-848) is named:
a confluent-kafka consumer with ``group.protocol=consumer`` joins a pipeline's group on a real
Kafka 4 broker; the member says GROUP_RUN_BY_BROKER in its progress lines and ``scg describe``
does too; exactly-once holds (delta-spark); with ``group.on_server_assignment: fail`` the member
stops with that condition instead."""
from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest
from confluent_kafka import Consumer

from pipelines.config import load_pipeline
from pipelines.runtime.install_paths import PROJECT_ROOT
from tests.e2e.harness import MemberProcess
from tests.support.kafka_data import (create_topic, delta_coordinates, json_events, log_end_offsets, produce,
                                      table_reached, write_pipeline)
from tests.support.member_group import stop_all
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
PARTITIONS = 4
SCG = str(PROJECT_ROOT / "bin" / "scg")


class ConsumerProtocolMember:
    """A confluent-kafka consumer speaking the consumer protocol in the group, polling on a thread
    (it reads, never commits) until closed."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                   "group.protocol": "consumer", "enable.auto.commit": False,
                                   "log_level": 0})
        self._consumer.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._consumer.poll(0.2)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()  # leaves the group: the broker converts it back to a classic group


def _pipeline(tmp_path, bootstrap, name, policy):
    return write_pipeline(tmp_path / "pipeline.yaml", bootstrap, name, name, tmp_path).read_text().replace(
        "  heartbeat_interval: 500ms\n", f"  heartbeat_interval: 500ms\n  on_server_assignment: {policy}\n")


def test_a_consumer_protocol_member_is_named_and_exactly_once_holds(bootstrap, spark, tmp_path, unique_name):
    create_topic(bootstrap, unique_name, PARTITIONS)
    path = tmp_path / "pipeline.yaml"
    path.write_text(_pipeline(tmp_path, bootstrap, unique_name, "warn"))
    config = load_pipeline(path)
    produced = produce(bootstrap, unique_name, json_events(200))
    member = MemberProcess("a", path, tmp_path)
    try:
        member.wait_for(rf"batch \d+: [1-9]", 600)
        foreign = ConsumerProtocolMember(bootstrap, unique_name, unique_name)
        try:
            member.wait_for(r"\[GROUP_RUN_BY_BROKER\]", 300)
            described = subprocess.run([SCG, "describe", "--pipeline", str(path), "--json"], capture_output=True,
                                       text=True, timeout=300, env=dict(os.environ))
        finally:
            foreign.close()
        after = len(member.lines)
        produced |= produce(bootstrap, unique_name, json_events(200, start=200))
        wait_until(lambda: member.proc.poll() is None and len(member.owned()) == PARTITIONS
                   and table_reached(config.sink.path, config.name, log_end_offsets(produced)), 600,
                   f"member a to own every partition again and write every record\n{member.tail()}")
        member.wait_for(r"is a classic group again", 60, after=after)  # the broker handed the group back
    finally:
        codes = stop_all([member])
    assert codes == [0], member.tail()
    assert described.returncode == 0, described.stderr
    group = json.loads(described.stdout)["group"]
    assert group["group_type"] == "CONSUMER"
    assert [c["condition"] for c in group["conditions"]] == ["GROUP_RUN_BY_BROKER"]
    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)) and set(rows) == produced


def test_on_server_assignment_fail_stops_the_member_with_the_condition(bootstrap, tmp_path, unique_name):
    create_topic(bootstrap, unique_name, PARTITIONS)
    path = tmp_path / "pipeline.yaml"
    path.write_text(_pipeline(tmp_path, bootstrap, unique_name, "fail"))
    member = MemberProcess("a", path, tmp_path)
    try:
        member.wait_for(r"assigned", 600)
        foreign = ConsumerProtocolMember(bootstrap, unique_name, unique_name)
        try:
            member.proc.wait(300)
        finally:
            foreign.close()
    finally:
        if member.proc.poll() is None:
            member.kill()
    assert member.proc.returncode == 1, member.tail()
    assert any("[GROUP_RUN_BY_BROKER]" in line for line in member.lines), member.tail()
