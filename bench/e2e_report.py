"""bench/results/e2e.md from the results bench/bench_e2e.py collects (pure; no Spark, no Kafka)."""
from __future__ import annotations

import re
import statistics
from collections import defaultdict

NAMES = {"noop": "noop sink (read ceiling)", "spark_delta": "plain Spark → delta-spark sink",
         "scg": "scg, Spark's Kafka source (1 member, exactly-once)",
         "scg_follow": "scg Arrow path (scg-kafka, no transform)",
         "scg_sql": "scg Spark SQL path (scg-kafka, transform SELECT * FROM input)",
         "raw_1p": "raw ceiling, 1 process (confluent-kafka → pyarrow.json → Parquet, no Spark)",
         "raw_2p": "raw ceiling, 2 processes × 6 partitions"}
SCG_VARIANTS = ("scg", "scg_follow", "scg_sql")
TARGET_VS_SPARK, TARGET_VS_NOOP = 1.2, 0.8                   # scg (Spark's Kafka source)
ARROW_TARGET_VS_SPARK = {"200B": 3.0, "1KB": 2.5}            # the Arrow path (scg_follow)
ARROW_TARGET_VS_RAW = 0.7                                    # the Arrow path vs the 2-process raw ceiling
BASES = {"spark": "spark_delta", "noop": "noop", "raw2": "raw_2p"}


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _dataset(run) -> str:
    return "200B" if run["topic"].endswith("200b") else "1KB" if run["topic"].endswith("1kb") else run["topic"]


def _ratio(med: dict, base: str, v: str) -> float | None:
    """Throughput of ``v`` relative to ``base`` (same records: the inverse ratio of the seconds)."""
    return med[base] / med[v] if base in med and v in med else None


def _x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def throughput_rows(runs: list[dict], datasets: dict) -> tuple[list[str], dict]:
    """Markdown rows per (dataset, variant): median of the repetitions, ratios of the medians
    (× plain Spark, × noop, × the two-process raw ceiling); and per dataset and variant those
    ratios for the summary (``{ds: {variant: {"spark"|"noop"|"raw2": ratio or None}}}``)."""
    by: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in runs:
        by[(_dataset(r), r["variant"])].append(r)
    lines, ratios = [], {}
    for ds in ("200B", "1KB"):
        if not any(k[0] == ds for k in by):
            continue
        info = datasets.get(ds, {})
        med = {v: statistics.median(x["seconds"] for x in by[(ds, v)]) for v in NAMES if (ds, v) in by}
        for v in NAMES:
            if v not in med:
                continue
            rs = by[(ds, v)]
            secs = [x["seconds"] for x in rs]
            rate = rs[0]["records"] / med[v]
            mbs = rate * info.get("mean_value_bytes", rs[0].get("value_bytes") or 0) / 1e6
            spread = f" ({min(secs):.1f}–{max(secs):.1f})" if len(secs) > 1 else ""
            cpus = [x["cpu_s"] / x["records"] * 1e6 for x in rs if x.get("cpu_s") is not None]
            cpu = f"{statistics.median(cpus):.1f}" if cpus else "–"
            got = {name: _ratio(med, base, v) for name, base in BASES.items()}
            ratios.setdefault(ds, {})[v] = got
            rng = ""
            per_rep = _per_rep_ratios(by, ds, v)
            if v in SCG_VARIANTS and len(per_rep) > 1:
                rs_sp, rs_no = [p[0] for p in per_rep], [p[1] for p in per_rep]
                rng = f" (per rep {min(rs_sp):.2f}–{max(rs_sp):.2f} / {min(rs_no):.2f}–{max(rs_no):.2f})"
            batch_s = [b for x in rs for b in x.get("batch_s", [])]
            batch = f"{statistics.median(batch_s):.2f}" if batch_s else ""
            commits = [c for x in rs for c in x.get("delta_commit_s", [])]
            commit = f"{statistics.median(commits):.3f}" if v in SCG_VARIANTS and commits else ""
            batches = "/".join(sorted({str(x["batches"]) for x in rs})) if not v.startswith("raw") else ""
            lines.append(f"| {ds} | {NAMES[v]} | {len(secs)} | {med[v]:.1f}{spread} | {rate:,.0f} | {mbs:.1f} | "
                         f"{cpu} | {_x(got['spark'])} | {_x(got['noop'])}{rng} | {_x(got['raw2'])} | "
                         f"{batches} | {batch} | {commit} |")
    return lines, ratios


