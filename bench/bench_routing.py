"""Fan-out benchmark (not a test; numbers vary with the machine): one topic of JSON records of
~200 B in 12 partitions read to its end by one `bin/scg run` process (``trigger.available_now``),
written to 1, 4 and 16 Delta tables through ``sink.tables`` (routes ``id % n = i``: each record
to exactly one table), against the single-table append path (``sink.path``, the one-pass Arrow
path) in the same run, on ``local[2]``.

Per variant: wall seconds from process start to exit, CPU seconds of the whole process tree,
records/s, CPU-seconds per million records, micro-batches, and the Delta versions of all tables
(per output table its creation, the claim, the topic IDs and one commit per batch; the
dead-letter table's the same less the topic IDs).
Every row is checked to be in the tables once. Repetitions rotate the
order. Writes bench/results/routing.json and .md.

    .venv/bin/python bench/bench_routing.py [--records 500000] [--reps 2] [--tables 1 4 16]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pipelines.local.local_kafka import LocalKafka  # noqa: E402
from tests.support.kafka_data import create_topic  # noqa: E402

from bench_backfill import timed_process  # noqa: E402
from bench_e2e import produce_records, say  # noqa: E402
from plain_spark import SCHEMA  # noqa: E402
from result_files import write_results  # noqa: E402

RESULTS = HERE / "results"
PARTITIONS = 12
SINGLE = "single"


def pipeline(path: Path, bootstrap: str, topic: str, work: Path, tables: int | str) -> Path:
    if tables == SINGLE:
        sink = f"sink:\n  path: {work / 'table'}\n  dead_letter_path: {work / 'dead'}\n"
    else:
        listed = "".join(f"    - name: t{i}\n      path: {work / f't{i}'}\n"
                         f"      route: {{where: \"id % {tables} = {i}\"}}\n" for i in range(tables))
        sink = f"sink:\n  dead_letter_path: {work / 'dead'}\n  tables:\n{listed}"
    path.write_text(textwrap.dedent(f"""\
        name: routing-{work.name}
        kafka:
          bootstrap_servers: {bootstrap}
        topics: [{topic}]
        group:
          id: routing-{work.name}
        source:
          starting_offsets: earliest
        trigger:
          available_now: true
        checkpoint_root: {work / 'checkpoints'}
        format: {{type: json, schema: "{SCHEMA}"}}
        """) + sink)
    return path


def table_paths(work: Path, tables: int | str) -> list[Path]:
    outputs = [work / "table"] if tables == SINGLE else [work / f"t{i}" for i in range(tables)]
    return [*outputs, work / "dead"]


def rows_and_versions(paths: list[Path]) -> tuple[int, int]:
    """Rows in the output tables (the last path is the dead-letter table's), and the Delta versions
    of every table."""
    from deltalake import DeltaTable

    rows = sum(DeltaTable(str(p)).to_pyarrow_dataset().count_rows() for p in paths[:-1])
    return rows, sum(DeltaTable(str(p)).version() + 1 for p in paths)


def run(bootstrap: str, topic: str, base: Path, tables: int | str, label: str) -> dict:
    work = base / label
    work.mkdir()
    path = pipeline(work / "pipeline.yaml", bootstrap, topic, work, tables)
    log = work / "member.log"
    result = timed_process([sys.executable, "-m", "pipelines.cli", "run", str(path)], log)
    batches = len(re.findall(r"\] batch \d+: ", log.read_text()))
    rows, versions = rows_and_versions(table_paths(work, tables))
    return {**result, "rows": rows, "batches": batches, "versions": versions}


def markdown(results: dict) -> str:
    records = results["records"]
    lines = [f"# Fan-out: {records:,} records × ~{results['mean_value_bytes']:.0f} B into 1, 4 and 16 tables, "
             f"{PARTITIONS} partitions, local[2]", "",
             f"Command: `.venv/bin/python bench/bench_routing.py --records {records} --reps {results['reps']}`; "
             "`bin/scg run` with `available_now`, process start to exit, every row committed. "
             f"Load average at start {results['load_average_start'][0]:.1f}, at end "
             f"{results['load_average_end'][0]:.1f}. Delta versions of all tables: per output table its "
             "creation, the member's claim, the topic IDs and one commit per batch; the dead-letter table's the "
             "same less the topic IDs. Seconds include the process's start (Spark, the group join).", "",
             "| variant | runs (s) | median s | records/s | CPU-s per M records | batches | Delta versions, all tables "
             "| × single table |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    base = statistics.median(r["seconds"] for r in results["runs"][SINGLE])
    for variant, runs in results["runs"].items():
        median = statistics.median(r["seconds"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs) / records * 1e6
        batches = statistics.median(r["batches"] for r in runs)
        versions = statistics.median(r["versions"] for r in runs)
        name = "one table, `sink.path` (Arrow one pass)" if variant == SINGLE else f"`sink.tables`: {variant}"
        each = ", ".join(f"{r['seconds']:.1f}" for r in runs)
        lines.append(f"| {name} | {each} | {median:.1f} | "
                     f"{records / median:,.0f} | {cpu:.1f} | {batches:.0f} | {versions:.0f} | {base / median:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--tables", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="scg-routing-"))
    say(f"scratch directory {base}")
    kafka = LocalKafka(base / "kafka")
    bootstrap = kafka.start().bootstrap_servers
    variants: list[int | str] = [SINGLE, *args.tables]
    results = {"records": args.records, "reps": args.reps, "load_average_start": os.getloadavg(),
               "runs": {str(v): [] for v in variants}}
    try:
        topic = "routing-200b"
        create_topic(bootstrap, topic, PARTITIONS)
        t0 = time.monotonic()
        results["mean_value_bytes"] = produce_records(bootstrap, topic, args.records, 200)
        say(f"produced {args.records:,} records in {time.monotonic() - t0:.0f}s")
        for rep in range(args.reps):
            shift = rep % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                label = f"{variant}-r{rep}"
                say(f"{label} ...")
                result = run(bootstrap, topic, base, variant, label)
                if result["rows"] != args.records:
                    raise SystemExit(f"{label}: {result['rows']} rows in the tables, expected {args.records}")
                say(f"{label}: {result['seconds']:.1f}s, {result['cpu_s']:.0f} CPU-s, {result['batches']} batches")
                results["runs"][str(variant)].append(result)
    finally:
        kafka.stop()
    results["load_average_end"] = os.getloadavg()
    write_results(Path(args.out), "routing", results, markdown(results))


if __name__ == "__main__":
    main()
