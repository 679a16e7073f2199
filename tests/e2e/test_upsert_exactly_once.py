"""Exactly once in an upsert table (``sink.mode: upsert``) across a member killed or fenced in the
middle of a batch: `scg run` members of one group read a topic while keyed records and tombstones
are produced; a member with a test hook is held in a batch, and the seed chooses what happens to
it: SIGKILLed before the batch's Delta commit, SIGKILLed after it and before the group's offset
commit, or stalled (SIGSTOP) past its session while the other member takes its partitions over
and writes, then let go: its merge is refused by the table (fenced) and it rejoins. At the end
the table, read through delta-spark, equals row for row what a plain-Python model gives by
applying the acknowledged records in offset order per partition: the last record of each key,
and no row for a key whose last record is a tombstone. The seed is printed with any failure;
``SCG_TEST_SEED`` replays one."""
from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from pipelines.config import load_pipeline
from tests.e2e.harness import MemberProcess, SteadyProducer, record_key
from tests.support.kafka_data import create_topic, log_end_offsets, table_reached
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e
PARTITIONS = 4
TOMBSTONE_EVERY = 7
KILLED_BEFORE, KILLED_AFTER, FENCED = "killed before its commit", "killed after its commit", "stalled and fenced"
HOLD_FLAG = {KILLED_BEFORE: "--hold", KILLED_AFTER: "--hold-after-delta", FENCED: "--hold"}


def _pipeline(tmp_path: Path, bootstrap: str, topic: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""\
name: upsert-{topic}
kafka: {{bootstrap_servers: "{bootstrap}"}}
topics: [{topic}]
group: {{id: {topic}, session_timeout: 6s, heartbeat_interval: 500ms}}
source: {{starting_offsets: earliest, warm_up_limit: 0s}}
format: {{type: json, schema: "id BIGINT, name STRING"}}
sink:
  path: {tmp_path / 'table'}
  mode: upsert
  key: [key]
  delete_on_tombstone: true
trigger: {{processing_time: 500ms}}
checkpoint_root: {tmp_path / 'checkpoints'}
""")
    return path


def _model(producer: SteadyProducer, acked) -> dict[str, tuple[int, int, int]]:
    """Each key's row after the acknowledged records in offset order: (id, partition, offset)."""
    rows: dict[str, tuple[int, int, int]] = {}
    for topic, partition, offset in sorted(acked, key=lambda c: (c[1], c[2])):
        record_id = producer.acked_ids[(topic, partition, offset)]
        if producer.tombstone(record_id):
            rows.pop(record_key(record_id), None)
        else:
            rows[record_key(record_id)] = (record_id, partition, offset)
    return rows


def test_an_upsert_table_is_exact_when_a_member_dies_in_the_middle_of_a_batch(bootstrap, spark, tmp_path,
                                                                              unique_name):
    seed = int(os.environ.get("SCG_TEST_SEED") or time.time_ns() % 100_000)
    fault = random.Random(seed).choice(sorted(HOLD_FLAG))
    create_topic(bootstrap, unique_name, PARTITIONS)
    path = _pipeline(tmp_path, bootstrap, unique_name)
    config = load_pipeline(path)
    hold = tmp_path / "hold"
    producer = SteadyProducer(bootstrap, unique_name, tombstone_every=TOMBSTONE_EVERY).start()
    b = MemberProcess("b", path, tmp_path)
    a = MemberProcess("a", path, tmp_path, command=["-m", "tests.support.member_with_hooks", str(path),
                                                     HOLD_FLAG[fault], str(hold)])
    wait_until(lambda: len({tp for m in (a, b) for tp in m.owned()}) == PARTITIONS and a.count(r"batch \d+"), 240,
               lambda: f"seed {seed}: a and b writing\n{a.tail()}\n{b.tail()}")
    hold.touch()
    wait_until(lambda: Path(f"{hold}.waiting").exists(), 60, f"seed {seed}: a batch of a held ({fault})")
    seen = len(b.lines)
    if fault == FENCED:
        a.signal(signal.SIGSTOP)  # past its session timeout: b takes every partition over
    else:
        a.kill()
    taken = b.wait_for(rf"assigned {PARTITIONS} partition", 120, after=seen)
    b.wait_for(r"batch \d+", 120, after=b.lines.index(taken) + 1)
    members = [b]
    if fault == FENCED:
        seen = len(a.lines)
        hold.unlink()
        a.signal(signal.SIGCONT)
        a.wait_for(r"refused by the table, nothing written", 60, after=seen)
        a.wait_for(r"generation \d+: assigned", 120, after=seen)
        members.append(a)
    else:
        hold.unlink()

    acked = producer.stop()
    ends = log_end_offsets(acked)
    wait_until(lambda: table_reached(config.sink.path, config.name, ends), 180,
               lambda: f"seed {seed} ({fault}): the table to hold every record\n{b.tail()}")
    for member in members:
        member.stop()

    rows = spark.read.format("delta").load(config.sink.path).select("key", "id", "name", "partition", "offset")
    table = [(r.key, r.id, r.name, r.partition, r.offset) for r in rows.collect()]
    assert len(table) == len({key for key, *_ in table}), f"seed {seed} ({fault}): two rows of one key"
    expected = _model(producer, acked)
    assert {key: (i, p, o) for key, i, _, p, o in table} == expected, f"seed {seed} ({fault}): not exact"
    assert all(name == f"n{i}" for _, i, name, *_ in table)
    dead = spark.read.format("delta").load(config.sink.dead_letter_path).count()
    assert dead == 0, f"seed {seed}: {dead} dead letters"