def _rep(run) -> int | None:
    """The repetition of a local run, from its label (``200B-scg-r1``)."""
    match = re.search(r"-r(\d+)$", run["label"])
    return int(match.group(1)) if match else None


def _per_rep_ratios(by, ds, variant):
    """Per repetition: (× plain Spark, × noop) of ``variant``, where the repetition has all three."""
    out = []
    reps = {_rep(x) for x in by.get((ds, variant), [])}
    for rep in sorted(r for r in reps if r is not None):
        pick = {v: next((x for x in by.get((ds, v), []) if _rep(x) == rep), None)
                for v in ("spark_delta", "noop", variant)}
        if all(pick.values()):
            out.append((pick["spark_delta"]["seconds"] / pick[variant]["seconds"],
                        pick["noop"]["seconds"] / pick[variant]["seconds"]))
    return out


def target_lines(ratios: dict) -> list[str]:
    """The targets next to the ratios: scg vs plain Spark and noop; the Arrow path vs plain Spark
    (per dataset) and vs the two-process raw ceiling."""
    def verdict(value, target):
        return "–" if value is None else ("met" if value >= target else "NOT met")
    out = []
    for d, per in ratios.items():
        if "scg" in per:
            r = per["scg"]
            out.append(f"- {d}, scg (Spark's Kafka source): {_x(r['spark'])}× plain Spark (target ≥ "
                       f"{TARGET_VS_SPARK}: {verdict(r['spark'], TARGET_VS_SPARK)}), {_x(r['noop'])}× noop "
                       f"(target ≥ {TARGET_VS_NOOP}: {verdict(r['noop'], TARGET_VS_NOOP)})")
        if "scg_follow" in per:
            r, target = per["scg_follow"], ARROW_TARGET_VS_SPARK.get(d)
            vs_spark = (f"{_x(r['spark'])}× plain Spark (target ≥ {target}: {verdict(r['spark'], target)})"
                        if target else f"{_x(r['spark'])}× plain Spark")
            out.append(f"- {d}, Arrow path: {vs_spark}, {_x(r['noop'])}× noop, {_x(r['raw2'])}× the two-process "
                       f"raw ceiling (target ≥ {ARROW_TARGET_VS_RAW}: {verdict(r['raw2'], ARROW_TARGET_VS_RAW)})")
        if "scg_sql" in per:
            r = per["scg_sql"]
            out.append(f"- {d}, Spark SQL path (scg-kafka + transform): {_x(r['spark'])}× plain Spark, "
                       f"{_x(r['noop'])}× noop")
    return out


