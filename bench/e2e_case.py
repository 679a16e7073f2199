"""One Spark driver of the end-to-end benchmark (run by bench/bench_e2e.py as a subprocess).

A fresh process per case keeps the measurements apart: its own Spark session (local[N] or a
standalone master), its own driver JVM, and peak-memory counters (VmHWM) that start at zero.

    python bench/e2e_case.py SPEC.json OUT.json

SPEC holds ``master``, ``settings`` (extra Spark settings), ``rows_in_jvm`` (false: the driver
starts as ``scg run`` starts an Arrow-path member's, C1 only; default true), ``bootstrap``,
``base`` (scratch directory), ``warmup`` (run specs, not reported) and ``runs``: a list of run specs
``{"variant": "noop"|"spark_delta"|"scg"|"scg_follow"|"scg_sql", "topic", "records", "max_offsets",
"label", "stop_after_batches"?}``. Each run reads ``topic`` from the earliest offset to its end
(``max_offsets`` records per micro-batch). OUT receives one JSON object: a result per run (seconds,
CPU seconds, per-batch durations and phases) and the driver's memory (peak RSS of the Python process
and of the JVM, before the runs and at the end; JVM heap pool peaks during the runs).

Variants:

* ``noop`` / ``spark_delta``: Spark's Kafka source + ``from_json`` into the noop sink / delta-spark's
  streaming Delta sink (available-now trigger);
* ``scg``: this project's path with Spark's Kafka source (PipelineRunner with a real group member,
  available-now trigger, one Delta commit per batch);
* ``scg_follow``: the same with ``source.reader: scg-kafka`` and no transform, i.e. the Arrow path
  (each batch read, decoded and written as Parquet in one pass by the executors' Python workers);
  processing-time trigger, the run ends once every record is written;
* ``scg_sql``: as ``scg_follow`` with ``transform: SELECT * FROM input`` (the Spark SQL path of an
  ``scg-kafka`` query).

The bench only wraps a few of this project's methods with timers to split each batch into phases
(nothing else changes; the wrappers cost microseconds). ``cpu_s`` of a run is the CPU time (user +
system) of this process's whole tree over the timed span: the driver's Python, its JVM (which on
``local[N]`` also runs the tasks) and the Python workers, read from /proc (the processes alive, plus
what they reaped); on a standalone master the executors are not in the tree.
"""
from __future__ import annotations

import functools
import inspect
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SCHEMA = "id BIGINT, name STRING, category STRING, amount DOUBLE, note STRING"


# -- memory ----------------------------------------------------------------------------------------
def proc_status(pid: int | str = "self") -> dict[str, int]:
    """VmHWM / VmRSS of a process in bytes (Linux /proc)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(rest.split()[0]) * 1024
    return out


class DriverMemory:
    """Peak RSS of the driver's Python process and JVM, and the JVM's heap pool peaks."""

    def __init__(self, spark):
        self.jvm = spark.sparkContext._jvm
        self.jvm_pid = int(self.jvm.java.lang.ProcessHandle.current().pid())
        self.max_heap = int(self.jvm.java.lang.Runtime.getRuntime().maxMemory())

    def snapshot(self) -> dict:
        py, jvm = proc_status("self"), proc_status(self.jvm_pid)
        return {"python_hwm": py["VmHWM"], "python_rss": py["VmRSS"],
                "jvm_hwm": jvm["VmHWM"], "jvm_rss": jvm["VmRSS"]}

    def reset_heap_peaks(self) -> None:
        for pool in self.jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans():
            pool.resetPeakUsage()

    def heap_peaks(self) -> dict:
        """Peak used bytes per heap pool since the last reset (G1: Eden, Survivor, Old Gen)."""
        peaks = {}
        for pool in self.jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans():
            if str(pool.getType().toString()) == "Heap memory":
                peaks[str(pool.getName())] = int(pool.getPeakUsage().getUsed())
        return peaks


# -- CPU -------------------------------------------------------------------------------------------
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _process_table() -> tuple[dict[int, list[int]], dict[int, int]]:
    """Every process alive now: its children by parent pid, and its CPU ticks (utime stime
    cutime cstime of /proc/<pid>/stat: its own and its reaped children's)."""
    children: dict[int, list[int]] = defaultdict(list)
    ticks: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "; fields[0] is the state
        pid = int(entry.name)
        children[int(fields[1])].append(pid)
        ticks[pid] = sum(int(x) for x in fields[11:15])
    return children, ticks


def _descendants(root: int, children: dict[int, list[int]]) -> list[int]:
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, ())
    return found


