"""Where the time of one micro-batch goes on this path, step by step (a profiling aid for
bench/bench_e2e.py; not a test, numbers vary with the machine).

One Kafka topic, one local[2] session, the same rows for every step: the batch is the Kafka
source's batch read of the whole topic (the DataFrame a micro-batch's ``foreachBatch`` receives has
the same plan). Steps, each timed alone, repetitions interleaved:

* ``noop``            — read + JSON parse into the noop sink (the read ceiling);
* ``delta-spark``     — read + parse + delta-spark's Parquet writer + Delta commit (the baseline);
* ``scg one pass``    — what BatchWriter does for a batch without a transform: one Spark job
                        (``SparkBatch.write_both``) writes both tables' files (driver commits
                        excluded: milliseconds);
* ``scg two passes``  — its path with a transform or after a dead-letter commit: classify +
                        persist, job 1 writes the dead letters (and fills the cache), job 2 the
                        output files from the cache, unpersist;
* ``arrow transfer``  — the one pass's rows handed to Python, which only consumes the batches
                        (JVM → Arrow → Python);
* ``parquet, no stats`` — mapInArrow writing the output rows as Parquet without DataFileWriter's
                        per-file Delta statistics and keep-from mask.

    .venv/bin/python bench/e2e_profile.py [--records 300000] [--value-bytes 1000] [--reps 2]
        [--merge bench/results]   # adds the profile to e2e.json / e2e.md
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_e2e import PARTITIONS, produce_records  # noqa: E402
from e2e_case import SCHEMA  # noqa: E402
from groupmgr.core import TopicPartition  # noqa: E402
from pipelines.config import load_pipeline  # noqa: E402
from pipelines.local.local_kafka import LocalKafka  # noqa: E402
from pipelines.runtime.batch_writer import PlannedWrite, SparkBatch, SparkRows  # noqa: E402
from pipelines.runtime.pipeline_tables import open_tables  # noqa: E402
from pipelines.runtime.records import classify, dead_letters, good_rows, split_rows  # noqa: E402
from pipelines.runtime.spark_session import get_or_create_spark  # noqa: E402
from tests.support.kafka_data import create_topic, write_pipeline  # noqa: E402


def consume_only(batches):
    import pyarrow as pa

    rows = 0
    for batch in batches:
        rows += batch.num_rows
    yield pa.RecordBatch.from_pylist([{"n": rows}], schema=pa.schema([("n", pa.int64())]))


def parquet_no_stats(uri: str):
    def task(batches):
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = f"{uri}/plain-{uuid.uuid4().hex}.snappy.parquet"
        writer, rows = None, 0
        for batch in batches:
            if writer is None:
                writer = pq.ParquetWriter(path, batch.schema, compression="snappy")
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
        yield pa.RecordBatch.from_pylist([{"n": rows}], schema=pa.schema([("n", pa.int64())]))
    return task


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--value-bytes", type=int, default=1_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--merge", metavar="RESULTS_DIR",
                        help="also store the profile in RESULTS_DIR/e2e.json and re-render e2e.md")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="scg-profile-"))
    kafka = LocalKafka(base / "kafka")
    bootstrap = kafka.start().bootstrap_servers
    try:
        create_topic(bootstrap, "profile", PARTITIONS)
        produce_records(bootstrap, "profile", args.records, args.value_bytes)
        results = profile(bootstrap, base, args)
    finally:
        kafka.stop()
    print(json.dumps(results, indent=2))
    if args.merge:
        merge_into(Path(args.merge), results)


def merge_into(results_dir: Path, profile_results: dict) -> None:
    from e2e_report import markdown

    results = json.loads((results_dir / "e2e.json").read_text())
    results["profile"] = profile_results
    (results_dir / "e2e.json").write_text(json.dumps(results, indent=2))
    (results_dir / "e2e.md").write_text(markdown(results))


def profile(bootstrap: str, base: Path, args) -> dict:
    from pyspark.sql import functions as F

    spark = get_or_create_spark("scg-profile", {"spark.master": "local[2]"})
    path = write_pipeline(base / "p.yaml", bootstrap, "profile", "profile", base / "scg",
                          extra=f"format: {{type: json, schema: '{SCHEMA}'}}\n", warm_up_limit=None)
    tables = open_tables(load_pipeline(path), spark)
    fmt = tables.record_format
    for table in (tables.table, tables.dead_table):
        table.snapshot()  # creates the empty table
    kafka_rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", "profile").option("startingOffsets", "earliest")
                  .option("endingOffsets", "latest").load())
    keep = {TopicPartition("profile", p): 0 for p in range(PARTITIONS)}  # as a first batch: keep all
    parsed = kafka_rows.select("topic", "partition", "offset", "timestamp",
                               F.col("key").cast("string").alias("key"),
                               F.from_json(F.col("value").cast("string"), SCHEMA).alias("j")).select(
        "topic", "partition", "offset", "timestamp", "key", "j.*")

    def one_pass() -> None:
        dead, written = SparkBatch(kafka_rows, fmt, None).write_both(
            PlannedWrite(tables.dead_table.file_writer(), keep), PlannedWrite(tables.table.file_writer(), keep))
        assert written.rows_written + dead.rows_written == args.records

    def two_passes() -> dict:
        classified = classify(kafka_rows, fmt).persist()
        t0 = time.monotonic()
        SparkRows(dead_letters(classified, fmt)).write(tables.dead_table.file_writer(), keep)
        t1 = time.monotonic()
        written = SparkRows(good_rows(classified, fmt)).write(tables.table.file_writer(), keep)
        t2 = time.monotonic()
        classified.unpersist()
        assert written.rows_written == args.records, written.rows_written
        return {"two passes, job 1 (dead letters + fill cache)": t1 - t0,
                "two passes, job 2 (output from cache)": t2 - t1}

    def arrow_transfer() -> None:
        split_rows(classify(kafka_rows, fmt), fmt).mapInArrow(consume_only, "n BIGINT").collect()

    def no_stats() -> None:
        out = base / f"nostats-{uuid.uuid4().hex[:6]}"
        out.mkdir()
        good_rows(classify(kafka_rows, fmt), fmt).mapInArrow(parquet_no_stats(str(out)), "n BIGINT").collect()

    steps = {
        "noop": lambda: parsed.write.format("noop").mode("overwrite").save(),
        "delta-spark": lambda: parsed.write.format("delta").mode("append").save(str(base / "delta")),
        "scg one pass (both tables, one job)": one_pass,
        "scg two passes (transform, or retry after the dead-letter commit)": two_passes,
        "arrow transfer only (one pass's rows to Python)": arrow_transfer,
        "one pass, parquet without stats/mask": no_stats,
    }
    for name, step in steps.items():  # warm-up: JIT, class loading, Python workers
        t0 = time.monotonic()
        step()
        print(f"warm-up {name}: {time.monotonic() - t0:.1f}s", flush=True)
    timings: dict[str, list[float]] = {name: [] for name in steps}
    details: list[dict] = []
    names = list(steps)
    for rep in range(args.reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            t0 = time.monotonic()
            detail = steps[name]()
            timings[name].append(time.monotonic() - t0)
            if detail:
                details.append(detail)
            print(f"{name}: {timings[name][-1]:.1f}s", flush=True)
    spark.stop()
    noop = statistics.median(timings["noop"])
    return {"records": args.records, "value_bytes": args.value_bytes, "reps": args.reps,
            "median_s": {k: statistics.median(v) for k, v in timings.items()},
            "x_noop_time": {k: statistics.median(v) / noop for k, v in timings.items()},
            "scg_jobs_s": {k: statistics.median(d[k] for d in details) for k in details[0]} if details else {}}


if __name__ == "__main__":
    main()
