"""`scg run` of a pipeline that routes two topics to three Delta tables (``sink.tables``), with a
real broker: each record lands in the tables its route takes, or in the dead-letter table as
``unrouted`` / ``ambiguous_route``; every table records its own offsets; `scg describe` shows
where the pipeline goes on from, and `scg offsets reset` moves every table. Read back through
delta-spark (members killed between two tables' commits: tests/e2e/test_routed_exactly_once.py)."""
from __future__ import annotations

import json

import pytest

from groupmgr.core import TopicPartition
from pipelines.config import load_pipeline
from sinks.txn_table import read_recorded_offsets
from tests.integration.test_cli import scg
from tests.support.kafka_data import create_topic, produce

pytestmark = pytest.mark.integration


def _pipeline(tmp_path, bootstrap, orders: str, events: str):
    path = tmp_path / "routed.yaml"
    path.write_text(f"""\
name: routed
kafka: {{bootstrap_servers: "{bootstrap}"}}
topics: [{orders}, {events}]
group: {{id: {orders}-group, session_timeout: 6s, heartbeat_interval: 500ms}}
source: {{starting_offsets: earliest}}
format: {{type: json, schema: "id BIGINT, kind STRING, total DOUBLE"}}
sink:
  dead_letter_path: {tmp_path / 'dead'}
  tables:
    - name: orders
      path: {tmp_path / 'orders'}
      partition_by: [kind]
      route: {{topics: [{orders}]}}
    - name: refunds
      path: {tmp_path / 'refunds'}
      route: {{field: kind, values: [refund]}}
    - name: big
      path: {tmp_path / 'big'}
      transform: SELECT topic, partition, offset, id, total * 100 AS cents FROM input
      route: {{where: "kind = 'payment' AND total > 100"}}
trigger: {{available_now: true}}
checkpoint_root: {tmp_path / 'checkpoints'}
""")
    return path


def _records(first: int, n: int) -> list[tuple[str, dict]]:
    """(which topic, value) pairs: orders, refunds on both topics, small and big payments, others."""
    kinds = [("orders", {"kind": "order", "total": 5.0}), ("orders", {"kind": "refund", "total": 1.0}),
             ("events", {"kind": "refund", "total": 2.0}), ("events", {"kind": "payment", "total": 500.0}),
             ("events", {"kind": "payment", "total": 50.0}), ("events", {"kind": "note"})]
    return [(kinds[i % len(kinds)][0], {"id": i, **kinds[i % len(kinds)][1]}) for i in range(first, first + n)]


def _produce(bootstrap, topics, records) -> None:
    for which in ("orders", "events"):
        produce(bootstrap, topics[which], [(None, json.dumps(v)) for w, v in records if w == which])


def _ids(spark, path) -> list[int]:
    rows = spark.read.format("delta").load(str(path)).collect()
    coordinates = [(r.topic, r.partition, r.offset) for r in rows]
    assert len(coordinates) == len(set(coordinates)), f"duplicate rows in {path}"
    return sorted(r.id for r in rows)


def test_a_pipeline_routes_two_topics_to_three_tables_exactly_once(bootstrap, spark, tmp_path, unique_name):
    topics = {"orders": f"{unique_name}-orders", "events": f"{unique_name}-events"}
    for topic in topics.values():
        create_topic(bootstrap, topic, 2)
    path = _pipeline(tmp_path, bootstrap, topics["orders"], topics["events"])
    every = _records(0, 60)
    _produce(bootstrap, topics, every)
    run = scg("run", path, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "tables orders" in run.stdout + run.stderr

    assert _ids(spark, tmp_path / "orders") == [v["id"] for w, v in every if w == "orders" and v["kind"] != "refund"]
    assert _ids(spark, tmp_path / "refunds") == [v["id"] for w, v in every if w == "events" and v["kind"] == "refund"]
    big = spark.read.format("delta").load(str(tmp_path / "big")).collect()
    assert sorted((r.id, r.cents) for r in big) == [(v["id"], 50000.0) for w, v in every
                                                    if v.get("kind") == "payment" and v["total"] > 100]
    dead = {r.value and json.loads(r.value)["id"]: r.reason
            for r in spark.read.format("delta").load(str(tmp_path / "dead")).collect()}
    assert dead == {v["id"]: ("ambiguous_route" if w == "orders" else "unrouted") for w, v in every
                    if (w, v["kind"]) in (("orders", "refund"), ("events", "note"))
                    or (v["kind"] == "payment" and v["total"] <= 100)}

    config = load_pipeline(path)
    partitions = [TopicPartition(t, p) for t in topics.values() for p in range(2)]
    for table in config.sink.tables:
        recorded = read_recorded_offsets(table.path, config.name, partitions)
        assert all(offset is not None for offset in recorded.values()), (table.name, recorded)
    described = scg("describe", "--pipeline", path, "--json")
    assert described.returncode == 0, described.stderr
    shown = json.loads(described.stdout)
    assert shown["tables"] == [t.path for t in config.sink.tables]
    assert all(row["lag"] == 0 for row in shown["partitions"]), shown["partitions"]

    reset = scg("offsets", path, "reset", "--to", "earliest")  # no member runs: every table moves
    assert reset.returncode == 0, reset.stdout + reset.stderr
    for where in [t.path for t in config.sink.tables] + [config.sink.dead_letter_path]:
        assert set(read_recorded_offsets(where, config.name, partitions).values()) == {0}, where
    shown = json.loads(scg("offsets", path, "show", "--json").stdout)
    assert {"output", "output refunds", "output big", "dead_letters"} <= set(shown["tables"])