def tree_pids(root: int) -> list[int]:
    """``root`` and its descendants alive now."""
    return _descendants(root, _process_table()[0])


def tree_cpu_seconds(root: int | None = None) -> float:
    """User + system CPU seconds of process ``root`` (default: this one) and all its descendants,
    including the children they have reaped (cutime, cstime of /proc/<pid>/stat)."""
    children, ticks = _process_table()
    pids = _descendants(os.getpid() if root is None else root, children)
    return sum(ticks.get(pid, 0) for pid in pids) / CLOCK_TICKS


# -- plain Spark -----------------------------------------------------------------------------------
def plain_query(spark, bootstrap: str, run: dict, base: Path) -> dict:
    """Spark's Kafka source + the same JSON parsing into the noop sink or delta-spark's sink."""
    from pyspark.sql import functions as F

    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", run["topic"]).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(run["max_offsets"])).load())
    parsed = stream.select("topic", "partition", "offset", "timestamp",
                           F.col("key").cast("string").alias("key"),
                           F.from_json(F.col("value").cast("string"), SCHEMA).alias("j")).select(
        "topic", "partition", "offset", "timestamp", "key", "j.*")
    sink = "noop" if run["variant"] == "noop" else "delta"
    writer = (parsed.writeStream.format(sink).trigger(availableNow=True).queryName(run["label"])
              .option("checkpointLocation", tempfile.mkdtemp(prefix="bench-cp-", dir=base)))
    path = str(base / f"plain-{run['label']}-{uuid.uuid4().hex[:6]}")
    cpu0, started = tree_cpu_seconds(), time.monotonic()
    query = writer.start(path) if sink == "delta" else writer.start()
    query.awaitTermination()
    seconds = time.monotonic() - started
    cpu_s = tree_cpu_seconds() - cpu0
    progress = [p for p in _progress(query) if p.get("numInputRows")]
    rows = sum(p["numInputRows"] for p in progress)
    if rows != run["records"]:
        raise SystemExit(f"{run['label']}: read {rows} rows, expected {run['records']}")
    if sink == "delta":
        written = spark.read.format("delta").load(path).count()
        if written != run["records"]:
            raise SystemExit(f"{run['label']}: delta-spark wrote {written} rows, expected {run['records']}")
    return {"seconds": seconds, "cpu_s": cpu_s, "batches": len(progress),
            "batch_s": [p["durationMs"].get("triggerExecution", 0) / 1000 for p in progress],
            "spark_phases_s": _sum_durations(progress)}


def _progress(query) -> list[dict]:
    out = []
    for p in query.recentProgress:
        out.append(json.loads(p.json) if hasattr(p, "json") and isinstance(p.json, str) else dict(p))
    return out


def _sum_durations(progress: list[dict]) -> dict:
    total: dict[str, float] = defaultdict(float)
    for p in progress:
        for key, ms in (p.get("durationMs") or {}).items():
            total[key] += ms / 1000
    return dict(total)


