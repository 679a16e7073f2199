"""Upsert benchmark (not a test; numbers vary with the machine): change events in Debezium's JSON
envelope (``before``/``after``/``op``/``source``, ~300 B) over a key space, in 12 partitions
keyed by id, read to its end by one `bin/scg run` process (``trigger.available_now``) into an
upsert table (``sink.mode: upsert``, ``key: [id]``, ``order_by: source.lsn``), against the
single-table append path (``sink.path``, the one-pass Arrow path) over the same records in the
same run, on ``local[2]``. Events: the first for a key creates it, later ones update it (92 %)
or delete it (``op: d``, 8 %); keys are drawn uniformly, so every batch touches keys all over
the table.

Per key space and variant: wall seconds from process start to exit, CPU seconds of the whole
process tree, events/s, CPU-seconds per million events, peak RSS, micro-batches, and the table's
rows, files and bytes at the end; for the upsert table also each batch's MERGE as its Delta
commit records it (changes merged, rows the table had, rows rewritten, files, milliseconds), so
the cost per batch shows how it grows with the table. The upsert table is checked against a
plain-Python model of the events (its row count). Repetitions rotate the order. Writes
bench/results/upsert.json and .md.

    .venv/bin/python bench/bench_upsert.py [--events 1000000] [--keys 100000 1000000] [--reps 1]
"""
from __future__ import annotations

import argparse
import json
import os
import random
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
from bench_e2e import say  # noqa: E402
from result_files import write_results  # noqa: E402

RESULTS = HERE / "results"
PARTITIONS = 12
PER_BATCH = 100_000   # source.max_offsets_per_trigger of both variants
ROW = "id BIGINT, name STRING, city STRING, qty INT, amount DOUBLE"
BATCH_LINE = re.compile(r"\] batch \d+: (\d+) records")
APPEND, UPSERT = "append", "upsert"


def row_struct() -> str:
    return "STRUCT<" + ", ".join(f"{name}: {kind}" for name, kind in (c.split() for c in ROW.split(", "))) + ">"


