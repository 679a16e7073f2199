"""End-to-end benchmark (not a test; numbers vary with the machine). One run, one broker, the same
records for every variant, baselines measured in the same run:

* ``noop``        — Spark's Kafka source + the same JSON parsing into the noop sink (read ceiling);
* ``spark_delta`` — the same query into delta-spark's streaming Delta sink, no group (baseline);
* ``scg``         — this project with Spark's Kafka source: PipelineRunner with a real group
                    member, executors write the Parquet files (mapInArrow), the driver makes one
                    exactly-once Delta commit per batch (per-partition txns) and then commits the
                    Kafka offsets;
* ``scg_follow``  — the same with ``source.reader: scg-kafka`` and no transform: the Arrow path
                    (the executors' Python workers read, decode and write each batch in one pass);
* ``scg_sql``     — ``scg-kafka`` with ``transform: SELECT * FROM input`` (the Spark SQL path);
* raw ceiling     — plain Python, no Spark, no Delta (bench/raw_ceiling.py): confluent-kafka →
                    pyarrow.json → Parquet, in one process over the 12 partitions and in two
                    processes over 6 each.

Every variant's CPU seconds are measured too: for a Spark driver the whole process tree (driver
Python, JVM, Python workers; on local[2] that is everything that ran the query), for the raw
ceiling the workers' own CPU; reported per million records.

Parts (each Spark driver is a fresh subprocess, bench/e2e_case.py, so memory peaks start at zero):

1. throughput on ``local[2]``: 1M × ~200 B and 600k × ~1 KB JSON records, 12 partitions,
   ``--reps`` interleaved repetitions (the order rotates), median reported; the Arrow path runs
   in a driver of its own, started as ``scg run`` starts it (C1 only: no record enters its JVM);
   records/s, MB/s of record values, CPU seconds per million records, ratios to plain Spark, to
   noop and (the Arrow path) to the two-process raw ceiling, median Delta commit time per batch,
   and where the time of this path's batches goes (bench-only timers around the batch writer's
   steps); the raw ceiling runs ``--reps`` times per dataset after the Spark drivers of this part
   exit;
2. driver memory: one ~100 MB batch vs one ~1 GB batch (``max_offsets_per_trigger`` sized for it),
   ``spark.driver.maxResultSize=32m``, Spark's default driver heap; peak RSS (VmHWM) of the driver's
   Python process and of its JVM, on ``local[2]`` (the JVM there also runs the tasks) and on a
   standalone master (the driver JVM only drives);
3. throughput on a Spark standalone master with one and with two workers (1 core, 1 GB executor each;
   the 200B dataset only unless ``--standalone-datasets 200B,1KB``);
4. hand-off: a member leaves → its partitions flow in the other member.

Writes bench/results/e2e.json and bench/results/e2e.md.

    .venv/bin/python bench/bench_e2e.py [--reps 2] [--scale 1.0] [--skip local,memory,standalone,handoff]

(``--skip local`` skips the raw ceiling too.)

bench/e2e_profile.py splits one batch of this path into steps (a separate, optional run).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.local.local_kafka import LocalKafka  # noqa: E402
from tests.e2e.harness import MemberProcess, SteadyProducer  # noqa: E402
from tests.support.kafka_data import create_topic, write_pipeline  # noqa: E402
from tests.support.standalone import StandaloneCluster  # noqa: E402

import raw_ceiling  # noqa: E402  (bench/ is on sys.path as the script's directory)
from e2e_report import markdown  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PARTITIONS = 12
MAX_OFFSETS = 500_000        # the project's default source.max_offsets_per_trigger, for every variant
DATASETS = {                 # name: (topic, records, value bytes)
    "200B": ("e2e-200b", 1_000_000, 200),
    "1KB": ("e2e-1kb", 600_000, 1_000),
}
WARMUP = ("e2e-warmup", 50_000, 200)                      # every variant once before measuring
MEMORY_TOPIC, MEMORY_RECORDS = "e2e-mem-1kb", 1_100_000   # 1.1e9 bytes of values: one batch ≥ 1 GiB
MEMORY_SMALL_BATCH = 100_000                              # ~100 MB
DRIVER_SETTINGS = {"spark.driver.maxResultSize": "32m"}   # default driver heap (no spark.driver.memory)
WORKER_MEMORY, EXECUTOR_MEMORY = "2g", "1g"
VARIANTS = ("noop", "spark_delta", "scg", "scg_follow", "scg_sql")
ARROW_VARIANTS = ("scg_follow",)  # run in a driver of their own, started as `scg run` starts it
RAW_PROCESSES = (1, 2)       # raw ceiling: one process over all partitions, two over half each


T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[{(time.monotonic() - T0) / 60:5.1f} min] {text}", flush=True)


# -- data ------------------------------------------------------------------------------------------
def produce_records(bootstrap: str, topic: str, count: int, value_bytes: int) -> float:
    """``count`` JSON records of about ``value_bytes`` bytes (a note of random letters from a pool of
    1,000, so lz4 cannot squeeze it away); returns the mean value size."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.kbytes": 1_048_576,
                         "acks": "1", "log_level": 3})
    rnd = random.Random(7)
    head = len('{"id":1000000,"name":"user-0000","category":"c0","amount":10000.00,"note":""}')
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
    notes = ["".join(rnd.choice(alphabet) for _ in range(max(value_bytes - head, 1))) for _ in range(1000)]
    total = 0
    for i in range(count):
        value = (f'{{"id":{i},"name":"user-{i % 1000:04d}","category":"c{i % 7}",'
                 f'"amount":{i * 0.01:.2f},"note":"{notes[(i * 7919) % 1000]}"}}')
        total += len(value)
        while True:
            try:
                producer.produce(topic, key=str(i % 1000), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise SystemExit(f"producing to {topic}: messages left undelivered")
    return total / count


# -- subprocess drivers ----------------------------------------------------------------------------
def run_case(name: str, base: Path, spec: dict, timeout_s: float = 1800) -> dict:
    """Run one bench/e2e_case.py driver process; its Spark log goes to base/<name>.log."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "", name)  # deltalake panics on some characters in a path ('[')
    spec_path, out_path = base / f"{name}.spec.json", base / f"{name}.out.json"
    spec = {**spec, "base": str(base / name)}
    spec_path.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    say(f"driver process {name} ({spec['master']})")
    with open(base / f"{name}.log", "w") as log:
        proc = subprocess.run([sys.executable, str(HERE / "e2e_case.py"), str(spec_path), str(out_path)],
                              stdout=None, stderr=log, env=env, timeout=timeout_s)
    result = json.loads(out_path.read_text()) if out_path.exists() else {"runs": []}
    if proc.returncode != 0:
        tail = (base / f"{name}.log").read_text(errors="replace")[-3000:]
        result["error"] = f"exit {proc.returncode}: {tail}"
        say(f"case {name} failed (exit {proc.returncode}); log tail:\n{tail}")
    return result


def run_spec(variant: str, dataset: str, label: str, topic=None, records=None, value_bytes=None, **extra):
    t, n, vb = DATASETS[dataset] if dataset in DATASETS else (topic, records, value_bytes)
    return {"variant": variant, "topic": topic or t, "records": records or n, "max_offsets": MAX_OFFSETS,
            "label": re.sub(r"[^A-Za-z0-9_.-]", "", label), "value_bytes": value_bytes or vb, **extra}


def warmups(variants=VARIANTS) -> list[dict]:
    """Each of ``variants`` once over a small topic: JIT, class loading, Delta's and deltalake's first use."""
    topic, records, vb = WARMUP
    return [run_spec(v, "", f"warmup-{v}", topic=topic, records=records, value_bytes=vb) for v in variants]


# -- parts -----------------------------------------------------------------------------------------
def throughput_local(bootstrap: str, base: Path, reps: int) -> dict:
    """Per repetition two driver processes, one after the other (which first alternates): the
    variants whose records pass through the JVM, and the Arrow path's, whose driver is started as
    ``scg run`` starts it (C1 only: no record enters its JVM). Within a process the order of the
    variants rotates."""
    merged: dict = {"master": "local[2]", "runs": [], "cases": []}
    for rep in range(reps):
        shift = rep % len(VARIANTS)
        order = VARIANTS[shift:] + VARIANTS[:shift]  # rotate so no variant always runs first
        groups = [tuple(v for v in order if v not in ARROW_VARIANTS), ARROW_VARIANTS]
        for group in (groups if rep % 2 == 0 else groups[::-1]):
            arrow = group == ARROW_VARIANTS
            spec = {"master": "local[2]", "settings": DRIVER_SETTINGS, "bootstrap": bootstrap,
                    "rows_in_jvm": not arrow, "warmup": warmups(group),
                    "runs": [run_spec(v, dataset, f"{dataset}-{v}-r{rep}", rep=rep)
                             for dataset in DATASETS for v in group]}
            case = run_case(f"local-{'arrow' if arrow else 'jvm'}-r{rep}", base, spec)
            merged["runs"] += case.pop("runs")
            merged["cases"].append(case)
            if "error" in case:
                merged["error"] = case["error"]
    return merged


def raw_ceiling_part(bootstrap: str, reps: int) -> list[dict]:
    """The raw ceiling (bench/raw_ceiling.py) per dataset, one and two processes, ``reps`` times
    (the order of the process counts rotates)."""
    out = []
    for rep in range(reps):
        for dataset, (topic, records, value_bytes) in DATASETS.items():
            counts = RAW_PROCESSES[rep % len(RAW_PROCESSES):] + RAW_PROCESSES[:rep % len(RAW_PROCESSES)]
            for processes in counts:
                label = f"{dataset}-raw{processes}-r{rep}"
                say(f"raw ceiling {label}")
                try:
                    r = raw_ceiling.run(bootstrap, topic, PARTITIONS, records, processes)
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - the rest of the run goes on
                    say(f"raw ceiling {label} failed: {exc}")
                    continue
                out.append({**r, "variant": f"raw_{processes}p", "label": label, "topic": topic,
                            "value_bytes": value_bytes, "batches": 0})
    return out


def memory_cases(bootstrap: str, base: Path, master: str, settings: dict, tag: str) -> list[dict]:
    out = []
    for batch in (MEMORY_SMALL_BATCH, MEMORY_RECORDS):
        run = run_spec("scg", "", f"mem-{tag}-{batch}", topic=MEMORY_TOPIC, records=MEMORY_RECORDS,
                       value_bytes=1_000, stop_after_batches=1)
        run["max_offsets"] = batch
        result = run_case(f"mem-{tag}-{batch}", base, {
            "master": master, "settings": {**DRIVER_SETTINGS, **settings}, "bootstrap": bootstrap,
            "warmup": None, "runs": [run]})
        out.append({**result, "master": tag, "batch_records": batch})
    return out


def standalone_part(bootstrap: str, base: Path, workers: int, datasets, with_memory: bool) -> dict:
    settings = {"spark.executor.memory": EXECUTOR_MEMORY, "spark.executor.cores": "1",
                "spark.cores.max": str(workers)}
    work = base / f"standalone-{workers}"
    work.mkdir()
    started = time.monotonic()
    with StandaloneCluster(work, cores=1, memory=WORKER_MEMORY, workers=workers) as cluster:
        say(f"standalone master with {workers} worker(s) up in {time.monotonic() - started:.1f}s")
        runs = [run_spec(v, d, f"sa{workers}-{d}-{v}") for d in datasets for v in VARIANTS]
        result = run_case(f"standalone-{workers}", base, {
            "master": cluster.url, "settings": {**DRIVER_SETTINGS, **settings}, "bootstrap": bootstrap,
            "warmup": warmups(), "runs": runs})
        memory = memory_cases(bootstrap, base, cluster.url, settings, f"standalone, {workers} workers") \
            if with_memory else []
    return {"workers": workers, "settings": settings, **result, "memory": memory}


def handoff(bootstrap: str, base: Path) -> float:
    """Two members as separate `scg run` processes (one Spark driver each, as with spark-submit);
    b leaves cleanly (SIGTERM); seconds until a has all partitions and committed a batch."""
    topic = "handoff"
    create_topic(bootstrap, topic, PARTITIONS)
    producer = SteadyProducer(bootstrap, topic).start()
    path = write_pipeline(base / "handoff.yaml", bootstrap, topic, "bench-handoff", base / "handoff",
                          reader="spark-kafka")
    a, b = MemberProcess("a", path, base), MemberProcess("b", path, base)
    try:
        _wait(lambda: len(a.owned()) + len(b.owned()) == PARTITIONS and a.owned() and b.owned()
              and a.count(r"batch \d+") and b.count(r"batch \d+"), 300)
        seen = len(a.lines)
        left = time.monotonic()
        b.signal(signal.SIGTERM)
        _wait(lambda: _batch_after_full_assignment(a.lines[seen:], PARTITIONS), 300)
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


# -- main ------------------------------------------------------------------------------------------
def main() -> None:
    global MEMORY_RECORDS, MEMORY_SMALL_BATCH, WARMUP
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions on local[2]")
    parser.add_argument("--scale", type=float, default=1.0, help="shrink every dataset (smoke runs)")
    parser.add_argument("--skip", default="", help="comma list of: local, memory, standalone, handoff")
    parser.add_argument("--standalone-datasets", default="200B",
                        help="datasets measured on the standalone masters (200B,1KB); 200B keeps the run short")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    for name, (topic, n, vb) in DATASETS.items():
        DATASETS[name] = (topic, int(n * args.scale), vb)
    MEMORY_RECORDS, MEMORY_SMALL_BATCH = int(MEMORY_RECORDS * args.scale), int(MEMORY_SMALL_BATCH * args.scale)
    WARMUP = (WARMUP[0], max(int(WARMUP[1] * min(args.scale, 1.0)), 5_000), WARMUP[2])
    wall = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="scg-bench-"))
    print(f"scratch directory {base}", flush=True)
    kafka = LocalKafka(base / "kafka")
    bootstrap = kafka.start().bootstrap_servers
    results: dict = {"partitions": PARTITIONS, "max_offsets_per_trigger": MAX_OFFSETS, "reps": args.reps,
                     "scale": args.scale, "cpu_count": os.cpu_count(), "load_average_start": os.getloadavg(),
                     "command": " ".join([".venv/bin/python", "bench/bench_e2e.py",
                                          *_without_out(sys.argv[1:])]),
                     "datasets": {}}
    out = Path(args.out)
    try:
        topics = {"warmup": WARMUP, **DATASETS}
        if "memory" not in skip:
            topics["memory"] = (MEMORY_TOPIC, MEMORY_RECORDS, 1_000)
        for name, (topic, count, vb) in topics.items():
            create_topic(bootstrap, topic, PARTITIONS)
            t0 = time.monotonic()
            mean = produce_records(bootstrap, topic, count, vb)
            results["datasets"][name] = {"topic": topic, "records": count, "mean_value_bytes": mean,
                                         "value_mb": count * mean / 1e6, "produce_s": time.monotonic() - t0}
            say(f"produced {count:,} × {mean:.0f} B into {topic} in {time.monotonic() - t0:.1f}s")
        for name, (topic, count, _) in DATASETS.items():  # actual mean sizes for MB/s
            DATASETS[name] = (topic, count, results["datasets"][name]["mean_value_bytes"])
        if "local" not in skip:
            results["local"] = throughput_local(bootstrap, base, args.reps)
            _save(results, out)
            results["local"]["runs"] += raw_ceiling_part(bootstrap, args.reps)
            _save(results, out)
        if "memory" not in skip:
            results["memory_local"] = memory_cases(bootstrap, base, "local[2]", {}, "local[2]")
            _save(results, out)
        if "standalone" not in skip:
            datasets = [d for d in args.standalone_datasets.split(",") if d]
            results["standalone"] = [standalone_part(bootstrap, base, w, datasets, w == 2 and "memory" not in skip)
                                     for w in (1, 2)]
            _save(results, out)
        if "handoff" not in skip:
            say("hand-off")
            results["handoff_seconds"] = handoff(bootstrap, base)
    finally:
        kafka.stop()
    results["wall_s"] = time.monotonic() - wall
    results["load_average_end"] = os.getloadavg()
    _save(results, out)
    print((out / "e2e.md").read_text())


def _without_out(argv: list[str]) -> list[str]:
    """The command line's arguments without ``--out`` (where this run's files went)."""
    kept, skip = [], False
    for arg in argv:
        if skip or arg.startswith("--out="):
            skip = False
            continue
        if arg == "--out":
            skip = True
            continue
        kept.append(arg)
    return kept


def _save(results: dict, out: Path) -> None:

    out.mkdir(parents=True, exist_ok=True)
    (out / "e2e.json").write_text(json.dumps(results, indent=2))
    (out / "e2e.md").write_text(markdown(results))


if __name__ == "__main__":
    main()
