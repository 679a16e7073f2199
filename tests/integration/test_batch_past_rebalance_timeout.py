"""Liveness like Kafka's ``max.poll.interval.ms``: a member whose batch runs past
``group.rebalance_timeout`` leaves the group, its partitions move to the other member within
session + rebalance timeout, and it rejoins once its query has recovered; the table stays exact
(read through delta-spark). Member A is a ``scg run`` process whose batch is held by a test hook;
member B runs in this process."""
from __future__ import annotations

import sys
import threading
import time

import pytest

from pipelines.config import load_pipeline
from pipelines.runtime.runner import PipelineRunner
from tests.e2e.harness import MemberProcess
from tests.support.kafka_data import create_topic, json_events, produce, table_ids, write_pipeline
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
REBALANCE_TIMEOUT_S = 20  # above a cold member's first batch on a loaded 2-core machine
SESSION_TIMEOUT_S = 6


def test_a_batch_held_past_the_rebalance_timeout_hands_its_partitions_over(bootstrap, spark, tmp_path, unique_name):
    create_topic(bootstrap, unique_name, 2)
    produced = produce(bootstrap, unique_name, json_events(20))
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, unique_name, unique_name, tmp_path,
                          extra='format: {type: json, schema: "id BIGINT, name STRING"}\n'
                                'spark: {spark.master: "local[1]"}\n')
    path.write_text(path.read_text().replace("  heartbeat_interval: 500ms\n",
                                             f"  heartbeat_interval: 500ms\n  rebalance_timeout: {REBALANCE_TIMEOUT_S}s\n"))
    config = load_pipeline(path)
    hold = tmp_path / "hold"
    a = MemberProcess("a", path, tmp_path, command=["-m", "tests.support.member_with_hooks", str(path),
                                                     "--hold", str(hold)])
    lines: list[str] = []
    runner_b = PipelineRunner.open(config, spark, out=lines.append)
    stop_b = threading.Event()
    thread_b = threading.Thread(target=runner_b.run, args=(stop_b,), daemon=True)
    thread_b.start()
    try:
        wait_until(lambda: len(runner_b.owned.partitions) == 1 and len(a.owned()) == 1, 240, "the partitions shared")
        wait_until(lambda: table_ids(config.sink.path) >= set(range(20)), 240, "both members writing")
        hold.touch()  # a's next batch is held before its Delta commit, past the rebalance timeout
        produced |= produce(bootstrap, unique_name, json_events(20, start=20))
        wait_until(lambda: (tmp_path / "hold.waiting").exists(), 120, "member a's batch in flight")
        held_at = time.monotonic()
        a.wait_for(r"POLL_TIMEOUT_EXPIRED", REBALANCE_TIMEOUT_S + 60)
        wait_until(lambda: len(runner_b.owned.partitions) == 2, SESSION_TIMEOUT_S + REBALANCE_TIMEOUT_S + 30,
                   "member b owning both partitions")
        moved_after = time.monotonic() - held_at
        wait_until(lambda: table_ids(config.sink.path) >= set(range(40)), 120, "b writing a's partition")
        assert a.proc.poll() is None, a.tail(40)
        rejoin_from = len(a.lines)
        hold.unlink()  # a's batch ends (its commit is refused: b claimed the partition)
        a.wait_for(r"assigned 1 partition", 120, after=rejoin_from)
        wait_until(lambda: len(runner_b.owned.partitions) == 1, 60, "the partitions shared again")
        produced |= produce(bootstrap, unique_name, json_events(20, start=40))
        wait_until(lambda: table_ids(config.sink.path) >= set(range(60)), 120, "both members writing again")
    finally:
        stop_b.set()
        if thread_b.is_alive():
            thread_b.join(120)
        code = a.stop()
    assert code == 0, a.tail(40)
    rows = spark.read.format("delta").load(config.sink.path).select("topic", "partition", "offset").collect()
    coordinates = [(r.topic, r.partition, r.offset) for r in rows]
    assert len(coordinates) == len(set(coordinates)) and set(coordinates) == produced
    print(f"\npartitions moved {moved_after:.1f}s after a's batch was held "
          f"(session {SESSION_TIMEOUT_S}s + rebalance {REBALANCE_TIMEOUT_S}s)", file=sys.stderr)
