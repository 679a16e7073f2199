"""Commit-path benchmark (not a test): one table's share of a micro-batch on the driver and in
this process, ``TxnDeltaTable.plan`` then ``commit_files`` (owner check, offsets decided, 120
records over 12 partitions written as one Parquet file, one CAS commit), on a local table and on
s3proxy (a real S3-compatible server on loopback). Two ways, alternating in the same run:

* ``reused``: ``commit_files(..., planned)`` starts from the snapshot ``plan`` read, brought up to
  date (the batch writer's way);
* ``fresh``: ``commit_files`` loads a new snapshot (its last checkpoint and the commits since).

    .venv/bin/python bench/bench_commit.py [--batches 80]

Writes bench/results/commit.json and bench/results/commit.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pyarrow as pa  # noqa: E402

from git_commit import short_commit  # noqa: E402
from groupmgr.core import OffsetRange, TopicPartition  # noqa: E402
from sinks.txn_table import TxnDeltaTable  # noqa: E402
from tests.support.s3_server import S3Server  # noqa: E402

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("v", pa.string())])
PARTITIONS = [TopicPartition("t", p) for p in range(12)]
RECORDS_PER_PARTITION = 10
SKIP = 6  # first batches of each way left out


def run_batches(table: TxnDeltaTable, batches: int) -> dict[str, list[float]]:
    """``batches`` plan + commit_files rounds, alternating reused / fresh; seconds per round."""
    epochs = table.claim(PARTITIONS)
    writer = table.file_writer()
    position = {tp: 0 for tp in PARTITIONS}
    seconds: dict[str, list[float]] = {"reused": [], "fresh": []}
    for i in range(batches):
        way = "reused" if i % 2 == 0 else "fresh"
        ranges = [OffsetRange(tp.topic, tp.partition, position[tp], position[tp] + RECORDS_PER_PARTITION)
                  for tp in PARTITIONS]
        rows = pa.table({"topic": [r.topic for r in ranges for _ in range(r.count)],
                         "partition": [r.partition for r in ranges for _ in range(r.count)],
                         "offset": [o for r in ranges for o in range(r.start, r.end)],
                         "v": ["x" * 100] * sum(r.count for r in ranges)}, schema=SCHEMA)
        started = time.perf_counter()
        planned = table.plan(ranges, epochs)
        table.commit_files(ranges, epochs, lambda plan: writer.write(rows.to_batches(), plan.keep_from),
                           planned if way == "reused" else None)
        seconds[way].append(time.perf_counter() - started)
        for tp in PARTITIONS:
            position[tp] += RECORDS_PER_PARTITION
    return seconds


def summary(seconds: dict[str, list[float]]) -> dict[str, float]:
    medians = {way: statistics.median(values[SKIP:]) for way, values in seconds.items()}
    return {**{f"{way}_ms": value * 1000 for way, value in medians.items()},
            "reused_over_fresh": medians["reused"] / medians["fresh"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=80)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="scg-bench-commit-"))
    results: dict = {"partitions": len(PARTITIONS), "records_per_batch": len(PARTITIONS) * RECORDS_PER_PARTITION,
                     "batches": args.batches, "cpu_count": os.cpu_count(), "load_average_start": os.getloadavg(),
                     "commit": short_commit(), "stores": {}}
    local = TxnDeltaTable(str(work / "local"), "bench", SCHEMA)
    results["stores"]["local disk"] = summary(run_batches(local, args.batches))
    with S3Server(work / "s3") as s3:
        bucket = s3.make_bucket("bench-commit")
        options = s3.delta_options()
        remote = TxnDeltaTable(f"s3://{bucket}/t", "bench", SCHEMA, storage_options=options)
        results["stores"]["s3proxy (loopback)"] = summary(run_batches(remote, args.batches))
    results["wall_s"] = time.monotonic() - began
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "commit.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "commit.md").write_text(markdown(results))
    print(markdown(results))


def markdown(results: dict) -> str:
    lines = ["# Commit path (one table's share of a micro-batch): plan's snapshot reused vs a fresh load", "",
             f"{results['partitions']} partitions, {results['records_per_batch']} records per batch, "
             f"{results['batches']} batches per store alternating the two ways, medians without the first "
             f"{SKIP} of each; {results['cpu_count']} CPUs (load average {results['load_average_start'][0]:.1f} "
             f"at the start), wall {results['wall_s']:.0f} s, commit {results['commit']}. Each round is "
             "`plan` then `commit_files` (Parquet file written in this process).", "",
             "| store | reused (ms) | fresh (ms) | reused / fresh |", "|---|---:|---:|---:|"]
    for store, row in results["stores"].items():
        lines.append(f"| {store} | {row['reused_ms']:.1f} | {row['fresh_ms']:.1f} | {row['reused_over_fresh']:.2f} |")
    return "\n".join(lines) + "\n"



if __name__ == "__main__":
    main()
