"""Small-batch benchmark (not a test): how long a steady micro-batch of a few hundred records over
12 partitions takes with the ``scg-kafka`` reader, its ranges grouped into one Spark task per core
(the default, ``assigned_offsets.task_groups``) against one task per Kafka partition (what Spark's
Kafka source does, here by telling Spark the application has 64 cores:
``spark.default.parallelism: 64``). Small batches are what a member runs at a steady low rate and
what a partition's new owner runs first after a rebalance.

Each rep is a new topic (12 partitions) fed by a SteadyProducer (``--rate`` records/s) and one
`scg run` member on ``local[1]``, reader ``scg-kafka``, trigger 500 ms; the variants alternate in
the same run against one local broker. Per rep, after the first ``--skip`` batches (JVM warm-up):
the median batch duration the member reports (Spark job, Delta commits, Kafka commit), the median
records per batch, and the Parquet files the output table holds per batch.

    .venv/bin/python bench/bench_small_batches.py [--reps 2] [--batches 60] [--skip 20] [--rate 200]

Writes bench/results/small_batches.json and bench/results/small_batches.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from git_commit import short_commit  # noqa: E402
from pipelines.local.local_kafka import LocalKafka  # noqa: E402
from tests.e2e.harness import MemberProcess, SteadyProducer, wait_until  # noqa: E402
from tests.support.kafka_data import create_topic, write_pipeline  # noqa: E402

PARTITIONS = 12
BATCH = re.compile(r"\] batch \d+: (\d+) records .* in ([\d.]+)s ")
# variant -> extra Spark settings of the member
VARIANTS = {"one task per core": {}, "one task per partition": {"spark.default.parallelism": "64"}}
MEMBER_TIMEOUT_S = 600


def say(text: str, began: float) -> None:
    print(f"[{(time.monotonic() - began) / 60:5.1f} min] {text}", flush=True)


def one_member(bootstrap: str, base: Path, label: str, spark_conf: dict, args) -> dict:
    work = base / label
    work.mkdir(parents=True)
    create_topic(bootstrap, label, PARTITIONS)
    spark = {"spark.master": "local[1]", **spark_conf}
    path = write_pipeline(work / "pipeline.yaml", bootstrap, label, label, work,
                          extra='format: {type: json, schema: "id BIGINT, name STRING"}\n'
                                f"spark: {json.dumps(spark)}\n", reader="scg-kafka", warm_up_limit=None)
    producer = SteadyProducer(bootstrap, label, rate_per_s=args.rate).start()
    member = MemberProcess(label, path, work)
    try:
        wait_until(lambda: member.count(BATCH.pattern) >= args.batches, MEMBER_TIMEOUT_S,
                   f"{label}: {args.batches} batches")
    finally:
        member.stop()
        producer.stop()
    batches = [(int(m.group(1)), float(m.group(2))) for line in member.lines for m in [BATCH.search(line)] if m]
    steady = batches[args.skip:]
    files = sum(1 for _ in Path(work / "table").rglob("*.parquet"))
    return {"batches": len(batches), "batch_s_median": statistics.median(s for _, s in steady),
            "records_median": statistics.median(n for n, _ in steady),
            "files_per_batch": files / len(batches)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--batches", type=int, default=60, help="batches per member")
    parser.add_argument("--skip", type=int, default=20, help="first batches left out (JVM warm-up)")
    parser.add_argument("--rate", type=int, default=200, help="records/s produced")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    began = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="scg-bench-small-"))
    results: dict = {"partitions": PARTITIONS, "rate": args.rate, "batches": args.batches, "skip": args.skip,
                     "reps": args.reps, "cpu_count": os.cpu_count(), "load_average_start": os.getloadavg(),
                     "commit": short_commit(), "runs": []}
    kafka = LocalKafka(base / "kafka")
    bootstrap = kafka.start().bootstrap_servers
    try:
        for rep in range(args.reps):
            for n, (variant, conf) in enumerate(VARIANTS.items()):
                say(f"rep {rep}: {variant} ...", began)
                run = one_member(bootstrap, base, f"small-r{rep}-v{n}", conf, args)
                results["runs"].append({"variant": variant, "rep": rep, **run})
                say(f"rep {rep}: {variant}: batch {run['batch_s_median']:.2f}s median over "
                    f"{run['records_median']:.0f} records, {run['files_per_batch']:.1f} files per batch", began)
    finally:
        kafka.stop()
    results["wall_s"] = time.monotonic() - began
    _save(results, Path(args.out))


def _medians(results: dict) -> dict[str, dict[str, float]]:
    return {variant: {key: statistics.median(r[key] for r in results["runs"] if r["variant"] == variant)
                      for key in ("batch_s_median", "records_median", "files_per_batch")}
            for variant in VARIANTS}


def markdown(results: dict) -> str:
    medians = _medians(results)
    grouped, per_partition = (medians[v] for v in VARIANTS)
    rows = [("steady batch, median (s)", "batch_s_median", "{:.2f}"),
            ("records per batch, median", "records_median", "{:.0f}"),
            ("output files per batch", "files_per_batch", "{:.1f}")]
    lines = ["# Small batches: scg-kafka's tasks per core vs one task per Kafka partition", "",
             f"{results['partitions']} partitions, SteadyProducer at {results['rate']} records/s, one `scg run` member "
             f"on `local[1]` (reader scg-kafka, trigger 500 ms) per variant and rep, {results['reps']} reps alternating, "
             f"medians over batches {results['skip']}–{results['batches']} of each member; {results['cpu_count']} CPUs "
             f"(load average {results['load_average_start'][0]:.1f} at the start), wall {results['wall_s'] / 60:.1f} min, "
             f"commit {results['commit']}. One task per partition is what Spark's Kafka source runs; here it is "
             "obtained with `spark.default.parallelism: 64`. A shorter batch covers fewer records: the next "
             "trigger comes sooner (every 500 ms when batches are shorter than that).", "",
             "| | one task per core (default) | one task per partition | per core / per partition |",
             "|---|---:|---:|---:|"]
    for title, key, fmt in rows:
        lines.append(f"| {title} | {fmt.format(grouped[key])} | {fmt.format(per_partition[key])} | "
                     f"{grouped[key] / per_partition[key]:.2f} |")
    return "\n".join(lines) + "\n"


def _save(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "small_batches.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "small_batches.md").write_text(markdown(results))
    print(markdown(results))



if __name__ == "__main__":
    main()
