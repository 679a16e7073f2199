"""The local Kafka launcher against real Apache Kafka processes."""
from __future__ import annotations

import os
import socket
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pipelines.local.local_kafka import (BrokerStartError, JavaNotFoundError, LocalKafka,
                                   PortInUseError, free_port)

pytestmark = pytest.mark.integration


def _roundtrip(bootstrap: str, replication: int = 1) -> list[bytes]:
    topic = f"roundtrip-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, replication)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce(topic, value=f"m{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    try:
        for _ in range(300):  # bounded: at most 300 polls of 0.2 s
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
            if len(seen) == 30:
                break
    finally:
        consumer.close()
    return seen


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_roundtrip_stop_leaves_nothing(tmp_path):
    cluster = LocalKafka(tmp_path)
    state = cluster.start()
    try:
        assert len(state.nodes) == 1
        assert sorted(_roundtrip(state.bootstrap_servers)) == sorted(f"m{i}".encode() for i in range(30))
        assert cluster.status().alive_nodes()
    finally:
        assert cluster.stop() == 1
    assert not any(_alive(n.pid) for n in state.nodes)
    assert cluster.status() is None


def test_three_brokers_form_one_replicated_cluster(tmp_path):
    cluster = LocalKafka(tmp_path)
    state = cluster.start(brokers=3)
    try:
        metadata = AdminClient({"bootstrap.servers": state.bootstrap_servers}).list_topics(timeout=10)
        assert sorted(metadata.brokers) == [1, 2, 3]
        assert len(_roundtrip(state.bootstrap_servers, replication=3)) == 30
    finally:
        assert cluster.stop() == 3
    assert not any(_alive(n.pid) for n in state.nodes)


def test_port_in_use_is_named_and_starts_nothing(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PortInUseError) as err:
            LocalKafka(tmp_path).start(port=port)
    assert err.value.port == port and "--port" in str(err.value)
    assert LocalKafka(tmp_path).status() is None


def test_broker_that_does_not_come_up_is_reported_and_cleaned(tmp_path, monkeypatch):
    monkeypatch.setenv("SCG_KAFKA_HEAP", "1k")  # the JVM refuses to start with this heap
    cluster = LocalKafka(tmp_path)
    with pytest.raises(BrokerStartError) as err:
        cluster.start(port=free_port(), timeout_s=30)
    assert err.value.condition == "BROKER_DID_NOT_START"
    assert cluster.status() is None


def test_missing_java_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="Java 17"):
        LocalKafka(tmp_path).start()
