"""Raw ceiling of the end-to-end benchmark: plain Python, no Spark, no Delta, no group.

Each worker process assigns its share of a topic's partitions from offset 0 to a confluent-kafka
Consumer (the fetch settings of the Arrow path's range reader), reads with ``consume(10000)`` (never
asking for more records than are left up to the partitions' high watermarks, read first), and per consumed chunk joins the values with newlines, decodes
them with ``pyarrow.json.read_json`` (the benchmark's explicit schema, one thread) and writes them
with the record's key, topic, partition, offset and timestamp as one row group of a Parquet file
(snappy) in a temporary directory. No dead-letter split, no commit of any kind.

``processes`` workers split the partitions round-robin and start together (each imports first,
then waits for the go): ``seconds`` runs from the first worker's start to the last one's end;
``cpu_s`` is the sum of the workers' own CPU time (user + system, all threads: getrusage
RUSAGE_SELF) over the same span.

    python bench/raw_ceiling.py BOOTSTRAP TOPIC PARTITIONS RECORDS [PROCESSES]
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA_FIELDS = (("id", "int64"), ("name", "string"), ("category", "string"), ("amount", "float64"),
                 ("note", "string"))  # e2e_case.SCHEMA in Arrow types
CONSUME_ROWS = 10_000


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(bootstrap: str, topic: str, partitions: list[int], out_dir: str) -> dict:
    """Read ``partitions`` of ``topic`` from offset 0 to their ends, decode, write Parquet; the
    records read, the span (monotonic start and end) and this process's CPU seconds over it."""
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq
    from confluent_kafka import Consumer, TopicPartition

    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    from pipelines.runtime.kafka_range_reader import FETCH_DEFAULTS

    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in SCHEMA_FIELDS])
    read_options = pj.ReadOptions(use_threads=False, block_size=64 << 20)
    parse_options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    cpu0, started = _cpu_self(), time.monotonic()
    consumer = Consumer({**FETCH_DEFAULTS, "bootstrap.servers": bootstrap, "group.id": "scg-raw-ceiling",
                         "enable.auto.commit": False, "auto.offset.reset": "error", "log_level": 3})
    left = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    writer, records, progressed = None, 0, time.monotonic()
    path = Path(out_dir) / f"part-{os.getpid()}.parquet"
    while left > 0:  # consume() waits for as many records as asked: never more than are left
        keys, values, parts, offsets, stamps = [], [], [], [], []
        for m in consumer.consume(min(CONSUME_ROWS, left), timeout=1.0):
            if m.error() is not None:
                raise SystemExit(f"raw ceiling: {m.error()}")
            keys.append(m.key())
            values.append(m.value())
            parts.append(m.partition())
            offsets.append(m.offset())
            stamps.append(m.timestamp()[1])
        left -= len(values)
        if not values:
            if time.monotonic() - progressed > 60:
                raise SystemExit(f"raw ceiling: no record for 60 s, {left} left")
            continue
        progressed = time.monotonic()
        decoded = pj.read_json(pa.BufferReader(b"\n".join(values)), read_options=read_options,
                               parse_options=parse_options)
        table = pa.table({"key": pa.array(keys, pa.binary()).cast(pa.string()),
                          "topic": pa.array([topic] * len(values), pa.string()),
                          "partition": pa.array(parts, pa.int32()), "offset": pa.array(offsets, pa.int64()),
                          "timestamp": pa.array(stamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
                          **{name: decoded.column(name) for name in decoded.column_names}})
        if writer is None:
            writer = pq.ParquetWriter(str(path), table.schema, compression="snappy")
        writer.write_table(table)
        records += len(values)
    if writer is not None:
        writer.close()
    consumer.close()
    ended = time.monotonic()
    return {"records": records, "started": started, "ended": ended, "cpu_s": _cpu_self() - cpu0,
            "partitions": partitions}


def run(bootstrap: str, topic: str, partitions: int, records: int, processes: int) -> dict:
    """``processes`` worker processes over ``topic``'s ``partitions`` (round-robin), started together."""
    out = Path(tempfile.mkdtemp(prefix="scg-raw-"))
    try:
        procs = []
        for i in range(processes):
            share = list(range(partitions))[i::processes]
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--worker", bootstrap, topic, ",".join(map(str, share)), str(out)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for p in procs:  # every worker has imported its modules
            if p.stdout.readline().strip() != "ready":
                raise SystemExit("raw ceiling: a worker failed to start")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            line = p.stdout.readline()
            if p.wait() != 0 or not line:
                raise SystemExit(f"raw ceiling: a worker exited with {p.returncode}")
            results.append(json.loads(line))
        read = sum(r["records"] for r in results)
        if read != records:
            raise SystemExit(f"raw ceiling on {topic}: read {read} records, expected {records}")
        seconds = max(r["ended"] for r in results) - min(r["started"] for r in results)
        cpu_s = sum(r["cpu_s"] for r in results)
        parquet_bytes = sum(f.stat().st_size for f in out.iterdir())
        return {"processes": processes, "records": read, "seconds": seconds, "cpu_s": cpu_s,
                "records_per_s": read / seconds, "cpu_s_per_million": cpu_s / read * 1e6,
                "parquet_bytes": parquet_bytes, "worker_seconds": [r["ended"] - r["started"] for r in results]}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _worker_main(bootstrap: str, topic: str, partitions: str, out_dir: str) -> None:
    import confluent_kafka  # noqa: F401 - imported before the go, as the timed span excludes imports
    import pyarrow.json  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    sys.path.insert(0, str(HERE.parent))
    import pipelines.runtime.kafka_range_reader  # noqa: F401

    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit(1)
    result = worker(bootstrap, topic, [int(p) for p in partitions.split(",") if p], out_dir)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        _worker_main(*sys.argv[2:6])
    else:
        bootstrap, topic, partitions, records = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(run(bootstrap, topic, partitions, records, int(sys.argv[5]) if len(sys.argv) > 5 else 1),
                         indent=2))
