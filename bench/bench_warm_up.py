"""Warm-up benchmark (not a test): how long a fresh `scg run` member joining an empty group takes
from process start to its first committed batch, with and without a warm-up before it joins,
alternating in the same run against one local broker.

* ``--reader spark-kafka``: the reader mode's warm-up (a query over one record, the default)
  against none (patched out in the member process);
* ``--reader scg-kafka``: no rehearsal (the default for a group nobody else reads) against one
  rehearsed batch in the member's own query (patched in).

Also reported: process start to the member's query start or claim ("starting query" / "reading
from the next batch": a warm-up runs before the member joins, so it delays that), and from there
to the first batch line. Each rep uses a new topic (4 partitions, ``--records`` JSON records
already produced) and a new member on ``local[2]``; the member is SIGKILLed after its first
batch line.

    .venv/bin/python bench/bench_warm_up.py [--reader spark-kafka] [--reps 3] [--records 2000]

Writes bench/results/warm_up.{json,md} (spark-kafka) or warm_up-scg-kafka.{json,md}.
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
PATCH_IN = ("from pipelines.runtime import warm_up, warm_up_rounds; original = warm_up.warm_up_rounds; "
            "warm_up.warm_up_rounds = lambda ctx, sleep: (lambda r: r if r[0] is not None else "
            "(warm_up_rounds.WarmUpRounds(max_batches=1), r[1] + ': one batch all the same'))(original(ctx, sleep)); ")
MODES = {"spark-kafka": {"on": "", "off": PATCH_OUT}, "scg-kafka": {"on": PATCH_IN, "off": ""}}
MODE_NAMES = {"spark-kafka": ("warm-up off", "warm-up on (default)"),
              "scg-kafka": ("no rehearsal (default)", "one rehearsed batch")}
MEMBER_TIMEOUT_S = 300


def say(text: str, began: float) -> None:
    print(f"[{(time.monotonic() - began) / 60:5.1f} min] {text}", flush=True)


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=json.dumps({"id": i, "name": f"n{i}"}).encode(), partition=i % 4)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
    if producer.flush(120):
        raise SystemExit(f"producing to {topic}: records left undelivered")


def one_member(path: Path, patch: str) -> dict:
    """Run a member (``patch``: Python run before the CLI) until its first batch line; the seconds
    to its query start or claim, from there to the batch line, from process start to it, and the
    batch's own duration as the member reports it."""
    code = patch + \
        f"import sys; from pipelines.cli.main import main; sys.exit(main(['run', {str(path)!r}]))"
    proc = subprocess.Popen([sys.executable, "-u", "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    began, marks = time.monotonic(), {}
    deadline = began + MEMBER_TIMEOUT_S
    try:
        for line in proc.stdout:
            now = time.monotonic() - began
            if ("starting query" in line or "reading from the next batch" in line) and "start" not in marks:
                marks["start"] = now
            found = re.search(r"\] batch \d+: [1-9][\d,]* records .* in ([\d.]+)s", line)
            if found:
                return {"to_query_start_s": round(marks["start"], 2),
                        "query_start_to_first_batch_s": round(now - marks["start"], 2),
                        "to_first_batch_s": round(now, 2),
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
    parser.add_argument("--reader", choices=sorted(MODES), default="spark-kafka")
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
                topic = f"warm-up-{args.reader}-{mode}-{rep}"
                create_topic(bootstrap, topic, 4)
                produce(bootstrap, topic, args.records)
                path = write_pipeline(base / f"{topic}.yaml", bootstrap, topic, topic, base / topic,
                                      extra='format: {type: json, schema: "id BIGINT, name STRING"}\n'
                                            'spark: {spark.master: "local[2]"}\n', reader=args.reader,
                                      warm_up_limit=None)
                runs[mode].append(one_member(path, MODES[args.reader][mode]))
                say(f"rep {rep + 1}/{args.reps} warm-up {mode}: {runs[mode][-1]}", began)
    finally:
        kafka.stop()
    results = {"reader": args.reader, "reps": args.reps, "records": args.records, "load_average_end": os.getloadavg()[0],
               "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                        text=True).stdout.strip(),
               "runs": runs,
               "median": {mode: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
                          for mode, rows in runs.items()}}
    _save(results)


def _save(results: dict) -> None:
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    reader = results["reader"]
    name = "warm_up" if reader == "spark-kafka" else f"warm_up-{reader}"
    (out / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    on, off = results["median"]["on"], results["median"]["off"]
    rows = [("process start → query start or claim (s)", "to_query_start_s"),
            ("query start or claim → first batch line (s)", "query_start_to_first_batch_s"),
            ("process start → first batch line (s)", "to_first_batch_s"),
            ("first batch as reported by the member (s)", "first_batch_reported_s")]
    off_name, on_name = MODE_NAMES[reader]
    lines = [f"# Warm-up benchmark ({reader}): a fresh member's first batch with and without a warm-up", "",
             f"One broker, one member at a time joining an empty group on `local[2]`, {results['records']} JSON "
             f"records in 4 partitions waiting; {results['reps']} reps per mode, alternating; medians; commit "
             f"{results['commit']}. Command: `.venv/bin/python bench/bench_warm_up.py --reader {reader} "
             f"--reps {results['reps']} --records {results['records']}`.", "",
             f"| | {off_name} | {on_name} | ratio |", "|---|---:|---:|---:|"]
    lines += [f"| {label} | {off[key]:.2f} | {on[key]:.2f} | {on[key] / off[key]:.2f} |" for label, key in rows
              if key in off and key in on]
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
