"""Benchmark: assignor cost over a (partitions x members) grid, ours vs kafka-python's.

Measures, on the same inputs in the same run:

* ours: ``range``, ``roundrobin``, ``sticky`` cold (no owned partitions),
  ``sticky`` warm (every member rejoins owning its cold result), ``sticky``
  join (the group had one member fewer; everyone rejoins owning that result
  and one new member arrives, the rebalance that moves partitions), plus the
  cost of :func:`validate_assignment` on the range result (what the leader adds);
* kafka-python 3.x ``RangePartitionAssignor`` / ``RoundRobinPartitionAssignor``
  (``kafka.coordinator.assignors.*``) through a minimal ClusterMetadata stand-in.

Shape: dynamic members only, all subscribed to every topic (the case where
kafka-python's assignors are correct, see tests/unit/test_assignor_properties.py);
1 topic below 100 partitions, else 10 topics sharing the partitions evenly.
Combos with more members than partitions are skipped. Each cell is the median
of several repeats (fewer for big cases). Range results are checked equal to
kafka-python's before timing.

Writes bench/results/assignors.json and bench/results/assignors.md.
Run: ``python bench/bench_assignors.py [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections import namedtuple
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from groupmgr.assignors import Subscription, TopicPartition  # noqa: E402
from groupmgr.assignors.range import range_assign  # noqa: E402
from groupmgr.assignors.roundrobin import roundrobin_assign  # noqa: E402
from groupmgr.assignors.sticky import sticky_assign  # noqa: E402
from groupmgr.assignors.validate import validate_assignment  # noqa: E402

PARTITIONS = (10, 100, 1_000, 10_000, 100_000)
MEMBERS = (1, 10, 100, 1_000)
RESULTS = ROOT / "bench" / "results"

KpMember = namedtuple("KpMember", "member_id group_instance_id metadata")
KpSubscription = namedtuple("KpSubscription", "topics")


class KpCluster:
    """Minimal stand-in for kafka-python's ClusterMetadata: the one method its assignors call."""

    def __init__(self, counts: dict[str, int]) -> None:
        self._partitions = {t: set(range(n)) for t, n in counts.items()}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._partitions.get(topic)


