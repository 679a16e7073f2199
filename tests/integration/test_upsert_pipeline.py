"""`scg run` of an upsert pipeline over Debezium change events (``sink.mode: upsert``,
``format.envelope: debezium``) with a real broker: the table holds each key's last row, deletes
(``op: d``) and tombstones remove keys, a change without a key is a dead letter, the progress
lines say what the merges did, and `scg describe` shows the table with no lag. Read back through
delta-spark and compared with a plain-Python model that applies the events in offset order
(several batches over a growing table: tests/e2e/test_upsert_exactly_once.py)."""
from __future__ import annotations

import json
import random
import re

import pytest

from pipelines.config import load_pipeline
from tests.integration.test_cli import scg
from tests.support.kafka_data import create_topic, produce

pytestmark = pytest.mark.integration
KEYS = 40


def _pipeline(tmp_path, bootstrap, topic: str):
    path = tmp_path / "upsert.yaml"
    path.write_text(f"""\
name: customers
kafka: {{bootstrap_servers: "{bootstrap}"}}
topics: [{topic}]
group: {{id: {topic}-group, session_timeout: 6s, heartbeat_interval: 500ms}}
source: {{starting_offsets: earliest}}
format:
  type: json
  envelope: debezium
  schema: >-
    before STRUCT<id: BIGINT, name: STRING, visits: INT>, after STRUCT<id: BIGINT, name: STRING, visits: INT>,
    op STRING, source STRUCT<lsn: BIGINT>
sink:
  path: {tmp_path / 'customers'}
  mode: upsert
  key: [id]
  order_by: source.lsn
  delete_on_tombstone: true
trigger: {{available_now: true}}
checkpoint_root: {tmp_path / 'checkpoints'}
""")
    return path


class Changes:
    """Debezium-shaped change events over KEYS keys, keyed by id (a key's events on one partition,
    in order), and the rows a plain-Python reader expects after them."""

    def __init__(self, seed: int):
        self.rng, self.lsn = random.Random(seed), 0
        self.rows: dict[int, tuple[str, int]] = {}

    def events(self, n: int) -> list[tuple[str, str | None]]:
        out = []
        for _ in range(n):
            key, self.lsn = self.rng.randrange(KEYS), self.lsn + 1
            kafka_key = json.dumps({"payload": {"id": key}})
            before = {"id": key, "name": self.rows[key][0], "visits": self.rows[key][1]} if key in self.rows else None
            roll = self.rng.random()
            if before is not None and roll < 0.15:
                out.append((kafka_key, json.dumps({"before": before, "after": None, "op": "d",
                                                   "source": {"lsn": self.lsn}})))
                del self.rows[key]
            elif before is not None and roll < 0.25:
                out.append((kafka_key, None))  # a tombstone
                del self.rows[key]
            else:
                after = {"id": key, "name": f"c{key}-{self.lsn}", "visits": self.lsn}
                out.append((kafka_key, json.dumps({"before": before, "after": after, "op": "u" if before else "c",
                                                   "source": {"lsn": self.lsn}})))
                self.rows[key] = (after["name"], after["visits"])
        return out


def _table(spark, path) -> dict[int, tuple[str, int]]:
    rows = spark.read.format("delta").load(str(path)).collect()
    assert len(rows) == len({r.id for r in rows}), "two rows of one key"
    return {r.id: (r.name, r.visits) for r in rows}


def test_an_upsert_pipeline_holds_each_keys_last_row(bootstrap, spark, tmp_path, unique_name):
    create_topic(bootstrap, unique_name, 3)
    path = _pipeline(tmp_path, bootstrap, unique_name)
    changes = Changes(seed=len(unique_name))
    no_image = json.dumps({"before": None, "after": None, "op": "t", "source": {"lsn": 0}})
    produce(bootstrap, unique_name, changes.events(300) + [("{}", no_image)])
    run = scg("run", path, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert _table(spark, tmp_path / "customers") == changes.rows
    dead = [r.reason for r in spark.read.format("delta").load(str(tmp_path / "customers_dead_letters")).collect()]
    assert dead == ["missing_key"]
    assert re.search(r"; merged \d+ inserted, \d+ updated, \d+ deleted", run.stdout + run.stderr)

    described = scg("describe", "--pipeline", path, "--json")
    assert described.returncode == 0, described.stderr
    shown = json.loads(described.stdout)
    assert shown["tables"] == [load_pipeline(path).sink.path]
    assert all(row["lag"] == 0 for row in shown["partitions"]), shown["partitions"]
