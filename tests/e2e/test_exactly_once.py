"""Exactly once across crashes at chosen points and stale writers: members are separate `scg run`
processes in one consumer group; the check reads the Delta table through delta-spark
(docs/DESIGN.md invariants 1, 3, 4, 5). Members joining, leaving and being SIGKILLed mid-stream are
covered by tests/e2e/test_cooperative_handoff.py and tests/e2e/test_chaos.py."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from pipelines.config import load_pipeline
from tests.e2e.harness import MemberProcess, SteadyProducer
from groupmgr.core import TopicPartition
from groupmgr.describe import describe_group
from sinks.txn_table import read_recorded_offsets
from tests.support.kafka_data import (create_topic, delta_coordinates, log_end_offsets, table_reached,
                                      write_pipeline)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e
PARTITIONS = 12


@pytest.fixture
def pipeline(bootstrap, tmp_path, unique_name):
    create_topic(bootstrap, unique_name, PARTITIONS)
    path = write_pipeline(tmp_path / "pipeline.yaml", bootstrap, unique_name, unique_name, tmp_path)
    return path, load_pipeline(path)


def _assert_exact(spark, config, producer: SteadyProducer, members, timeout_s=180):
    acked = producer.stop()
    ends = log_end_offsets(acked)
    wait_until(lambda: table_reached(config.sink.path, config.name, ends), timeout_s,
               lambda: _short_of(config, ends, members))
    for member in members:
        member.stop()
    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)), "duplicate (topic, partition, offset) rows"
    assert set(rows) == acked, f"missing {len(acked - set(rows))}, extra {len(set(rows) - acked)}"


def _short_of(config, ends, members) -> str:
    """What a wait for the whole log in the table reports: the partitions short of their ends, and
    each member's latest lines."""
    recorded = read_recorded_offsets(config.sink.path, config.name, ends)
    short = {f"{tp.partition}": f"{recorded.get(tp)}/{end}" for tp, end in sorted(ends.items())
             if (recorded.get(tp) or 0) < end}
    tails = "\n".join(f"--- {m.name}:\n{m.tail(15)}" for m in members)
    return f"the table to hold every produced record (short: {short})\n{tails}"


def _all_owned_once(members) -> bool:
    owned = [tp for m in members for tp in m.owned()]
    return len(owned) == PARTITIONS and len(set(owned)) == PARTITIONS


def test_stale_writer_is_refused_and_rejoins(bootstrap, spark, pipeline, tmp_path):
    path, config = pipeline
    hold = tmp_path / "hold"
    producer = SteadyProducer(bootstrap, config.topics[0]).start()
    a = MemberProcess("a", path, tmp_path, command=["-m", "tests.support.member_with_hooks", str(path),
                                                    "--hold", str(hold)])
    b = MemberProcess("b", path, tmp_path)
    wait_until(lambda: _all_owned_once([a, b]) and a.count(r"batch \d+"), 240, "a and b writing")
    hold.touch()
    wait_until(lambda: Path(str(hold) + ".waiting").exists(), 60, "a batch of a in flight")
    a.signal(signal.SIGSTOP)  # a stalls mid-batch, past its session timeout
    b_seen = len(b.lines)
    taken_over = b.wait_for(rf"assigned {PARTITIONS} partition", 120, after=b_seen)
    # b claimed every partition and wrote a batch AFTER taking over (not one from before it)
    b.wait_for(r"batch \d+", 120, after=b.lines.index(taken_over) + 1)
    seen = len(a.lines)
    hold.unlink()
    a.signal(signal.SIGCONT)
    a.wait_for(r"refused by the table, nothing written", 60, after=seen)
    a.wait_for(r"generation \d+: assigned [1-9]", 120, after=seen)
    wait_until(lambda: _all_owned_once([a, b]), 120, "a rejoined and shares the partitions again")
    _assert_exact(spark, config, producer, [a, b])


def test_crash_between_delta_commit_and_kafka_commit(bootstrap, spark, pipeline, tmp_path):
    """SIGKILL after a batch is in Delta but before its offsets reach Kafka: the next owner starts
    from the table (not the stale group offset), nothing is written twice, and once it commits
    again the group's offsets equal the table's."""
    path, config = pipeline
    producer = SteadyProducer(bootstrap, config.topics[0]).start()
    a = _member_held_at("--hold-after-delta", path, tmp_path, "a batch committed to Delta, not yet to Kafka")
    partitions = [TopicPartition(config.topics[0], p) for p in range(PARTITIONS)]
    table = read_recorded_offsets(config.sink.path, config.name, partitions)
    committed = _group_offsets(bootstrap, config.group.id)
    assert any((table[tp] or 0) > committed.get(tp, 0) for tp in partitions), \
        "the held batch should be in the table but not in the group's offsets"
    a.kill()
    b = MemberProcess("b", path, tmp_path)
    wait_until(lambda: _all_owned_once([b]) and b.count(r"batch \d+"), 240, "b owning and writing")
    assert b.count(r"\(kafka\)") == 0, "b must start from the table's offsets, not the group's"
    acked = producer.stop()
    ends = log_end_offsets(acked)
    wait_until(lambda: table_reached(config.sink.path, config.name, ends), 180, "every record in the table")
    recorded = read_recorded_offsets(config.sink.path, config.name, ends)
    wait_until(lambda: all(_group_offsets(bootstrap, config.group.id).get(tp) == recorded[tp] for tp in ends),
               60, "the group's committed offsets to equal the table's")
    b.stop()
    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)), "duplicate (topic, partition, offset) rows"
    assert set(rows) == acked


def _member_held_at(flag: str, path: Path, tmp_path: Path, what: str) -> MemberProcess:
    """Member "a" with a test hook (``flag`` of tests/support/member_with_hooks.py), once it owns
    every partition and writes, held inside its next batch at that hook point."""
    hold = tmp_path / flag.lstrip("-")
    member = MemberProcess("a", path, tmp_path, command=["-m", "tests.support.member_with_hooks", str(path),
                                                         flag, str(hold)])
    wait_until(lambda: _all_owned_once([member]) and member.count(r"batch \d+"), 240, "a writing")
    hold.touch()
    wait_until(lambda: Path(f"{hold}.waiting").exists(), 60, what)
    return member


def _group_offsets(bootstrap, group_id):
    description = describe_group(bootstrap, group_id)
    return {TopicPartition(p.topic, p.partition): p.committed for p in description.partitions
            if p.committed is not None}


def test_driver_killed_between_files_written_and_commit(bootstrap, spark, pipeline, tmp_path):
    """SIGKILL after the executors wrote a batch's files and before the driver committed them: the
    files stay unreferenced (reported by describe), the next owner replays the batch, and the table
    is exact."""
    import json
    import subprocess

    from pipelines.runtime.install_paths import PROJECT_ROOT

    path, config = pipeline
    producer = SteadyProducer(bootstrap, config.topics[0]).start()
    a = _member_held_at("--hold-after-files", path, tmp_path, "a batch's files written, not committed")
    a.kill()
    b = MemberProcess("b", path, tmp_path)
    wait_until(lambda: _all_owned_once([b]) and b.count(r"batch \d+"), 240, "b owning and writing")
    _assert_exact(spark, config, producer, [b])
    described = subprocess.run([str(PROJECT_ROOT / "bin" / "scg"), "describe", "--pipeline", str(path), "--json"],
                               capture_output=True, text=True, timeout=300)
    assert described.returncode == 0, described.stderr
    orphans = json.loads(described.stdout)["unreferenced_files"]
    assert sum(found["count"] for found in orphans.values() if found) >= 1
