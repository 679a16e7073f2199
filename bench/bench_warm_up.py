"""Warm-up benchmark (not a test): how long a fresh `scg run` member takes from "starting query"
to its first committed batch, with the runner's warm-up (the spark-kafka reader mode's warm-up, the default) and
without it (patched out in the member process), alternating in the same run against one local
broker. Also reported: the time from process start to "starting query" (the warm-up runs before
the member joins, so it delays that).

Each rep uses a new topic (4 partitions, ``--records`` JSON records already produced) and a new
member on ``local[2]``; the member is SIGKILLed after its first batch line.

    .venv/bin/python bench/bench_warm_up.py [--reps 3] [--records 2000]

Writes bench/results/warm_up.json and bench/results/warm_up.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402

from pipelines.local.local_kafka import LocalKafka  # noqa: E402
from tests.support.kafka_data import create_topic, write_pipeline  # noqa: E402

PATCH_OUT = ("from pipelines.runtime.reader_modes import RestartingQuery; "
             "RestartingQuery.warm_up = lambda self, stop: None; ")
MEMBER_TIMEOUT_S = 300


def say(text: str, began: float) -> None:
    print(f"[{(time.monotonic() - began) / 60:5.1f} min] {text}", flush=True)


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=json.dumps({"id": i, "name": f"n{i}"}).encode(), partition=i % 4)
    producer.flush(60)


def one_member(path: Path, warm_up: bool) -> dict:
    """Run a member until its first batch line; the seconds to "starting query" and from there to
    the batch line, and the batch's own duration as the member reports it."""
    code = ("" if warm_up else PATCH_OUT) + \
        f"import sys; from pipelines.cli.main import main; sys.exit(main(['run', {str(path)!r}]))"
    proc = subprocess.Popen([sys.executable, "-u", "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    began, marks = time.monotonic(), {}
    deadline = began + MEMBER_TIMEOUT_S
    try:
        for line in proc.stdout:
            now = time.monotonic() - began
            if "starting query" in line and "start" not in marks:
                marks["start"] = now
            found = re.search(r"\] batch 0: .* in ([\d.]+)s", line)
            if found:
                return {"to_query_start_s": round(marks["start"], 2),
                        "query_start_to_first_batch_s": round(now - marks["start"], 2),
                        "first_batch_reported_s": float(found.group(1))}
            if time.monotonic() > deadline:
                break
        raise RuntimeError(f"no first batch within {MEMBER_TIMEOUT_S}s (exit {proc.poll()})")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args()
    began = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="scg-bench-warm-up-"))
    kafka = LocalKafka(base / "kafka")
    runs: dict[str, list[dict]] = {"on": [], "off": []}
    try:
        bootstrap = kafka.start(brokers=1).bootstrap_servers
        say(f"broker at {bootstrap}", began)
        for rep in range(args.reps):
            for mode in ("off", "on"):
                topic = f"warm-up-{mode}-{rep}"
                create_topic(bootstrap, topic, 4)
                produce(bootstrap, topic, args.records)
                path = write_pipeline(base / f"{topic}.yaml", bootstrap, topic, topic, base / topic,
                                      extra='format: {type: json, schema: "id BIGINT, name STRING"}\n'
                                            'spark: {spark.master: "local[2]"}\n', reader="spark-kafka")
                runs[mode].append(one_member(path, warm_up=mode == "on"))
                say(f"rep {rep + 1}/{args.reps} warm-up {mode}: {runs[mode][-1]}", began)
    finally:
        kafka.stop()
    results = {"reps": args.reps, "records": args.records, "load_average_end": os.getloadavg()[0],
               "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                        text=True).stdout.strip(),
               "runs": runs,
               "median": {mode: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
                          for mode, rows in runs.items()}}
    _save(results)


def _save(results: dict) -> None:
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "warm_up.json").write_text(json.dumps(results, indent=2) + "\n")
    on, off = results["median"]["on"], results["median"]["off"]
    rows = [("process start → starting query (s)", "to_query_start_s"),
            ("starting query → first batch line (s)", "query_start_to_first_batch_s"),
            ("first batch as reported by the member (s)", "first_batch_reported_s")]
    lines = ["# Warm-up benchmark: a fresh member's first batch with and without the warm-up", "",
             f"One broker, one member at a time on `local[2]`, {results['records']} JSON records in 4 partitions "
             f"waiting; {results['reps']} reps per mode, alternating; medians; commit {results['commit']}.", "",
             "| | warm-up off | warm-up on (default) | on / off |", "|---|---:|---:|---:|"]
    lines += [f"| {label} | {off[key]:.2f} | {on[key]:.2f} | {on[key] / off[key]:.2f} |" for label, key in rows]
    (out / "warm_up.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
