"""Checkpoint benchmark (not a test): what Spark spends writing a streaming query's checkpoint
files on the local file system, with its default checkpoint file manager (Hadoop's FileContext)
and with the one a member sets for a local checkpoint root (Hadoop's FileSystem API,
``spark_session.local_checkpoint_manager``). Every micro-batch writes two files: ``offsets/N``
before it runs (``walCommit`` in Spark's progress) and ``commits/N`` after (``commitOffsets``).

One Spark session (``local[1]``), one query at a time over Spark's rate source (10 rows/s, trigger
300 ms, a foreachBatch that does nothing), rounds alternating the two managers in the same run;
the first batches of each round are left out. Without Hadoop's native library (pip's pyspark has
none) the default manager starts a ``readlink`` and a ``chmod`` process per file.

    .venv/bin/python bench/bench_checkpoint.py [--rounds 3] [--seconds 20]

Writes bench/results/checkpoint.json and bench/results/checkpoint.md.
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

from git_commit import short_commit  # noqa: E402
from pipelines.runtime.hadoop_fs import HadoopFileSystem  # noqa: E402
from pipelines.runtime.spark_session import (CHECKPOINT_MANAGER_SETTING, get_or_create_spark,  # noqa: E402
                                             use_local_checkpoint_manager)

SKIP = 5  # first batches of each round left out
PHASES = ("walCommit", "commitOffsets", "triggerExecution")


def run_round(spark, checkpoint: Path, seconds: float) -> list[dict]:
    """The progress durations (ms) of one query's batches after the first :data:`SKIP`."""
    query = (spark.readStream.format("rate").option("rowsPerSecond", 10).load().writeStream
             .foreachBatch(lambda df, batch_id: None).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="300 milliseconds").start())
    time.sleep(seconds)
    progress = [p["durationMs"] for p in query.recentProgress]
    query.stop()
    return progress[SKIP:]


def summary(rows: list[dict]) -> dict:
    out = {"batches": len(rows)}
    for phase in PHASES:
        values = sorted(r.get(phase, 0) for r in rows)
        out[phase] = {"median": statistics.median(values), "p90": values[int(0.9 * (len(values) - 1))],
                      "max": values[-1]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each manager, alternating")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of one round")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="scg-bench-checkpoint-"))
    spark = get_or_create_spark("scg-bench-checkpoint", {"spark.master": "local[1]"})
    results: dict = {"rounds": args.rounds, "seconds": args.seconds, "cpu_count": os.cpu_count(),
                     "load_average_start": os.getloadavg(), "commit": short_commit()}
    collected: dict[str, list[dict]] = {"default (FileContext)": [], "member's (FileSystem)": []}
    for n in range(args.rounds):
        for way, rows in collected.items():
            spark.conf.unset(CHECKPOINT_MANAGER_SETTING)
            if way.startswith("member"):
                results["manager"] = use_local_checkpoint_manager(spark, str(work), HadoopFileSystem(spark).qualify)
            rows.extend(run_round(spark, work / f"{n}-{len(rows)}-{way[:6]}", args.seconds))
            print(f"round {n + 1}/{args.rounds} {way}: {len(rows)} batches so far", flush=True)
    spark.stop()
    results["ways"] = {way: summary(rows) for way, rows in collected.items()}
    default, member = results["ways"].values()
    results["member_over_default"] = {phase: member[phase]["median"] / default[phase]["median"]
                                      for phase in PHASES if default[phase]["median"]}
    results["wall_s"] = time.monotonic() - began
    results["load_average_end"] = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "checkpoint.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "checkpoint.md").write_text(markdown(results))
    print(markdown(results))


def markdown(results: dict) -> str:
    lines = ["# Checkpoint files on the local disk: Spark's default manager vs the member's", "",
             f"One query at a time over Spark's rate source (10 rows/s, trigger 300 ms, foreachBatch doing nothing), "
             f"`local[1]`, {results['rounds']} rounds of {results['seconds']:.0f} s per manager, alternating; the first "
             f"{SKIP} batches of each round left out. {results['cpu_count']} CPUs (load average "
             f"{results['load_average_start'][0]:.1f} at the start, {results['load_average_end'][0]:.1f} at the end), "
             f"wall {results['wall_s']:.0f} s, commit {results['commit']}. The member's manager: "
             f"`{results.get('manager')}`. Each batch writes `offsets/N` (walCommit) and `commits/N` (commitOffsets); "
             "triggerExecution is the whole trigger.", "",
             "| manager | batches | walCommit median / p90 / max (ms) | commitOffsets median / p90 / max (ms) "
             "| triggerExecution median / p90 / max (ms) |", "|---|---:|---:|---:|---:|"]
    for way, row in results["ways"].items():
        cells = [" / ".join(f"{row[p][k]:g}" for k in ("median", "p90", "max")) for p in PHASES]
        lines.append(f"| {way} | {row['batches']} | " + " | ".join(cells) + " |")
    ratios = ", ".join(f"{phase} {ratio:.2f}" for phase, ratio in results["member_over_default"].items())
    lines += ["", f"Member's / default, medians: {ratios}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