def produce_changes(bootstrap: str, topic: str, events: int, keys: int) -> tuple[float, int]:
    """``events`` Debezium-shaped change events over ``keys`` keys (Kafka key: the id); returns
    the mean value size and how many keys the events leave in the table."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.kbytes": 1_048_576,
                         "acks": "1", "log_level": 3})
    rnd, live, total = random.Random(7), set(), 0
    for lsn in range(1, events + 1):
        key = rnd.randrange(keys)
        row = {"id": key, "name": f"customer-{key:06d}", "city": f"city-{rnd.randrange(500):03d}",
               "qty": rnd.randrange(1000), "amount": round(rnd.random() * 10_000, 2)}
        if key in live and rnd.random() < 0.08:
            change, _ = {"before": row, "after": None, "op": "d"}, live.discard(key)
        else:
            change = {"before": row if key in live else None, "after": row, "op": "u" if key in live else "c"}
            live.add(key)
        value = json.dumps({**change, "source": {"lsn": lsn, "db": "shop", "table": "customers"},
                            "ts_ms": 1_790_000_000_000 + lsn})
        total += len(value)
        while True:
            try:
                producer.produce(topic, key=str(key), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        if lsn % 20_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise SystemExit(f"producing to {topic}: messages left undelivered")
    return total / events, len(live)


def pipeline(path: Path, bootstrap: str, topic: str, work: Path, variant: str) -> Path:
    envelope = f"before {row_struct()}, after {row_struct()}, op STRING, source STRUCT<lsn: BIGINT>"
    if variant == UPSERT:
        fmt = f'format: {{type: json, envelope: debezium, schema: "{envelope}"}}\n'
        sink = (f"sink:\n  path: {work / 'table'}\n  dead_letter_path: {work / 'dead'}\n  mode: upsert\n"
                "  key: [id]\n  order_by: source.lsn\n")
    else:
        fmt = f'format: {{type: json, schema: "{envelope}"}}\n'
        sink = f"sink:\n  path: {work / 'table'}\n  dead_letter_path: {work / 'dead'}\n"
    path.write_text(textwrap.dedent(f"""\
        name: upsert-{work.name}
        kafka:
          bootstrap_servers: {bootstrap}
        topics: [{topic}]
        group:
          id: upsert-{work.name}
        source:
          starting_offsets: earliest
          max_offsets_per_trigger: {PER_BATCH}
        trigger:
          available_now: true
        checkpoint_root: {work / 'checkpoints'}
        """) + fmt + sink)
    return path


def table_facts(path: Path) -> dict:
    from deltalake import DeltaTable

    table = DeltaTable(str(path))
    import pyarrow as pa

    files = pa.table(table.get_add_actions(flatten=True))
    merges = [entry["operationMetrics"] for entry in reversed(table.history()) if entry.get("operation") == "MERGE"]
    return {"rows": table.to_pyarrow_dataset().count_rows(), "files": files.num_rows,
            "bytes": sum(files["size_bytes"].to_pylist()), "versions": table.version() + 1, "merges": merges}


def run(bootstrap: str, topic: str, base: Path, variant: str, label: str) -> dict:
    work = base / label
    work.mkdir()
    path = pipeline(work / "pipeline.yaml", bootstrap, topic, work, variant)
    log = work / "member.log"
    result = timed_process([sys.executable, "-m", "pipelines.cli", "run", str(path)], log)
    batches = [int(events) for events in BATCH_LINE.findall(log.read_text())]
    return {**result, "batches": batches, "table": table_facts(work / "table")}


def markdown(results: dict) -> str:
    events = results["events"]
    spaces = results["spaces"]
    size = statistics.mean(space["mean_value_bytes"] for space in spaces.values())
    lines = [f"# Upserts: {events:,} Debezium change events (~{size:.0f} B) over {' and '.join(f'{int(k):,}' for k in spaces)} keys, "
             f"{PARTITIONS} partitions, local[2]", "",
             f"Command: `.venv/bin/python bench/bench_upsert.py --events {events} --keys "
             f"{' '.join(spaces)} --reps {results['reps']}`; `bin/scg run` with `available_now` and "
             f"`max_offsets_per_trigger: {PER_BATCH}`, process start to exit (Spark's start and the group join "
             f"included). Load average at start {results['load_average_start'][0]:.1f}, at end "
             f"{results['load_average_end'][0]:.1f}. Each upsert table holds exactly the keys its events leave.", "",
             "| keys | variant | runs (s) | median s | events/s | CPU-s per M events | peak RSS (GiB) | batches "
             "| table rows | table files | table MiB | × append |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for keys, space in spaces.items():
        base = statistics.median(r["seconds"] for r in space["runs"][APPEND])
        for variant, runs in space["runs"].items():
            median = statistics.median(r["seconds"] for r in runs)
            cpu = statistics.median(r["cpu_s"] for r in runs) / events * 1e6
            rss = max(r["peak_rss_bytes"] for r in runs) / 2**30
            table = runs[-1]["table"]
            name = "append (Arrow one pass)" if variant == APPEND else "upsert (MERGE)"
            each = ", ".join(f"{r['seconds']:.1f}" for r in runs)
            lines.append(f"| {int(keys):,} | {name} | {each} | {median:.1f} | {events / median:,.0f} | {cpu:.1f} | "
                         f"{rss:.2f} | {len(runs[-1]['batches'])} | {table['rows']:,} | {table['files']} | "
                         f"{table['bytes'] / 2**20:.1f} | {base / median:.2f} |")
    for keys, space in spaces.items():
        lines += ["", f"Each MERGE of the last upsert run over {int(keys):,} keys, as its Delta commit records it "
                  "(deltalake's operation metrics): the changes merged (one per key changed), the rows the "
                  "table held before, the rows written (the table's rows in the files it rewrote), files "
                  "removed and added, and the merge's own milliseconds.", "",
                  "| batch | changes | table rows before | rows written | files removed / added | merge ms |",
                  "|---:|---:|---:|---:|---:|---:|"]
        before = 0
        for index, merge in enumerate(space["runs"][UPSERT][-1]["table"]["merges"]):
            lines.append(f"| {index} | {merge['num_source_rows']:,} | {before:,} | {merge['num_output_rows']:,} | "
                         f"{merge['num_target_files_removed']} / {merge['num_target_files_added']} | "
                         f"{merge['execution_time_ms']:,} |")
            before = before + merge["num_target_rows_inserted"] - merge["num_target_rows_deleted"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="scg-upsert-"))
    say(f"scratch directory {base}")
    kafka = LocalKafka(base / "kafka")
    bootstrap = kafka.start().bootstrap_servers
    variants = [APPEND, UPSERT]
    results = {"events": args.events, "reps": args.reps, "load_average_start": os.getloadavg(), "spaces": {}}
    try:
        for keys in args.keys:
            topic = f"upsert-changes-{keys}"
            create_topic(bootstrap, topic, PARTITIONS)
            t0 = time.monotonic()
            mean_bytes, live = produce_changes(bootstrap, topic, args.events, keys)
            space = results["spaces"][str(keys)] = {"mean_value_bytes": mean_bytes, "live_keys": live,
                                                    "runs": {v: [] for v in variants}}
            say(f"produced {args.events:,} change events over {keys:,} keys in {time.monotonic() - t0:.0f}s")
            for rep in range(args.reps):
                shift = rep % len(variants)
                for variant in variants[shift:] + variants[:shift]:
                    label = f"{keys}-{variant}-r{rep}"
                    say(f"{label} ...")
                    result = run(bootstrap, topic, base, variant, label)
                    expected = live if variant == UPSERT else args.events
                    if result["table"]["rows"] != expected:
                        raise SystemExit(f"{label}: {result['table']['rows']} rows in the table, expected {expected}")
                    say(f"{label}: {result['seconds']:.1f}s, {result['cpu_s']:.0f} CPU-s, "
                        f"{len(result['batches'])} batches")
                    space["runs"][variant].append(result)
    finally:
        kafka.stop()
    results["load_average_end"] = os.getloadavg()
    write_results(Path(args.out), "upsert", results, markdown(results))


if __name__ == "__main__":
    main()