THROUGHPUT_HEADER = ["| dataset | variant | reps | seconds, median (min–max) | records/s | MB/s of values | "
                     "CPU s per M records | × plain Spark | × noop | × raw ceiling, 2 processes | batches | "
                     "median batch s | median Delta commit s |",
                     "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


def phase_lines(runs: list[dict]) -> list[str]:
    """Where this path's time goes: bench timers summed over the batches, mean over repetitions."""
    by: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in runs:
        if r["variant"] in SCG_VARIANTS:
            by[(_dataset(r), r["variant"])].append(r)
    plain: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        if r["variant"] == "spark_delta":
            plain[_dataset(r)].append(r)
    out = []
    shown: set[str] = set()
    for (ds, variant), rs in sorted(by.items(), key=lambda kv: (kv[0][0], SCG_VARIANTS.index(kv[0][1]))):
        total = statistics.mean(r["seconds"] for r in rs)
        phases: dict[str, float] = defaultdict(float)
        for r in rs:
            for k, v in r["phases_s"].items():
                phases[k] += v / len(rs)
        spark_ph: dict[str, float] = defaultdict(float)
        for r in rs:
            for k, v in r.get("spark_phases_s", {}).items():
                spark_ph[k] += v / len(rs)
        join = statistics.mean(r["join_and_claim_s"] for r in rs)
        out += [f"**{ds}** — {NAMES[variant]}, mean of {len(rs)} run(s): {total:.1f} s from `run()` to the "
                f"last commit, of which join + claim + start offsets {join:.1f} s", "",
                "| phase | seconds | share |", "|---|---:|---:|"]
        for k, v in sorted(phases.items(), key=lambda kv: -kv[1]):
            if k == "foreach_batch_total":
                continue
            out.append(f"| {k} | {v:.2f} | {v / total:.0%} |")
        fb = phases.get("foreach_batch_total", 0.0)
        named = sum(v for k, v in phases.items() if k != "foreach_batch_total")
        out.append(f"| (rest of foreachBatch: classification plan, commit decisions, hooks) | {fb - named:.2f} | "
                   f"{(fb - named) / total:.0%} |")
        trig, add = spark_ph.get("triggerExecution", 0.0), spark_ph.get("addBatch", 0.0)
        out.append(f"| Spark outside foreachBatch (offsets, planning, WAL, commit log) | {trig - add:.2f} | "
                   f"{(trig - add) / total:.0%} |")
        out.append(f"| outside batches (join, query start, stop detection) | {total - trig:.2f} | "
                   f"{(total - trig) / total:.0%} |")
        if plain.get(ds) and ds not in shown:
            shown.add(ds)
            p = plain[ds]
            ptot = statistics.mean(r["seconds"] for r in p)
            padd = statistics.mean(r["spark_phases_s"].get("addBatch", 0) for r in p)
            ptrig = statistics.mean(r["spark_phases_s"].get("triggerExecution", 0) for r in p)
            out += ["", f"plain Spark → delta-spark, same dataset: {ptot:.1f} s; addBatch (read + parse + "
                    f"Parquet + Delta commit) {padd:.1f} s, rest of the triggers {ptrig - padd:.1f} s, "
                    f"outside batches {ptot - ptrig:.1f} s"]
        out.append("")
    return out


def memory_lines(cases: list[dict]) -> list[str]:
    out = ["| master | batch: records | ≈ value bytes | batch s | Delta commit s | driver Python peak RSS "
           "(session up → end) | driver JVM peak RSS (session up → end) | JVM heap peak: all pools / old gen | "
           "driver max heap |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cases:
        if not c.get("runs"):
            out.append(f"| {c['master']} | {c['batch_records']:,} | failed: {c.get('error', '?')[:200]!r} |")
            continue
        r = c["runs"][0]
        records = (r.get("batch_records") or [0])[0]
        before, after = c["memory_before"], c.get("memory_after", c["memory_before"])
        heap = sum(c.get("jvm_heap_peaks", {}).values())
        old = sum(v for k, v in c.get("jvm_heap_peaks", {}).items() if "Old" in k or "Tenured" in k)
        out.append(f"| {c['master']} | {records:,} | {records * (r.get('value_bytes') or 1000) / 1e6:,.0f} MB | "
                   f"{(r.get('batch_s') or [0])[0]:.1f} | {(r.get('delta_commit_s') or [0])[0]:.3f} | "
                   f"{_mb(before['python_hwm'])} → {_mb(after['python_hwm'])} | "
                   f"{_mb(before['jvm_hwm'])} → {_mb(after['jvm_hwm'])} | {_mb(heap)} / {_mb(old)} | "
                   f"{_mb(c.get('driver_max_heap', 0))} |")
    return out


def markdown(results: dict) -> str:
    ds = results.get("datasets", {})
    desc = ", ".join(f"{d['records']:,} × {d['mean_value_bytes']:.0f} B ({name})" for name, d in ds.items())
    lines = [f"# End-to-end benchmark: {results['partitions']} partitions, {results['cpu_count']} cores",
             "", f"Datasets: {desc}. One broker, one run; every ratio is against baselines measured in the "
             f"same run. `maxOffsetsPerTrigger` {results['max_offsets_per_trigger']:,} for every variant "
             "(the project's default). Load average at start "
             f"{', '.join(f'{x:.1f}' for x in results.get('load_average_start', ()))}"
             + (f", at end {', '.join(f'{x:.1f}' for x in results['load_average_end'])}"
                if results.get("load_average_end") else "")
             + " (the machine is shared: other jobs ran meanwhile)."
             + (f" Wall time {results['wall_s'] / 60:.1f} min." if results.get("wall_s") else ""), "",
             f"Command: `{results.get('command') or '.venv/bin/python bench/bench_e2e.py'}` (defaults: `--reps 2`, "
             "standalone on the 200B dataset only, to keep the run short).", ""]
    local = results.get("local")
    if local and local.get("runs"):
        rows, ratios = throughput_rows(local["runs"], ds)
        lines += [f"## Throughput on local[2] ({results['reps']} interleaved repetitions, order rotated)", "",
                  *THROUGHPUT_HEADER, *rows, ""]
        lines += target_lines(ratios)
        lines += ["", "Seconds: plain queries from `start()` to `awaitTermination()`; this project's variants from "
                  "`PipelineRunner.run()` (group join, table claims included) to the last batch's Delta + Kafka "
                  "commit; the raw ceiling from its first worker's start to its last one's end (imports "
                  "excluded). MB/s counts record values. × columns compare throughput (inverse ratio of the "
                  "median seconds). CPU s per M records: user + system CPU over the same span, of the whole "
                  "driver process tree for Spark variants (driver Python, the JVM that on local[2] also runs "
                  "the tasks, the Python workers), of the worker processes for the raw ceiling; the broker's "
                  "CPU is not counted. Delta commit = `BatchReport.commit_s` (the "
                  "`create_write_transaction` of both tables, files excluded). The raw ceiling runs after the "
                  "Spark drivers exit, `--reps` times per dataset. Per repetition the variants whose records "
                  "pass through the JVM share one driver process (their order rotates) and the Arrow path runs "
                  "in one of its own, started as `scg run` starts it (C1 only: no record enters its JVM).", ""]
        if local.get("error"):
            lines += [f"Local part failed: {local['error'][:500]}", ""]
        lines += ["## Where the time of this project's batches goes (local[2])", "", *phase_lines(local["runs"])]
    mem = list(results.get("memory_local", []))
    for part in results.get("standalone", []):
        mem += part.get("memory", [])
    if mem:
        lines += ["## Driver memory: ~100 MB batch vs ~1 GB batch (this path)", "",
                  "`spark.driver.maxResultSize=32m`, Spark's default driver heap; each case is a fresh driver "
                  "process processing one batch. Peak RSS = VmHWM of /proc/<pid>/status. On local[2] the "
                  "driver JVM also runs the tasks (Kafka read, parse, the write tasks' Arrow transfer); on the standalone "
                  "master it only drives (executors are separate JVMs, 1 GB each).", "",
                  *memory_lines(mem), "",
                  "Batch seconds here include a cold start (fresh driver, executors and Python workers, no "
                  "warm-up). \"session up\" is after the SparkSession started, before the pipeline; the Python "
                  "growth from there is the imports and objects of the runner, the same for both batch sizes.", ""]
    for part in results.get("standalone", []):
        if not part.get("runs"):
            lines += [f"Standalone with {part['workers']} worker(s) failed: {part.get('error', '')[:500]}", ""]
            continue
        rows, ratios = throughput_rows(part["runs"], ds)
        lines += [f"## Throughput on a standalone master, {part['workers']} worker(s) × 1 core, "
                  f"{part['settings']['spark.executor.memory']} executor (1 run each)", "",
                  *THROUGHPUT_HEADER, *rows, ""]
        lines += [f"- {d}, {NAMES[v]}: {_x(r['spark'])}× plain Spark, {_x(r['noop'])}× noop"
                  for d, per in ratios.items() for v, r in per.items() if v in SCG_VARIANTS] + [""]
    if results.get("profile"):
        lines += profile_lines(results["profile"])
    if results.get("handoff_seconds") is not None:
        lines += [f"- hand-off (member leaves → its partitions flow in the other member): "
                  f"{results['handoff_seconds']:.1f}s", ""]
    return "\n".join(lines)


def profile_lines(p: dict) -> list[str]:
    """The step-by-step profile of bench/e2e_profile.py (a separate run), merged into the results."""
    med, rel = p["median_s"], p["x_noop_time"]
    out = [f"## One batch step by step (bench/e2e_profile.py, separate run: {p['records']:,} × "
           f"{p['value_bytes']} B records, local[2], median of {p['reps']})", "",
           "Each step is the Kafka source's batch read of the same topic, timed alone.", "",
           "| step | seconds | × noop time |", "|---|---:|---:|"]
    out += [f"| {k} | {v:.1f} | {rel[k]:.2f} |" for k, v in med.items()]
    out += [""] + [f"- {k}: {v:.1f} s" for k, v in p.get("scg_jobs_s", {}).items()] + [""]
    return out
