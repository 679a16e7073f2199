"""Ingest throughput of the two readers into the same sink (not a test). One broker, the
same records for every variant, interleaved repetitions in one Spark driver on ``local[2]``
(bench/e2e_case.py, a fresh subprocess):

* ``noop``       — Spark's Kafka source + the same JSON parsing into the noop sink (read ceiling);
* ``scg``        — this project with ``source.reader: spark-kafka`` (Spark's Kafka source), the
                   default: PipelineRunner, real group member, exactly-once Delta commits;
* ``scg_follow`` — the same pipeline with ``source.reader: scg-kafka`` (the assignment-following
                   Python source: confluent-kafka on the executors, Arrow batches into Spark).

Both scg variants read from the earliest offset until every record is in the table
(``max_offsets_per_trigger`` as in bench_e2e). Reported per dataset: median records/s and the
ratio scg_follow / scg (target ≥ 1.0: the reader that follows the assignment must not cost
throughput) and each against noop.

Writes bench/results/reader.json and bench/results/reader.md.

    .venv/bin/python bench/bench_reader.py [--reps 2] [--scale 1.0]
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_e2e import DATASETS, MAX_OFFSETS, PARTITIONS, produce_records, run_case, run_spec, say  # noqa: E402
from bench_handoff import _commit  # noqa: E402

from pipelines.local.local_kafka import LocalKafka  # noqa: E402
from tests.support.kafka_data import create_topic  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
VARIANTS = ("noop", "scg", "scg_follow")
WARMUP = ("reader-warmup", 50_000, 200)


def throughput(bootstrap: str, base: Path, reps: int) -> dict:
    runs = []
    for rep in range(reps):
        order = VARIANTS[rep % 3:] + VARIANTS[:rep % 3]  # rotate so no variant always runs first
        for dataset in DATASETS:
            runs += [run_spec(v, dataset, f"{dataset}-{v}-r{rep}", rep=rep) for v in order]
    topic, records, vb = WARMUP
    warmup = [run_spec(v, "", f"warmup-{v}", topic=topic, records=records, value_bytes=vb) for v in VARIANTS]
    spec = {"master": "local[2]", "settings": {}, "bootstrap": bootstrap, "warmup": warmup, "runs": runs}
    return run_case("reader", base, spec)


def summary(local: dict) -> dict:
    """Per dataset and variant: records/s over the whole run (from ``runner.run`` to the last
    batch: warm-up, join and claim included; the spark-kafka member warms up through a query of its
    own and starts its query after the claim, the scg-kafka member warms up in its own query,
    started before it joins),
    after the claim (from the "starting query" / "reading from the next batch" line), and within
    the batches (over the sum of the micro-batches' durations: read, parse, write, commit; the
    planning between them left out); medians and the scg-kafka / spark-kafka ratios of each."""
    out: dict = {}
    for run in local.get("runs", []):
        dataset = run["label"].split("-", 1)[0]
        noop = run["variant"] == "noop"
        after = run["records_per_s"] if noop else run["records"] / (run["seconds"] - run["join_and_claim_s"])
        within = run["records_per_s"] if noop else run["records"] / sum(run["batch_s"])
        out.setdefault(dataset, {}).setdefault(run["variant"], []).append((run["records_per_s"], after, within))
    table = {}
    for dataset, variants in out.items():
        med = {v: statistics.median(r[0] for r in rs) for v, rs in variants.items() if rs}
        after = {v: statistics.median(r[1] for r in rs) for v, rs in variants.items() if rs}
        within = {v: statistics.median(r[2] for r in rs) for v, rs in variants.items() if rs}

        def ratio(values, a, b):
            return values[a] / values[b] if {a, b} <= set(values) else None
        table[dataset] = {"records_per_s": variants, "median": med, "median_after_claim": after,
                          "median_within_batches": within,
                          "follow_vs_scg": ratio(med, "scg_follow", "scg"),
                          "follow_vs_scg_after_claim": ratio(after, "scg_follow", "scg"),
                          "follow_vs_scg_within_batches": ratio(within, "scg_follow", "scg"),
                          "follow_vs_noop": ratio(med, "scg_follow", "noop"),
                          "scg_vs_noop": ratio(med, "scg", "noop")}
    return table


def markdown(results: dict) -> str:
    out = ["# Reader throughput: scg-kafka vs Spark's Kafka source, same sink, same run", "",
           f"local[2], {results['partitions']} partitions, max_offsets_per_trigger {results['max_offsets_per_trigger']:,}, "
           f"{results['reps']} interleaved repetitions (median), {results['cpu_count']} CPUs "
           f"(load average {results['load_average_start'][0]:.1f} at the start), wall "
           f"{results.get('wall_s', 0) / 60:.1f} min, commit {results.get('commit') or '?'}.", "",
           "Records/s over the whole run (from `runner.run` to the last batch: warm-up, join and claim "
           "included; the spark-kafka member warms up through a query of its own and starts its query after "
           "the claim, the scg-kafka member warms up in its own query, started before it joins); in the last "
           "two columns "
           "the ratio from the claim on, and within the micro-batches (records over the sum of their "
           "durations: read, parse, write and commit, without the planning between batches).", "",
           "| dataset | noop rec/s | scg (spark-kafka) rec/s | scg (scg-kafka) rec/s | scg-kafka / spark-kafka "
           "| spark-kafka / noop | scg-kafka / noop | scg-kafka / spark-kafka after the claim "
           "| scg-kafka / spark-kafka within batches |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for dataset, row in results.get("summary", {}).items():
        med = row["median"]

        def cell(v):
            return f"{med[v]:,.0f}" if v in med else "–"

        def ratio(x):
            return f"{x:.2f}" if x else "–"
        out.append(f"| {dataset} | {cell('noop')} | {cell('scg')} | {cell('scg_follow')} | "
                   f"{ratio(row['follow_vs_scg'])} | {ratio(row['scg_vs_noop'])} | {ratio(row['follow_vs_noop'])} | "
                   f"{ratio(row.get('follow_vs_scg_after_claim'))} | {ratio(row.get('follow_vs_scg_within_batches'))} |")
    if results.get("local", {}).get("error"):
        out += ["", f"A driver failed: `{results['local']['error'][-500:]}`"]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0, help="shrink every dataset (smoke runs)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    for name, (topic, n, vb) in DATASETS.items():
        DATASETS[name] = (f"reader-{topic}", int(n * args.scale), vb)
    wall = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="scg-bench-reader-"))
    print(f"scratch directory {base}", flush=True)
    kafka = LocalKafka(base / "kafka")
    bootstrap = kafka.start().bootstrap_servers
    results: dict = {"partitions": PARTITIONS, "max_offsets_per_trigger": MAX_OFFSETS, "reps": args.reps,
                     "scale": args.scale, "cpu_count": os.cpu_count(), "load_average_start": os.getloadavg(),
                     "commit": _commit(), "datasets": {}}
    out = Path(args.out)
    try:
        for name, (topic, count, vb) in {"warmup": WARMUP, **DATASETS}.items():
            create_topic(bootstrap, topic, PARTITIONS)
            t0 = time.monotonic()
            mean = produce_records(bootstrap, topic, count, vb)
            results["datasets"][name] = {"topic": topic, "records": count, "mean_value_bytes": mean}
            say(f"produced {count:,} × {mean:.0f} B into {topic} in {time.monotonic() - t0:.1f}s")
        results["local"] = throughput(bootstrap, base, args.reps)
        results["summary"] = summary(results["local"])
    finally:
        kafka.stop()
    results["wall_s"] = time.monotonic() - wall
    out.mkdir(parents=True, exist_ok=True)
    (out / "reader.json").write_text(json.dumps(results, indent=2))
    (out / "reader.md").write_text(markdown(results))
    print((out / "reader.md").read_text())


if __name__ == "__main__":
    main()
