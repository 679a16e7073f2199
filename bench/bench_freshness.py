"""Freshness benchmark (not a test; numbers vary with the machine): how long a record takes from
being produced to being committed in Delta, at a steady produce rate, for this project and for
plain Spark at the same trigger, in the same run on ``local[2]``.

For each trigger (``--triggers``, default 500ms and 2s) and each consumer:

* ``scg``   — ``bin/scg run`` of a pipeline with ``trigger.processing_time`` and the default reader
              (the Arrow path: no transform, flat fields);
* ``plain`` — bench/plain_spark.py in ``stream`` mode: Spark's Kafka source → ``from_json`` →
              delta-spark's streaming sink with ``processingTime``;

a fresh topic of 12 partitions gets JSON records of ~200 B at ``--rate`` records/s (a paced
producer process; a record's Kafka timestamp is its create time) while the consumer runs. Only
records produced in the steady window — from ``--settle`` seconds after the consumer's first
Delta commit (catching up on what was produced while it started), for ``--window`` seconds — are
measured: a record's freshness is the commit timestamp of the
Delta version that added its file minus its Kafka timestamp. Reported: p50, p99 and max, the
records measured (every record of the window must be in the table), and the CPU the consumer's
process tree used during the window (cores). Writes bench/results/freshness.json and .md.

    .venv/bin/python bench/bench_freshness.py [--rate 20000] [--triggers 500ms,2s] [--settle 20] [--window 60]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pipelines.local.local_kafka import LocalKafka  # noqa: E402
from tests.support.kafka_data import create_topic  # noqa: E402

from bench_e2e import say  # noqa: E402
from e2e_case import tree_cpu_seconds  # noqa: E402
from plain_spark import SCHEMA  # noqa: E402
from result_files import write_results  # noqa: E402

RESULTS = HERE / "results"
PARTITIONS = 12
SPARK_TRIGGERS = {"500ms": "500 milliseconds", "2s": "2 seconds"}


# -- the paced producer (a process of its own: its CPU is not the consumer's) ---------------------
def produce_paced(bootstrap: str, topic: str, rate: int) -> None:
    """JSON records of ~200 B at ``rate`` per second, spread over the partitions, until SIGTERM."""
    from confluent_kafka import Producer

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1", "log_level": 3})
    note = "n" * 120
    started, sent = time.monotonic(), 0
    while not stop:
        due = int(rate * (time.monotonic() - started))
        while sent < due:
            value = (f'{{"id":{sent},"name":"user-{sent % 1000:04d}","category":"c{sent % 7}",'
                     f'"amount":{sent * 0.01:.2f},"note":"{note}"}}')
            try:
                producer.produce(topic, key=str(sent % 1000), value=value)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(60)
    print(json.dumps({"sent": sent, "seconds": time.monotonic() - started}), flush=True)


# -- consumers -------------------------------------------------------------------------------------
def scg_command(bootstrap: str, topic: str, work: Path, trigger: str) -> list[str]:
    pipeline = work / "pipeline.yaml"
    pipeline.write_text(textwrap.dedent(f"""\
        name: fresh-{work.name}
        kafka:
          bootstrap_servers: {bootstrap}
        topics: [{topic}]
        group:
          id: fresh-{work.name}
        source:
          starting_offsets: earliest
        sink:
          path: {work / 'table'}
          dead_letter_path: {work / 'dead'}
        trigger:
          processing_time: {trigger}
        checkpoint_root: {work / 'checkpoints'}
        format: {{type: json, schema: "{SCHEMA}"}}
        """))
    return [sys.executable, "-m", "pipelines.cli", "run", str(pipeline)]


def plain_command(bootstrap: str, topic: str, work: Path, trigger: str) -> list[str]:
    return [sys.executable, str(HERE / "plain_spark.py"), bootstrap, topic, str(work / "table"), "stream",
            SPARK_TRIGGERS[trigger], str(work / "stop")]


# -- measuring -------------------------------------------------------------------------------------
def freshness_ms(table: Path, since_ms: int, until_ms: int) -> list[int]:
    """Per record produced in [since_ms, until_ms): commit time of the version that added its file
    minus its Kafka timestamp, in ms."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out = []
    for entry in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
        committed = next((a["commitInfo"].get("timestamp") for a in actions if "commitInfo" in a), None)
        committed = committed or int(entry.stat().st_mtime * 1000)
        for action in actions:
            if "add" not in action:
                continue
            stamps = pq.read_table(table / action["add"]["path"], columns=["timestamp"]).column("timestamp")
            millis = pc.cast(pc.cast(stamps, pa.timestamp("ms", tz="UTC")), pa.int64()).to_pylist()
            out += [committed - t for t in millis if since_ms <= t < until_ms]
    return out


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(consumer: str, bootstrap: str, base: Path, trigger: str, args) -> dict:
    work = base / f"{consumer}-{trigger}"
    work.mkdir()
    topic = f"fresh-{consumer}-{trigger}"
    create_topic(bootstrap, topic, PARTITIONS)
    command = (scg_command if consumer == "scg" else plain_command)(bootstrap, topic, work, trigger)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    log = open(work / "consumer.log", "w")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=HERE.parent,
                            start_new_session=True)
    producer = subprocess.Popen([sys.executable, str(Path(__file__)), "--produce", bootstrap, topic, str(args.rate)],
                                stdout=subprocess.PIPE, text=True)
    first = _wait(lambda: proc.poll() is not None or _holds_rows(work / "table"), 600)
    if not first or proc.poll() is not None:
        raise SystemExit(f"{consumer} {trigger}: no rows committed; see {work / 'consumer.log'}")
    time.sleep(args.settle)
    since_ms = int(time.time() * 1000)
    cpu0, t0 = tree_cpu_seconds(proc.pid), time.monotonic()
    time.sleep(args.window)
    cpu_s, window_s = tree_cpu_seconds(proc.pid) - cpu0, time.monotonic() - t0
    until_ms = int(time.time() * 1000)
    producer.send_signal(signal.SIGTERM)
    produced = json.loads(producer.communicate(timeout=120)[0].strip().splitlines()[-1])
    expected = None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # the window's records committed, then stop
        latencies = freshness_ms(work / "table", since_ms, until_ms) if (work / "table" / "_delta_log").exists() else []
        expected = expected or _window_records(bootstrap, topic, since_ms, until_ms)
        if len(latencies) >= expected:
            break
        time.sleep(1)
    (work / "stop").touch()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()
    if len(latencies) != expected:
        raise SystemExit(f"{consumer} {trigger}: {len(latencies)} of {expected} window records committed; "
                         f"see {work / 'consumer.log'}")
    return {"consumer": consumer, "trigger": trigger, "records": len(latencies), "produced": produced,
            "p50_ms": percentile(latencies, 0.50), "p99_ms": percentile(latencies, 0.99), "max_ms": max(latencies),
            "cpu_cores": cpu_s / window_s}