def make_inputs(partitions: int, members: int) -> dict[str, Any]:
    """Topic counts, our subscriptions and kafka-python's member list for one grid cell."""
    n_topics = 1 if partitions < 100 else 10
    counts = {f"topic-{t:02d}": partitions // n_topics for t in range(n_topics)}
    topics = tuple(counts)
    ids = [f"consumer-{i:05d}" for i in range(members)]
    return {
        "counts": counts,
        "subs": {m: Subscription(topics) for m in ids},
        "kp_members": [KpMember(m, None, KpSubscription(list(topics))) for m in ids],
        "kp_cluster": KpCluster(counts),
    }


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs.

    Like ``timeit``, the cyclic garbage collector is off while ``fn`` runs (and
    run in between): otherwise a full collection of the benchmark's own large
    heap lands at random inside the timed allocations of whichever contender
    allocates more objects.
    """
    samples = []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return statistics.median(samples)


def repeats_for(partitions: int, members: int) -> int:
    size = partitions * max(1, members // 100)
    return 51 if size <= 10_000 else 11 if size <= 100_000 else 5


def kafka_python_classes() -> tuple[Any, Any]:
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    return RangePartitionAssignor, RoundRobinPartitionAssignor


def check_same_as_kafka_python(inputs: dict[str, Any], kp_range: Any) -> None:
    """Our range result must equal kafka-python's on this (dynamic-only, equal) input."""
    ours = range_assign(inputs["counts"], inputs["subs"])
    theirs = kp_range.assign(inputs["kp_cluster"], inputs["kp_members"])
    theirs_flat = {m: sorted(TopicPartition(tp.topic, tp.partition) for tp in a.partitions())
                   for m, a in theirs.items()}
    if ours != theirs_flat:
        raise SystemExit("range result differs from kafka-python's on a dynamic-only group")


def measure_cell(partitions: int, members: int, kp_range: Any, kp_roundrobin: Any) -> dict[str, Any]:
    """Median milliseconds of every contender on one grid cell."""
    inputs = make_inputs(partitions, members)
    counts, subs = inputs["counts"], inputs["subs"]
    check_same_as_kafka_python(inputs, kp_range)
    cold = sticky_assign(counts, subs)
    warm_subs = {m: Subscription(s.topics, owned_partitions=cold[m], generation_id=1) for m, s in subs.items()}
    newcomer = max(subs)
    before = sticky_assign(counts, {m: s for m, s in subs.items() if m != newcomer})
    join_subs = {m: Subscription(s.topics, owned_partitions=before.get(m, ()), generation_id=1)
                 for m, s in subs.items()}
    ranged = range_assign(counts, subs)
    repeats = repeats_for(partitions, members)
    contenders: dict[str, Callable[[], Any]] = {
        "range": lambda: range_assign(counts, subs),
        "kafka_python_range": lambda: kp_range.assign(inputs["kp_cluster"], inputs["kp_members"]),
        "roundrobin": lambda: roundrobin_assign(counts, subs),
        "kafka_python_roundrobin": lambda: kp_roundrobin.assign(inputs["kp_cluster"], inputs["kp_members"]),
        "sticky_cold": lambda: sticky_assign(counts, subs),
        "sticky_warm": lambda: sticky_assign(counts, warm_subs),
        "sticky_join": lambda: sticky_assign(counts, join_subs),
        "validate": lambda: validate_assignment("range", counts, subs, ranged),
    }
    ms = {name: round(median_seconds(fn, repeats) * 1000, 3) for name, fn in contenders.items()}
    ratio = {
        "range": round(ms["range"] / ms["kafka_python_range"], 3),
        "roundrobin": round(ms["roundrobin"] / ms["kafka_python_roundrobin"], 3),
    }
    return {"partitions": partitions, "members": members, "topics": len(counts), "repeats": repeats,
            "median_ms": ms, "ratio_ours_over_kafka_python": ratio}


def metadata(started: float) -> dict[str, Any]:
    import kafka
    return {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "kafka_python": kafka.__version__,
        "shape": "dynamic members, all subscribed to all topics; 1 topic if P < 100 else 10 topics",
        "statistic": "median wall time per assign() call, milliseconds, cyclic GC off while timing (as timeit)",
        "total_seconds": round(time.perf_counter() - started, 1),
    }


def markdown(report: dict[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        "# Assignor benchmark",
        "",
        f"Median ms per `assign()` call; {meta['shape']}. Python {meta['python']}, kafka-python "
        f"{meta['kafka_python']}, {meta['cpus']} CPUs, generated {meta['generated_at']} "
        f"by `bench/bench_assignors.py` in {meta['total_seconds']} s.",
        "ratio = ours / kafka-python (below 1: ours is faster). validate = `validate_assignment` on the range result.",
        "sticky cold: nobody owns anything; warm: everyone rejoins owning its partitions; "
        "join: one new member joins a settled group.",
        "Cyclic GC is off while a call is timed (as in `timeit`).",
        "",
        "| partitions | members | range | kafka-python range | ratio | roundrobin | kafka-python roundrobin | ratio "
        "| sticky cold | sticky warm | sticky join | validate |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["results"]:
        ms, ratio = row["median_ms"], row["ratio_ours_over_kafka_python"]
        lines.append(
            f"| {row['partitions']:,} | {row['members']:,} | {ms['range']:.3f} | {ms['kafka_python_range']:.3f} "
            f"| {ratio['range']:.2f} | {ms['roundrobin']:.3f} | {ms['kafka_python_roundrobin']:.3f} "
            f"| {ratio['roundrobin']:.2f} | {ms['sticky_cold']:.3f} | {ms['sticky_warm']:.3f} "
            f"| {ms['sticky_join']:.3f} | {ms['validate']:.3f} |")
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any]) -> None:
    """Write JSON and markdown atomically (via .tmp files, which .gitignore ignores)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name, text in (("assignors.json", json.dumps(report, indent=2) + "\n"), ("assignors.md", markdown(report))):
        tmp = RESULTS / f"{name}.tmp"
        tmp.write_text(text)
        tmp.replace(RESULTS / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only up to 1,000 partitions and 100 members")
    args = parser.parse_args(argv)
    kp_range, kp_roundrobin = kafka_python_classes()
    started = time.perf_counter()
    grid = [(p, m) for p in PARTITIONS for m in MEMBERS if m <= p]
    if args.quick:
        grid = [(p, m) for p, m in grid if p <= 1_000 and m <= 100]
    results = []
    for partitions, members in grid:
        row = measure_cell(partitions, members, kp_range, kp_roundrobin)
        print(f"{partitions:>7,} x {members:>5,}: " + ", ".join(f"{k}={v}" for k, v in row["median_ms"].items()),
              flush=True)
        results.append(row)
    report = {"meta": metadata(started), "results": results}
    write_report(report)
    print(f"wrote {RESULTS / 'assignors.json'} and {RESULTS / 'assignors.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
