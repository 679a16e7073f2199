"""Benchmark: time from first join to a settled group, ours (GroupMember) vs confluent-kafka consumers.

For N in (1, 2, 4, 8) members, in the same run on the same broker, each implementation starts N
members of a fresh group at once (one topic, 16 partitions, ``range``, heartbeat interval 500 ms,
session timeout 10 s) and we measure until the group is settled:

* ours: every member STABLE in the same generation and the assignments cover every partition
  exactly once;
* confluent-kafka (librdkafka, classic protocol): every consumer got its ``on_assign`` callback,
  every assignment is non-empty and together they cover every partition exactly once.

Each cell is the median of ``--runs`` runs (fresh group each time); min and max are kept too.
Times are bimodal for both implementations: when the first JoinGroup completes before the others
arrive (the local broker runs with ``group.initial.rebalance.delay.ms=0``), the group needs a second
round that existing members only notice on their next heartbeat (up to one interval later).
Members are constructed before the clock starts (ours: before ``start()``; confluent-kafka: before
``subscribe()``), one untimed warm-up run of each comes first, and the members of a run are closed
(LeaveGroup) before the next one. A local 1-broker Kafka is started unless ``--bootstrap`` is given.

Writes bench/results/rebalance.json and bench/results/rebalance.md.
Run: ``python bench/bench_rebalance.py [--runs 21] [--bootstrap HOST:PORT]``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import confluent_kafka  # noqa: E402
import kafka  # noqa: E402
from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from groupmgr.generation import MemberState  # noqa: E402
from groupmgr.member import GroupMember, MemberConfig  # noqa: E402
from pipelines.local.local_kafka import LocalKafka  # noqa: E402

SIZES = (1, 2, 4, 8)
PARTITIONS = 16
HEARTBEAT_MS, SESSION_MS = 500, 10000
SETTLE_TIMEOUT_S = 60.0
RESULTS = ROOT / "bench" / "results"


class _Silent:
    def assigned(self, *args) -> None:
        return None

    on_revoked = on_assigned = on_fenced = assigned


def covers(assignments: list[set], total: int) -> bool:
    flat = [tp for parts in assignments for tp in parts]
    return len(flat) == total and len(set(flat)) == total and all(assignments)


def wait_for(predicate: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until ``predicate`` held (polled every 5 ms); raises TimeoutError after ``timeout_s``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"group did not settle within {timeout_s}s")
        time.sleep(0.005)
    return time.monotonic() - start


def run_ours(bootstrap: str, topic: str, n: int) -> float:
    group = f"bench-ours-{uuid.uuid4().hex[:8]}"
    config = MemberConfig(bootstrap_servers=bootstrap, group_id=group, topics=(topic,), assignors=("range",),
                          session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    members = [GroupMember(config, _Silent()) for _ in range(n)]
    start = time.monotonic()
    for member in members:
        member.start()

    def settled() -> bool:
        gens = {m.generation.generation_id for m in members}
        return (len(gens) == 1 and all(m.state is MemberState.STABLE for m in members)
                and covers([set(m.assignment) for m in members], PARTITIONS))

    try:
        wait_for(settled, SETTLE_TIMEOUT_S)
        return time.monotonic() - start
    finally:
        for member in members:
            member.close(timeout_s=10)


class _CKMember:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.assigned: set | None = None
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "partition.assignment.strategy": "range", "enable.auto.commit": False,
                                  "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
        self.topic = topic
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def begin(self) -> None:
        """Subscribe (this is when librdkafka starts joining) and poll on a thread."""
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.thread.start()

    def _on_assign(self, consumer, partitions) -> None:
        self.assigned = {(p.topic, p.partition) for p in partitions}

    def _on_revoke(self, consumer, partitions) -> None:
        self.assigned = set()

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.05)
        self.consumer.close()


def run_confluent(bootstrap: str, topic: str, n: int) -> float:
    group = f"bench-ck-{uuid.uuid4().hex[:8]}"
    members = [_CKMember(bootstrap, group, topic) for _ in range(n)]
    start = time.monotonic()
    for member in members:
        member.begin()
    try:
        wait_for(lambda: all(m.assigned is not None for m in members)
                 and covers([set(m.assigned) for m in members], PARTITIONS), SETTLE_TIMEOUT_S)
        return time.monotonic() - start
    finally:
        for member in members:
            member.stop.set()
        for member in members:
            member.thread.join(20)


def measure(bootstrap: str, topic: str, runs: int) -> list[dict]:
    run_ours(bootstrap, topic, 1)  # warm-up, not timed: creates __consumer_offsets, loads modules
    run_confluent(bootstrap, topic, 1)
    rows = []
    for n in SIZES:
        ours = [run_ours(bootstrap, topic, n) for _ in range(runs)]
        theirs = [run_confluent(bootstrap, topic, n) for _ in range(runs)]
        row = {"members": n, "ours_s": ours, "confluent_s": theirs,
               "ours_median_s": statistics.median(ours), "confluent_median_s": statistics.median(theirs)}
        print(f"{n} members: ours {row['ours_median_s']:.3f}s  confluent {row['confluent_median_s']:.3f}s",
              flush=True)
        rows.append(row)
    return rows


def write(rows: list[dict], runs: int, elapsed_s: float) -> None:
    meta = {"generated": datetime.now(timezone.utc).isoformat(timespec="seconds"), "runs": runs,
            "partitions": PARTITIONS, "heartbeat_interval_ms": HEARTBEAT_MS, "session_timeout_ms": SESSION_MS,
            "python": platform.python_version(), "kafka_python": kafka.__version__,
            "confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0],
            "cpus": os.cpu_count(), "elapsed_s": round(elapsed_s, 1)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "rebalance.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = ["# Rebalance benchmark", "",
             f"Seconds from starting N members of a fresh group to a settled group (median of {runs} runs); "
             f"1 topic x {PARTITIONS} partitions, range, heartbeat {HEARTBEAT_MS} ms, session {SESSION_MS} ms, "
             f"one local Kafka 4.x broker. Python {meta['python']}, kafka-python {meta['kafka_python']} (wire "
             f"layer of ours), confluent-kafka {meta['confluent_kafka']} / librdkafka {meta['librdkafka']}, "
             f"{meta['cpus']} CPUs, generated {meta['generated']} by `bench/bench_rebalance.py` in "
             f"{meta['elapsed_s']} s.", "",
             "Bimodal: runs where the first join completed alone need one more round, noticed at the next "
             "heartbeat (<= 0.5 s later); see the module docstring.", "",
             "| members | ours median (s) | confluent-kafka median (s) | ours/confluent | ours min-max (s) "
             "| confluent min-max (s) |", "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['members']} | {r['ours_median_s']:.3f} | {r['confluent_median_s']:.3f} | "
                     f"{r['ours_median_s'] / r['confluent_median_s']:.2f} | "
                     f"{min(r['ours_s']):.2f}-{max(r['ours_s']):.2f} | "
                     f"{min(r['confluent_s']):.2f}-{max(r['confluent_s']):.2f} |")
    (RESULTS / "rebalance.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local one")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="scg-bench-") as tmp:
        cluster = None if args.bootstrap else LocalKafka(Path(tmp))
        bootstrap = args.bootstrap or cluster.start(brokers=1).bootstrap_servers
        try:
            topic = f"bench-rebalance-{uuid.uuid4().hex[:6]}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
            rows = measure(bootstrap, topic, args.runs)
        finally:
            if cluster is not None:
                cluster.stop()
    write(rows, args.runs, time.monotonic() - started)
    print((RESULTS / "rebalance.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
