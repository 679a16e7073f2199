"""Exactly once in every table of a pipeline that routes one topic to three Delta tables
(``sink.tables``, ``route: all``), across members SIGKILLed between two tables' commits
(docs/DESIGN.md invariant 6): `scg run` members of one group read the topic while records are
produced; in each round a member with a test hook is held right after the commit of a table
chosen by the seed (the tables after it not committed, nor the group's offsets), then SIGKILLed;
the other member takes its partitions over while a new member boots and joins for the next
round. At the end
every table holds exactly the produced records its route takes (no row twice), and the
dead-letter table exactly those no route takes, read through delta-spark. The seed is printed
with any failure; ``SCG_TEST_SEED`` replays one."""
from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from pipelines.config import load_pipeline
from tests.e2e.harness import MemberProcess, SteadyProducer
from tests.support.kafka_data import create_topic, log_end_offsets, table_reached
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e
PARTITIONS = 6
ROUNDS = 1          # each CI run kills at a seed-chosen table; test_routed_tables.py covers each in-process
ROUTES = ("id % 3 = 0", "id % 3 = 1", "id % 5 = 2")  # overlapping: route all lands a record in each


def _pipeline(tmp_path: Path, bootstrap: str, topic: str) -> Path:
    tables = "".join(f"""\
    - name: t{i}
      path: {tmp_path / f't{i}'}
      route: {{where: "{route}"}}
""" for i, route in enumerate(ROUTES))
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""\
name: routed-{topic}
kafka: {{bootstrap_servers: "{bootstrap}"}}
topics: [{topic}]
group: {{id: {topic}, session_timeout: 6s, heartbeat_interval: 500ms}}
source: {{starting_offsets: earliest, warm_up_limit: 0s}}
format: {{type: json, schema: "id BIGINT, name STRING"}}
sink:
  dead_letter_path: {tmp_path / 'dead'}
  route: all
  tables:
{tables}trigger: {{processing_time: 500ms}}
checkpoint_root: {tmp_path / 'checkpoints'}
""")
    return path


def _held_member(number: int, path: Path, tmp_path: Path, hold: Path) -> MemberProcess:
    """Member ``a<number>``, held after the commit of the table the file ``hold`` names."""
    return MemberProcess(f"a{number}", path, tmp_path, command=["-m", "tests.support.member_with_hooks", str(path),
                                                                 "--hold-after-table", str(hold)])


def _all_owned_once(members) -> bool:
    owned = [tp for m in members for tp in m.owned()]
    return len(owned) == PARTITIONS and len(set(owned)) == PARTITIONS


def _takes(route: str, record_id: int) -> bool:
    modulus, rest = {"id % 3 = 0": (3, 0), "id % 3 = 1": (3, 1), "id % 5 = 2": (5, 2)}[route]
    return record_id % modulus == rest


def test_every_table_is_exact_when_members_die_between_two_tables_commits(bootstrap, spark, tmp_path,
                                                                          unique_name):
    seed = int(os.environ.get("SCG_TEST_SEED") or time.time_ns() % 100_000)
    rng = random.Random(seed)
    create_topic(bootstrap, unique_name, PARTITIONS)
    path = _pipeline(tmp_path, bootstrap, unique_name)
    config = load_pipeline(path)
    hold = tmp_path / "hold"
    producer = SteadyProducer(bootstrap, unique_name).start()
    b = MemberProcess("b", path, tmp_path)
    a = _held_member(0, path, tmp_path, hold)
    held_after = []
    for round_ in range(ROUNDS):
        wait_until(lambda: _all_owned_once([a, b]) and a.count(r"batch \d+"), 240,
                   lambda: f"seed {seed}: {a.name} and b writing\n{a.tail()}\n{b.tail()}")
        table = config.sink.tables[rng.randrange(len(ROUTES) - 1)]  # a later table is left uncommitted
        held_after.append(table.name)
        hold.write_text(table.path)
        wait_until(lambda: Path(f"{hold}.waiting").exists(), 60,
                   f"seed {seed}: a batch of {a.name} held after the commit of {table.name}")
        seen = len(b.lines)
        a.kill()
        hold.unlink()
        Path(f"{hold}.waiting").unlink()
        if round_ + 1 < ROUNDS:  # the next one boots while b waits out a's session and takes over
            a = _held_member(round_ + 1, path, tmp_path, hold)
        else:
            taken = b.wait_for(rf"assigned {PARTITIONS} partition", 120, after=seen)
            b.wait_for(r"batch \d+", 120, after=b.lines.index(taken) + 1)

    acked = producer.stop()
    ends = log_end_offsets(acked)
    for table in config.sink.tables:
        wait_until(lambda: table_reached(table.path, config.name, ends), 180,
                   lambda: f"seed {seed} (held after {held_after}): {table.name} to hold every record\n{b.tail()}")
    b.stop()

    ids = [producer.acked_ids[c] for c in acked]
    for route, table in zip(ROUTES, config.sink.tables):
        rows = [r.id for r in spark.read.format("delta").load(table.path).select("id").collect()]
        assert len(rows) == len(set(rows)), f"seed {seed} (held after {held_after}): a row twice in {table.name}"
        assert set(rows) == {i for i in ids if _takes(route, i)}, f"seed {seed}: {table.name} is not exact"
    dead = spark.read.format("delta").load(config.sink.dead_letter_path).select("offset", "partition", "reason")
    reasons = [(r.partition, r.offset, r.reason) for r in dead.collect()]
    assert len(reasons) == len({(p, o) for p, o, _ in reasons}), f"seed {seed}: a dead letter twice"
    unrouted = {c for c in acked if not any(_takes(route, producer.acked_ids[c]) for route in ROUTES)}
    assert {(unique_name, p, o) for p, o, _ in reasons} == unrouted and {r for *_, r in reasons} == {"unrouted"}
