"""Shared fixtures: a real Kafka broker and a real Spark session, started on demand.

Both are session-scoped and started only by tests that ask for them, so ``pytest tests/unit``
starts neither. Every test that needs its own topics creates them with unique names.

Which tests are fast (``pytest --fast``, ``bin/test --fast``): those that start no JVM (no Kafka
broker, no Spark, no s3proxy). Every test that uses a fixture starting one (``JVM_FIXTURES``) is
marked ``integration`` here, and so is every test in tests/integration (tests/e2e: ``e2e``) unless
its module is marked ``delta_only``; a test that starts a JVM some other way carries the marker
itself. With ``--fast`` those marked ``integration`` or ``e2e`` are deselected, and a fast test
that leaves a JVM running fails.
"""
from __future__ import annotations

import gc
import os
import uuid
from pathlib import Path

import pytest

from pipelines.local.local_kafka import LocalKafka

HERE = Path(__file__).resolve().parent
# Every JVM the tests start (brokers, Spark drivers and their executors, the object store, the
# registry) compiles with C1 only: these JVMs live for seconds to minutes on little data, and C2's
# compilations cost about a quarter of the suite's CPU. What the tests check does not depend on it; the
# benchmarks (bench/) never set it. A JAVA_TOOL_OPTIONS of the caller's is kept as it is.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")
# fixtures that start a JVM (here and in tests/integration/conftest.py), directly or through another
JVM_FIXTURES = frozenset({"kafka_cluster", "bootstrap", "spark", "secure_kafka", "s3", "schema_registry"})
# (folder, marker of its tests, their per-test timeout in seconds). The timeouts replace the suite's
# default (setup.cfg, ``[tool:pytest] timeout``) unless a test sets its own: in tests/integration a
# Kafka broker and a Spark session start inside the first test that asks for them, and spark-submit
# and `scg run` subprocesses may take 600 s; in tests/e2e the demo subprocess alone is allowed
# 600 s and every member process starts its own Spark. A hang fails with the test's name instead
# of running CI out of time.
SLOW_DIRS = ((HERE / "integration", "integration", 900), (HERE / "e2e", "e2e", 1200))
SLOW_MARKERS = ("integration", "e2e")


def pytest_addoption(parser):
    parser.addoption("--fast", action="store_true",
                     help="only the tests that start no JVM (no Kafka broker, no Spark): the unit tests and "
                          "the Delta-only tests; a fast test that leaves a JVM running fails")


@pytest.hookimpl(tryfirst=True)  # before -m selects by these markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        if JVM_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.integration)
        for folder, marker, timeout_s in SLOW_DIRS:
            if item.path.resolve().is_relative_to(folder):
                if not item.get_closest_marker("delta_only"):
                    item.add_marker(marker)
                if item.get_closest_marker("timeout") is None:
                    item.add_marker(pytest.mark.timeout(timeout_s))
    if config.getoption("fast"):
        slow = {item for item in items if any(item.get_closest_marker(m) for m in SLOW_MARKERS)}
        if slow:
            config.hook.pytest_deselected(items=[item for item in items if item in slow])
            items[:] = [item for item in items if item not in slow]


def _java_processes() -> set[int]:
    """Ids of the java processes among this process's descendants (Linux /proc)."""
    found: set[int] = set()
    pending = [os.getpid()]
    while pending:
        pid = pending.pop()
        try:
            children = [int(c) for task in os.listdir(f"/proc/{pid}/task")
                        for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:  # ended meanwhile
            continue
        for child in children:
            try:
                if Path(f"/proc/{child}/comm").read_text().strip() == "java":
                    found.add(child)
            except OSError:
                continue
            pending.append(child)
    return found


@pytest.fixture(autouse=True)
def _fast_tests_start_no_jvm(request):
    """With ``--fast``: a test that leaves a JVM running it did not find fails (mark it ``integration``)."""
    if not request.config.getoption("fast"):
        yield
        return
    before = _java_processes()
    yield
    started = _java_processes() - before
    if started:
        pytest.fail(f"this fast test started a JVM (pid {sorted(started)}): mark it integration", pytrace=False)


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


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory):
    """One Confluent-compatible schema registry for the session (Apicurio Registry on loopback,
    ``pipelines/local/schema_registry.py``): BACKWARD compatibility, ``.url`` its Confluent API."""
    from pipelines.local.schema_registry import SchemaRegistry

    server = SchemaRegistry(tmp_path_factory.mktemp("schema-registry")).start()
    yield server
    server.stop()