def _holds_rows(table: Path) -> bool:
    """Whether a version of the Delta table at ``table`` added a file."""
    log_dir = table / "_delta_log"
    return log_dir.is_dir() and any('"add"' in entry.read_text() for entry in log_dir.glob("*.json"))


def _wait(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _window_records(bootstrap: str, topic: str, since_ms: int, until_ms: int) -> int:
    """How many records of ``topic`` have a timestamp in [since_ms, until_ms) (ListOffsets by time)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "freshness-counter"})
    try:
        parts = [TopicPartition(topic, p, since_ms) for p in range(PARTITIONS)]
        starts = consumer.offsets_for_times(parts, timeout=30)
        ends = consumer.offsets_for_times([TopicPartition(topic, p, until_ms) for p in range(PARTITIONS)], timeout=30)
        total = 0
        for start, end in zip(starts, ends):
            high = consumer.get_watermark_offsets(TopicPartition(topic, start.partition), timeout=30)[1]
            first = high if start.offset < 0 else start.offset
            last = high if end.offset < 0 else end.offset
            total += last - first
        return total
    finally:
        consumer.close()


def markdown(results: dict) -> str:
    args = results["args"]
    lines = [f"# Freshness at a steady {args['rate']:,} records/s (~200 B JSON, {PARTITIONS} partitions, local[2])", "",
             f"Command: `.venv/bin/python bench/bench_freshness.py --rate {args['rate']} --triggers "
             f"{','.join(args['triggers'])} --settle {args['settle']:g} --window {args['window']:g}`. Produce "
             "timestamp → the Delta commit holding the record, for every record produced in the steady window. "
             f"Load average at start {results['load_average_start'][0]:.1f}, at end {results['load_average_end'][0]:.1f}.",
             "", "| trigger | consumer | records measured | p50 | p99 | max | consumer CPU (cores) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    names = {"scg": "`bin/scg run` (Arrow path)", "plain": "plain Spark → delta-spark"}
    for r in results["runs"]:
        lines.append(f"| {r['trigger']} | {names[r['consumer']]} | {r['records']:,} | {r['p50_ms'] / 1000:.2f} s | "
                     f"{r['p99_ms'] / 1000:.2f} s | {r['max_ms'] / 1000:.2f} s | {r['cpu_cores']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    if sys.argv[1:2] == ["--produce"]:
        bootstrap, topic, rate = sys.argv[2:5]
        produce_paced(bootstrap, topic, int(rate))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--triggers", default="500ms,2s")
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--consumers", default="scg,plain")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    triggers, consumers = args.triggers.split(","), args.consumers.split(",")
    base = Path(tempfile.mkdtemp(prefix="scg-freshness-"))
    say(f"scratch directory {base}")
    kafka = LocalKafka(base / "kafka")
    bootstrap = kafka.start().bootstrap_servers
    results = {"args": {**vars(args), "triggers": triggers}, "load_average_start": os.getloadavg(), "runs": []}
    try:
        for trigger in triggers:
            for consumer in consumers:
                say(f"{consumer} at {trigger}: {args.settle:.0f}s to settle, {args.window:.0f}s measured")
                run = measure(consumer, bootstrap, base, trigger, args)
                say(f"{consumer} at {trigger}: p50 {run['p50_ms']} ms, p99 {run['p99_ms']} ms")
                results["runs"].append(run)
    finally:
        kafka.stop()
    results["load_average_end"] = os.getloadavg()
    write_results(Path(args.out), "freshness", results, markdown(results))


if __name__ == "__main__":
    main()