# -- this project's path ---------------------------------------------------------------------------
class PhaseTimers:
    """Bench-only timers around the batch writer's steps, per batch id (the batch writer runs in
    Spark's query thread; this process runs one query at a time)."""

    def __init__(self):
        self.batches: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.current = None
        self.queries = []

    def add(self, phase: str, seconds: float) -> None:
        if self.current is not None:
            self.batches[self.current][phase] += seconds

    def install(self) -> None:
        from pipelines.runtime import arrow_batches
        from pipelines.runtime import batch_writer as bw
        from pipelines.runtime import checkpoint_log, runner, streaming_query
        from sinks import txn_table

        timers = self

        def timed(owner, name, phase):
            static = isinstance(inspect.getattr_static(owner, name), staticmethod)
            original = getattr(owner, name)

            @functools.wraps(original)
            def wrapper(*args, **kwargs):
                started = time.monotonic()
                try:
                    return original(*args, **kwargs)
                finally:
                    timers.add(phase(args) if callable(phase) else phase, time.monotonic() - started)
            setattr(owner, name, staticmethod(wrapper) if static else wrapper)

        original_call = bw.BatchWriter.__call__

        def call(self, batch_df, batch_id):
            timers.current = batch_id
            started = time.monotonic()
            try:
                return original_call(self, batch_df, batch_id)
            finally:
                timers.add("foreach_batch_total", time.monotonic() - started)
                timers.current = None
        bw.BatchWriter.__call__ = call

        original_prepare = bw.BatchWriter.prepare  # either path's prepare (Spark plan or Arrow batch)

        def prepare(self, batch_df, ranges, left_out=frozenset(), fmt=None):
            started = time.monotonic()
            batch = original_prepare(self, batch_df, ranges, left_out, fmt)
            timers.add("prepare (plan)", time.monotonic() - started)
            release = batch.release

            def timed_release():
                t0 = time.monotonic()
                try:
                    return release()
                finally:
                    timers.add("unpersist", time.monotonic() - t0)
            batch.release = timed_release
            return batch
        bw.BatchWriter.prepare = prepare

        def which(args):
            writer = args[1]
            return ("two passes, job 1: dead letters (Kafka read + parse + cache the batch)"
                    if writer.table_uri.rstrip("/").endswith("dead")
                    else "two passes, job 2: output Parquet files from the cache (mapInArrow)")
        timed(bw.SparkRows, "write", which)
        timed(bw.SparkBatch, "write_both",
              "one pass: both tables' files (Kafka read + parse + split + Parquet, mapInArrow)")
        timed(arrow_batches.ArrowKafkaBatch, "write_both",
              "one pass, Arrow: read + decode + split + Parquet on the executors")
        timed(checkpoint_log.CheckpointOffsetLog, "ranges", "driver: offset log ranges")
        timed(checkpoint_log.AssignedOffsetLog, "ranges", "driver: offset log ranges")
        timed(txn_table.TxnDeltaTable, "snapshot", "driver: Delta snapshot loads")
        timed(txn_table.TxnDeltaTable, "_try_commit", "driver: Delta commit (create_write_transaction)")
        timed(txn_table.TxnDeltaTable, "_committed_version", "driver: find committed version")
        timed(bw.BatchWriter, "_commit_kafka", "driver: Kafka offset commit")
        timed(runner.PipelineRunner, "_on_batch", "driver: progress line (lag lookup)")

        for name in ("start_query", "start_assigned_query"):
            def start_query(*args, _original=getattr(streaming_query, name), **kwargs):
                query = _original(*args, **kwargs)
                timers.queries.append(query)
                return query
            setattr(streaming_query, name, start_query)


def scg_run(spark, bootstrap: str, run: dict, base: Path, timers: PhaseTimers) -> dict:
    from pipelines.config import load_pipeline
    from pipelines.runtime.runner import PipelineRunner
    from tests.support.kafka_data import write_pipeline

    label = f"{run['label']}-{uuid.uuid4().hex[:6]}"
    table_dir = base / f"scg-{label}"
    follow = run["variant"] in ("scg_follow", "scg_sql")  # reader scg-kafka: runs until stopped
    path = write_pipeline(base / f"{label}.yaml", bootstrap, run["topic"], f"bench-{label}", table_dir,
                          extra=f"format: {{type: json, schema: '{SCHEMA}'}}\n",
                          reader="scg-kafka" if follow else "spark-kafka", warm_up_limit=None)
    text = path.read_text()
    if not follow:
        text = text.replace("processing_time: 500ms", "available_now: true")
    if run["variant"] == "scg_sql":  # a pass-through transform: the batch goes through Spark SQL
        text += "transform: SELECT * FROM input\n"
    path.write_text(text.replace("  starting_offsets: earliest", "  starting_offsets: earliest\n"
                                 f"  max_offsets_per_trigger: {run['max_offsets']}"))
    config = load_pipeline(path)
    lines: list[tuple[float, str]] = []
    runner = PipelineRunner.open(config, spark, out=lambda line: lines.append((time.monotonic(), line)))
    reports: list[tuple[float, object]] = []
    print_batch = runner.progress.batch

    def record(report, lag=None):
        print_batch(report, lag)
        reports.append((time.monotonic(), report))
    runner.progress.batch = record
    stop_after = run.get("stop_after_batches")
    timers.batches.clear()
    timers.queries.clear()
    cpu0, started = tree_cpu_seconds(), time.monotonic()
    if stop_after:
        until = lambda: len(reports) >= stop_after  # noqa: E731
    elif follow:
        until = lambda: sum(r.rows_written for _, r in reports) >= run["records"]  # noqa: E731
    else:
        until = None
    runner.run(threading.Event(), until=until)
    returned = time.monotonic()
    cpu_s = tree_cpu_seconds() - cpu0
    written = sum(r.rows_written for _, r in reports)
    if not stop_after and written != run["records"]:
        raise SystemExit(f"{run['label']}: scg wrote {written} rows, expected {run['records']}")
    assigned = next((t for t, line in lines if "starting query" in line or "reading from the next batch" in line),
                    started)
    committed = [r for _, r in reports if r.rows_written]
    ids = {r.batch_id for r in committed}  # (an Arrow-path batch reports no input rows to Spark)
    progress = [p for q in timers.queries for p in _progress(q) if p.get("batchId") in ids]
    phases: dict[str, float] = defaultdict(float)
    for batch in timers.batches.values():
        for phase, seconds in batch.items():
            phases[phase] += seconds
    data_s = reports[-1][0] - started if reports else returned - started
    return {"seconds": data_s, "cpu_s": cpu_s, "run_returned_s": returned - started, "join_and_claim_s": assigned - started,
            "rows_written": written, "batches": len(committed),
            "batch_s": [r.duration_s for r in committed],
            "batch_records": [sum(x.count for x in r.ranges) for r in committed],
            "delta_commit_s": [r.commit_s for r in committed],
            "delta_commit_s_median": statistics.median(r.commit_s for r in committed) if committed else None,
            "batch_s_median": statistics.median(r.duration_s for r in committed) if committed else None,
            "phases_s": dict(phases), "spark_phases_s": _sum_durations(progress),
            "timeline": [(round(t - started, 3), line) for t, line in lines]}


