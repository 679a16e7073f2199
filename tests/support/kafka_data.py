"""Topic creation, producing and table read-back helpers for integration tests."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from deltalake import DeltaTable

from groupmgr.core import TopicPartition
from sinks.txn_table import read_recorded_offsets


def create_topic(bootstrap: str, topic: str, partitions: int, replication: int = 1,
                 client: Mapping[str, str] | None = None) -> None:
    """Create ``topic``; ``client``: more confluent-kafka settings (e.g. a secured admin's)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    try:
        admin.create_topics([NewTopic(topic, partitions, replication)])[topic].result(timeout=30)
    finally:
        admin = None  # the last reference: destroyed now, never after the session's broker stops


def produce(bootstrap: str, topic: str, records,
            client: Mapping[str, str] | None = None) -> set[tuple[str, int, int]]:
    """Produce (key, value) pairs (bytes/str/None); return the set of (topic, partition, offset).
    ``client``: more confluent-kafka settings (e.g. a secured producer's)."""
    produced: set[tuple[str, int, int]] = set()

    def on_delivery(err, msg):
        if err is None:
            produced.add((msg.topic(), msg.partition(), msg.offset()))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.max.bytes": 4_000_000, **(client or {})})
    try:
        for key, value in records:
            producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
            producer.poll(0)
        remaining = producer.flush(60)
    finally:
        producer = None  # the last reference: destroyed now, never after the session's broker stops
    assert remaining == 0
    return produced


def json_events(n: int, start: int = 0):
    return [(f"k{i % 17}", json.dumps({"id": i, "name": f"n{i}"})) for i in range(start, start + n)]


def write_pipeline(path: Path, bootstrap: str, topic: str, group: str, table_dir: Path,
                   extra: str = "", reader: str | None = None, warm_up_limit: str | None = "5s") -> Path:
    """A minimal JSON pipeline file for tests; ``reader``: its ``source.reader`` (None: the
    default, scg-kafka); ``warm_up_limit``: how long a scg-kafka member joining a group that others
    read rehearses (5 s: the suite's time; None: the default), never written for spark-kafka."""
    path.write_text(textwrap.dedent(f"""\
        name: test-{group}
        kafka:
          bootstrap_servers: {bootstrap}
        topics: [{topic}]
        group:
          id: {group}
          session_timeout: 6s
          heartbeat_interval: 500ms
        source:
          starting_offsets: earliest{f"{chr(10)}          reader: {reader}" if reader else ""}{
              f"{chr(10)}          warm_up_limit: {warm_up_limit}" if warm_up_limit and reader != "spark-kafka" else ""}
        sink:
          path: {table_dir / 'table'}
          dead_letter_path: {table_dir / 'dead'}
        trigger:
          processing_time: 500ms
        checkpoint_root: {table_dir / 'checkpoints'}
        """) + (extra or 'format: {type: json, schema: "id BIGINT, name STRING"}\n'))
    return path


def delta_coordinates(spark, path) -> list[tuple[str, int, int]]:
    """All (topic, partition, offset) rows of a Delta table, read through delta-spark."""
    rows = spark.read.format("delta").load(str(path)).select("topic", "partition", "offset").collect()
    return [(r.topic, r.partition, r.offset) for r in rows]


def log_end_offsets(produced) -> dict[TopicPartition, int]:
    """Per partition, the next offset after the highest produced (topic, partition, offset)."""
    ends: dict[TopicPartition, int] = {}
    for topic, partition, offset in produced:
        tp = TopicPartition(topic, partition)
        ends[tp] = max(ends.get(tp, 0), offset + 1)
    return ends


def table_reached(table_path: str, app_id: str, ends: dict[TopicPartition, int]) -> bool:
    """True once the table records every partition at or past ``ends`` (False before it exists)."""
    recorded = read_recorded_offsets(table_path, app_id, ends)
    return bool(recorded) and all((recorded[tp] or 0) >= end for tp, end in ends.items())


def table_ids(table_path) -> set[int]:
    """The ``id`` column of a Delta table, read with deltalake (empty before the table exists)."""
    try:
        return set(DeltaTable(str(table_path)).to_pyarrow_table(columns=["id"])["id"].to_pylist())
    except Exception:  # noqa: BLE001 - not created yet
        return set()


def partition_statuses(pipeline_path) -> list[str]:
    """The STATUS of each partition of the pipeline's group, as ``scg describe --pipeline --json``
    shows it."""
    from pipelines.runtime.install_paths import PROJECT_ROOT

    described = subprocess.run([sys.executable, "-m", "pipelines.cli", "describe", "--pipeline", str(pipeline_path),
                                "--json"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    return [p["status"] for p in json.loads(described.stdout)["partitions"]]
