"""Shared fixtures: a real Kafka broker and a real Spark session, started on demand.

Both are session-scoped and started only by tests that ask for them, so ``pytest tests/unit``
starts neither. Every test that needs its own topics creates them with unique names.
"""
from __future__ import annotations

import gc
import uuid

import pytest

from pipelines.local.local_kafka import LocalKafka


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory):
    """One real Kafka 4.x broker (KRaft) on a free loopback port; stopped after the session."""
    cluster = LocalKafka(tmp_path_factory.mktemp("kafka"))
    state = cluster.start(brokers=1)
    yield state
    gc.collect()  # Kafka clients held only by reference cycles close now, not after the broker is gone
    cluster.stop()


@pytest.fixture(scope="session")
def bootstrap(kafka_cluster) -> str:
    return kafka_cluster.bootstrap_servers


@pytest.fixture
def unique_name(request) -> str:
    """A topic / group name unique to this test run."""
    stem = request.node.name.replace("[", "-").replace("]", "")[:40]
    return f"{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark():
    """A local SparkSession with Delta and the Kafka source, shared by the whole test session."""
    from pipelines.runtime.spark_session import get_or_create_spark

    session = get_or_create_spark("scg-tests", {"spark.master": "local[2]"})
    yield session
    session.stop()