# -- main ------------------------------------------------------------------------------------------
def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    from pipelines.runtime.spark_session import get_or_create_spark

    base = Path(spec["base"])
    base.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    spark = get_or_create_spark("scg-bench", {"spark.master": spec["master"], **spec.get("settings", {})},
                                rows_in_jvm=spec.get("rows_in_jvm", True))
    session_s = time.monotonic() - t0
    memory = DriverMemory(spark)
    timers = PhaseTimers()
    timers.install()
    result = {"master": spec["master"], "session_start_s": session_s, "runs": [],
              "driver_max_heap": memory.max_heap,
              "settings": {k: spark.conf.get(k, None) for k in
                           ("spark.driver.memory", "spark.driver.maxResultSize", "spark.executor.memory",
                            "spark.cores.max", "spark.sql.execution.arrow.maxRecordsPerBatch")}}
    for run in spec.get("warmup") or ():  # JIT, class loading, first use of Delta; not reported
        print(f"  [{spec['master']}] {run['label']} ...", flush=True)
        run_one(spark, spec["bootstrap"], run, base, timers)
    result["memory_before"] = memory.snapshot()
    memory.reset_heap_peaks()
    for run in spec["runs"]:
        print(f"  [{spec['master']}] {run['label']} ...", flush=True)
        r = run_one(spark, spec["bootstrap"], run, base, timers)
        r.update(label=run["label"], variant=run["variant"], topic=run["topic"], records=run["records"],
                 max_offsets=run["max_offsets"], value_bytes=run.get("value_bytes"))
        r["records_per_s"] = run["records"] / r["seconds"] if not run.get("stop_after_batches") else None
        r["cpu_s_per_million"] = r["cpu_s"] / run["records"] * 1e6 if not run.get("stop_after_batches") else None
        if run.get("value_bytes"):
            r["value_mb_per_s"] = (r["records_per_s"] or 0) * run["value_bytes"] / 1e6
        print(f"  [{spec['master']}] {run['label']}: {r['seconds']:.1f}s", flush=True)
        result["runs"].append(r)
        Path(out_path).write_text(json.dumps(result, indent=2))  # partial results survive a failure
    result["memory_after"] = memory.snapshot()
    result["jvm_heap_peaks"] = memory.heap_peaks()
    Path(out_path).write_text(json.dumps(result, indent=2))
    spark.stop()


def run_one(spark, bootstrap, run, base, timers) -> dict:
    if run["variant"] in ("scg", "scg_follow", "scg_sql"):
        return scg_run(spark, bootstrap, run, base, timers)
    return plain_query(spark, bootstrap, run, base)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main(sys.argv[1], sys.argv[2])
