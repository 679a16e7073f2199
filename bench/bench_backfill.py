"""Whole-process backfill benchmark (not a test; numbers vary with the machine): a topic of 2M JSON
records of ~200 B in 12 partitions read to its end by one process, from process start to exit,
every row committed, against plain Spark doing the same (bench/plain_spark.py: Spark's Kafka
source → ``from_json`` → delta-spark, ``availableNow``), in the same run on ``local[2]``:

* ``scg``   — ``bin/scg run`` of a pipeline with ``trigger.available_now`` and the default reader
              (the Arrow path: no transform, flat fields);
* ``plain`` — ``python bench/plain_spark.py ... available-now``.

Each process's wall seconds, CPU seconds of its whole tree (driver, JVM, Python workers; sampled),
the peak RSS of the tree at once, and the rows in the table afterwards (must be
every record). Repetitions alternate the order. Writes bench/results/backfill.json and .md.

    .venv/bin/python bench/bench_backfill.py [--records 2000000] [--reps 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pipelines.local.local_kafka import LocalKafka  # noqa: E402
from tests.support.kafka_data import create_topic  # noqa: E402

from bench_e2e import produce_records, say  # noqa: E402
from e2e_case import proc_status, tree_cpu_seconds, tree_pids  # noqa: E402
from plain_spark import SCHEMA  # noqa: E402
from result_files import write_results  # noqa: E402

RESULTS = HERE / "results"
PARTITIONS = 12


def scg_pipeline(path: Path, bootstrap: str, topic: str, table: Path, group: str) -> Path:
    path.write_text(textwrap.dedent(f"""\
        name: backfill-{group}
        kafka:
          bootstrap_servers: {bootstrap}
        topics: [{topic}]
        group:
          id: {group}
        source:
          starting_offsets: earliest
        sink:
          path: {table / 'table'}
          dead_letter_path: {table / 'dead'}
        trigger:
          available_now: true
        checkpoint_root: {table / 'checkpoints'}
        format: {{type: json, schema: "{SCHEMA}"}}
        """))
    return path


class TreeSampler(threading.Thread):
    """Samples a process tree every ``every_s`` until the root exits: the CPU seconds of the
    whole tree (reaped children included) and the largest sum of its processes' RSS."""

    def __init__(self, root: int, every_s: float = 0.25):
        super().__init__(daemon=True)
        self.root, self.every_s = root, every_s
        self.cpu_s, self.peak_rss = 0.0, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            self.cpu_s = max(self.cpu_s, tree_cpu_seconds(self.root))
            self.peak_rss = max(self.peak_rss, sum(_rss(pid) for pid in tree_pids(self.root)))


def _rss(pid: int) -> int:
    try:
        return proc_status(pid).get("VmRSS", 0)
    except OSError:  # gone meanwhile
        return 0


def timed_process(command: list[str], log: Path) -> dict:
    """Run ``command`` to its end: wall seconds, CPU seconds of its tree (sampled: the last quarter
    second is missed), the largest RSS of the tree at once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=HERE.parent)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        returncode = proc.wait(timeout=3600)
    seconds = time.monotonic() - started
    sampler.done.set()
    sampler.join()
    if returncode != 0:
        raise SystemExit(f"{command[:4]} exited {returncode}; see {log}")
    return {"seconds": seconds, "cpu_s": sampler.cpu_s, "peak_rss_bytes": sampler.peak_rss}


def table_rows(path: Path) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_dataset().count_rows()


def run_scg(bootstrap: str, topic: str, base: Path, label: str) -> dict:
    work = base / label
    work.mkdir()
    pipeline = scg_pipeline(work / "pipeline.yaml", bootstrap, topic, work, label)
    result = timed_process([sys.executable, "-m", "pipelines.cli", "run", str(pipeline)], work / "member.log")
    return {**result, "rows": table_rows(work / "table")}


def run_plain(bootstrap: str, topic: str, base: Path, label: str) -> dict:
    work = base / label
    work.mkdir()
    result = timed_process([sys.executable, str(HERE / "plain_spark.py"), bootstrap, topic, str(work / "table"),
                            "available-now"], work / "plain.log")
    return {**result, "rows": table_rows(work / "table")}


def markdown(results: dict) -> str:
    records = results["records"]
    lines = [f"# Whole-process backfill: {records:,} records × ~{results['mean_value_bytes']:.0f} B, "
             f"{PARTITIONS} partitions, local[2]", "",
             "Command: `.venv/bin/python bench/bench_backfill.py"
             f" --records {records} --reps {results['reps']}`; process start to exit, every row committed. "
             f"Load average at start {results['load_average_start'][0]:.1f}, at end {results['load_average_end'][0]:.1f}.",
             "", "| process | runs (s) | median s | records/s | CPU-s per M records | peak RSS (process tree) | × plain Spark |",
             "|---|---|---:|---:|---:|---:|---:|"]
    medians = {v: statistics.median(r["seconds"] for r in runs) for v, runs in results["runs"].items() if runs}
    for variant, name in (("scg", "`bin/scg run`, available_now (Arrow path)"),
                          ("plain", "plain Spark → delta-spark, availableNow")):
        runs = results["runs"].get(variant) or []
        if not runs:
            continue
        cpu = statistics.median(r["cpu_s"] for r in runs) / records * 1e6
        rss = max(r["peak_rss_bytes"] for r in runs) / 2 ** 20
        ratio = medians["plain"] / medians[variant] if "plain" in medians else None
        each = ", ".join(f"{r['seconds']:.1f}" for r in runs)
        lines.append(f"| {name} | {each} | {medians[variant]:.1f} | "
                     f"{records / medians[variant]:,.0f} | {cpu:.1f} | {rss:,.0f} MiB | "
                     f"{'–' if ratio is None else f'{ratio:.2f}'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="scg-backfill-"))
    say(f"scratch directory {base}")
    kafka = LocalKafka(base / "kafka")
    bootstrap = kafka.start().bootstrap_servers
    results = {"records": args.records, "reps": args.reps, "load_average_start": os.getloadavg(),
               "runs": {"scg": [], "plain": []}}
    try:
        topic = "backfill-200b"
        create_topic(bootstrap, topic, PARTITIONS)
        t0 = time.monotonic()
        results["mean_value_bytes"] = produce_records(bootstrap, topic, args.records, 200)
        say(f"produced {args.records:,} records in {time.monotonic() - t0:.0f}s")
        for rep in range(args.reps):
            order = ("scg", "plain") if rep % 2 == 0 else ("plain", "scg")
            for variant in order:
                say(f"{variant} r{rep}")
                run = (run_scg if variant == "scg" else run_plain)(bootstrap, topic, base, f"{variant}-r{rep}")
                if run["rows"] != args.records:
                    raise SystemExit(f"{variant} r{rep}: {run['rows']} rows in the table, expected {args.records}")
                say(f"{variant} r{rep}: {run['seconds']:.1f}s, {run['cpu_s']:.0f} CPU-s")
                results["runs"][variant].append(run)
    finally:
        kafka.stop()
    results["load_average_end"] = os.getloadavg()
    write_results(Path(args.out), "backfill", results, markdown(results))


if __name__ == "__main__":
    main()
