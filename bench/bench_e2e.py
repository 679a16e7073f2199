"""End-to-end throughput and hand-off benchmark (not a test; numbers vary with the machine).

One run, one broker, one Spark session, the same records for every variant:

* ``noop``      — Spark's Kafka source + the same JSON parsing into the noop sink (read ceiling);
* ``spark``     — the same query into delta-spark's streaming Delta sink, no group (baseline);
* ``scg``       — one spark-consumer-groups member: group join, exactly-once Delta commits with
                  per-partition txn, Kafka offset commits.

Reports records/s, the ratio to the plain-Spark baseline, the share of each micro-batch spent in
the Delta commit, and the hand-off time (a member leaves → its partitions flow again in the other
member). Writes bench/results/e2e.json and bench/results/e2e.md.

    .venv/bin/python bench/bench_e2e.py [--records 1000000] [--partitions 12]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.config import load_pipeline  # noqa: E402
from pipelines.local.local_kafka import LocalKafka  # noqa: E402
from pipelines.runtime.runner import PipelineRunner  # noqa: E402
from pipelines.runtime.spark_session import get_or_create_spark  # noqa: E402
from tests.e2e.harness import MemberProcess, SteadyProducer  # noqa: E402
from tests.support.kafka_data import create_topic, write_pipeline  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA = "id BIGINT, name STRING, category STRING, amount DOUBLE, note STRING"
MAX_PER_TRIGGER = 200_000


def produce_records(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 2_000_000})
    pad = "x" * 110
    for i in range(count):
        value = json.dumps({"id": i, "name": f"user-{i % 1000:04d}", "category": f"c{i % 7}",
                            "amount": i * 0.01, "note": pad})  # ~200 bytes
        while True:
            try:
                producer.produce(topic, key=str(i % 1000), value=value)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def plain_query(spark, bootstrap, topic, sink: str, path: str | None) -> float:
    from pyspark.sql import functions as F

    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(MAX_PER_TRIGGER)).load())
    parsed = stream.select("topic", "partition", "offset", "timestamp",
                           F.col("key").cast("string").alias("key"),
                           F.from_json(F.col("value").cast("string"), SCHEMA).alias("j")).select(
        "topic", "partition", "offset", "timestamp", "key", "j.*")
    writer = (parsed.writeStream.format(sink).trigger(availableNow=True)
              .option("checkpointLocation", tempfile.mkdtemp(prefix="bench-cp-")))
    started = time.monotonic()
    query = writer.start(path) if path else writer.start()
    query.awaitTermination()
    return time.monotonic() - started


def scg_run(spark, config, expected: int) -> tuple[float, list]:
    reports = []
    runner = PipelineRunner(config, spark, out=lambda line: None)
    original = runner.progress.batch
    runner.progress.batch = lambda r, lag=None: (reports.append(r), original(r, lag))
    started = time.monotonic()
    runner.run(threading.Event())
    elapsed = time.monotonic() - started
    written = sum(r.rows_written for r in reports)
    if written != expected:
        raise SystemExit(f"scg wrote {written} rows, expected {expected}")
    return elapsed, reports


def handoff(bootstrap, base: Path, partitions: int) -> float:
    """Two members as separate `scg run` processes (one Spark driver each, as with spark-submit);
    b leaves cleanly (SIGTERM); seconds until a has all partitions and committed a batch."""
    topic = "handoff"
    create_topic(bootstrap, topic, partitions)
    producer = SteadyProducer(bootstrap, topic).start()
    path = write_pipeline(base / "handoff.yaml", bootstrap, topic, "bench-handoff", base / "handoff")
    a, b = MemberProcess("a", path, base), MemberProcess("b", path, base)
    try:
        _wait(lambda: len(a.owned()) + len(b.owned()) == partitions and a.owned() and b.owned()
              and a.count(r"batch \d+") and b.count(r"batch \d+"), 300)
        seen = len(a.lines)
        left = time.monotonic()
        b.signal(signal.SIGTERM)
        _wait(lambda: _batch_after_full_assignment(a.lines[seen:], partitions), 300)
        return time.monotonic() - left
    finally:
        producer.stop()
        for member in (a, b):
            member.kill()


def _batch_after_full_assignment(lines, partitions: int) -> bool:
    for i, line in enumerate(lines):
        if f"assigned {partitions} partition" in line:
            return any(re.search(r"batch \d+: [1-9]", later) for later in lines[i + 1:])
    return False


def _wait(predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("benchmark step timed out")
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=12)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="scg-bench-"))
    kafka = LocalKafka(base / "kafka")
    state = kafka.start()
    try:
        results = run_all(state.bootstrap_servers, base, args.records, args.partitions)
    finally:
        kafka.stop()
    write_results(results)


def run_all(bootstrap: str, base: Path, records: int, partitions: int) -> dict:
    create_topic(bootstrap, "bench", partitions)
    t0 = time.monotonic()
    produce_records(bootstrap, "bench", records)
    print(f"produced {records} records in {time.monotonic() - t0:.1f}s", flush=True)
    spark = get_or_create_spark("scg-bench", {"spark.master": "local[2]"})
    plain_query(spark, bootstrap, "bench", "noop", None)  # warm-up: JIT, class loading, metadata
    noop_s = plain_query(spark, bootstrap, "bench", "noop", None)
    spark_s = plain_query(spark, bootstrap, "bench", "delta", str(base / "plain_delta"))
    config = load_pipeline(write_pipeline(
        base / "bench.yaml", bootstrap, "bench", "bench-group", base / "scg",
        extra=f"format: {{type: json, schema: '{SCHEMA}'}}\n"))
    config = _available_now(config)
    scg_s, reports = scg_run(spark, config, records)
    spark.stop()  # free the cores for the two member processes
    handoff_s = handoff(bootstrap, base, partitions)
    commit_share = [r.commit_s / r.duration_s for r in reports if r.duration_s > 0 and r.rows_written]
    return {
        "records": records, "partitions": partitions, "max_offsets_per_trigger": MAX_PER_TRIGGER,
        "cpu_count": os.cpu_count(),
        "noop": {"seconds": noop_s, "records_per_s": records / noop_s},
        "spark_delta": {"seconds": spark_s, "records_per_s": records / spark_s},
        "scg": {"seconds": scg_s, "records_per_s": records / scg_s, "batches": len(reports),
                "delta_commit_s_median": statistics.median(r.commit_s for r in reports if r.rows_written),
                "delta_commit_share_median": statistics.median(commit_share)},
        "ratio_scg_to_spark_delta": spark_s / scg_s,
        "ratio_noop_to_spark_delta": spark_s / noop_s,
        "handoff_seconds": handoff_s,
    }


def _available_now(config):
    import dataclasses

    trigger = dataclasses.replace(config.trigger, processing_time_ms=None, available_now=True)
    source = dataclasses.replace(config.source, max_offsets_per_trigger=MAX_PER_TRIGGER)
    return dataclasses.replace(config, trigger=trigger, source=source)


def write_results(results: dict) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "e2e.json").write_text(json.dumps(results, indent=2))
    rows = [("noop sink (read ceiling)", results["noop"]), ("plain Spark → delta-spark sink (baseline)",
            results["spark_delta"]), ("spark-consumer-groups, 1 member, exactly-once", results["scg"])]
    lines = [f"# End-to-end throughput: {results['records']:,} records, {results['partitions']} partitions, "
             f"{results['cpu_count']} cores", "",
             "| variant | seconds | records/s | × baseline |", "|---|---:|---:|---:|"]
    base = results["spark_delta"]["seconds"]
    for name, r in rows:
        lines.append(f"| {name} | {r['seconds']:.1f} | {r['records_per_s']:,.0f} | {base / r['seconds']:.2f} |")
    scg = results["scg"]
    lines += ["", f"- micro-batches: {scg['batches']}; median Delta commit {scg['delta_commit_s_median']:.2f}s "
              f"({scg['delta_commit_share_median']:.0%} of a batch)",
              f"- hand-off (member leaves → its partitions flow in the other member): "
              f"{results['handoff_seconds']:.1f}s", ""]
    (RESULTS / "e2e.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
