"""bench/results/e2e.md from the results bench/bench_e2e.py collects (pure; no Spark, no Kafka)."""
from __future__ import annotations

import re
import statistics
from collections import defaultdict

NAMES = {"noop": "noop sink (read ceiling)", "spark_delta": "plain Spark → delta-spark sink",
         "scg": "spark-consumer-groups, 1 member, exactly-once"}
TARGET_VS_SPARK, TARGET_VS_NOOP = 1.2, 0.8


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _dataset(run) -> str:
    return "200B" if run["topic"].endswith("200b") else "1KB" if run["topic"].endswith("1kb") else run["topic"]


def throughput_rows(runs: list[dict], datasets: dict) -> tuple[list[str], dict]:
    """Markdown rows per (dataset, variant): median of the repetitions, ratios of the medians; and
    the ratios for the summary."""
    by: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in runs:
        by[(_dataset(r), r["variant"])].append(r)
    lines, ratios = [], {}
    for ds in ("200B", "1KB"):
        if (ds, "spark_delta") not in by:
            continue
        info = datasets.get(ds, {})
        med = {v: statistics.median(x["seconds"] for x in by[(ds, v)]) for v in NAMES if (ds, v) in by}
        per_rep = _per_rep_ratios(by, ds)
        for v in NAMES:
            if v not in med:
                continue
            rs = by[(ds, v)]
            secs = [x["seconds"] for x in rs]
            rate = rs[0]["records"] / med[v]
            mbs = rate * info.get("mean_value_bytes", rs[0].get("value_bytes") or 0) / 1e6
            spread = f" ({min(secs):.1f}–{max(secs):.1f})" if len(secs) > 1 else ""
            vs_spark, vs_noop = med["spark_delta"] / med[v], med["noop"] / med[v]
            rng = ""
            if v == "scg":
                ratios[ds] = (vs_spark, vs_noop)
                if len(per_rep) > 1:
                    rs_sp, rs_no = [p[0] for p in per_rep], [p[1] for p in per_rep]
                    rng = f" (per rep {min(rs_sp):.2f}–{max(rs_sp):.2f} / {min(rs_no):.2f}–{max(rs_no):.2f})"
            batch = statistics.median(b for x in rs for b in x.get("batch_s", [])) if any(
                x.get("batch_s") for x in rs) else float("nan")
            commit = statistics.median(c for x in rs for c in x.get("delta_commit_s", [])) if v == "scg" else None
            batches = "/".join(sorted({str(x["batches"]) for x in rs}))
            lines.append(f"| {ds} | {NAMES[v]} | {len(secs)} | {med[v]:.1f}{spread} | {rate:,.0f} | {mbs:.1f} | "
                         f"{vs_spark:.2f} | {vs_noop:.2f}{rng} | {batches} | {batch:.2f} | "
                         f"{'' if commit is None else f'{commit:.3f}'} |")
    return lines, ratios


def _rep(run) -> int | None:
    """The repetition of a local run, from its label (``200B-scg-r1``)."""
    match = re.search(r"-r(\d+)$", run["label"])
    return int(match.group(1)) if match else None


def _per_rep_ratios(by, ds):
    out = []
    reps = {_rep(x) for x in by.get((ds, "scg"), [])}
    for rep in sorted(r for r in reps if r is not None):
        pick = {v: next((x for x in by.get((ds, v), []) if _rep(x) == rep), None) for v in NAMES}
        if all(pick.values()):
            out.append((pick["spark_delta"]["seconds"] / pick["scg"]["seconds"],
                        pick["noop"]["seconds"] / pick["scg"]["seconds"]))
    return out


THROUGHPUT_HEADER = ["| dataset | variant | reps | seconds, median (min–max) | records/s | MB/s of values | "
                     "× plain Spark | × noop | batches | median batch s | median Delta commit s |",
                     "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


def phase_lines(runs: list[dict]) -> list[str]:
    """Where this path's time goes: bench timers summed over the batches, mean over repetitions."""
    by: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        if r["variant"] == "scg":
            by[_dataset(r)].append(r)
    plain: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        if r["variant"] == "spark_delta":
            plain[_dataset(r)].append(r)
    out = []
    for ds, rs in by.items():
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
        out += [f"**{ds}** — spark-consumer-groups, mean of {len(rs)} run(s): {total:.1f} s from `run()` to the "
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
        if plain.get(ds):
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
             "Command: `.venv/bin/python bench/bench_e2e.py` (defaults: `--reps 2`, standalone on the 200B "
             "dataset only, to keep the run short).", ""]
    local = results.get("local")
    if local and local.get("runs"):
        rows, ratios = throughput_rows(local["runs"], ds)
        lines += [f"## Throughput on local[2] ({results['reps']} interleaved repetitions, order rotated)", "",
                  *THROUGHPUT_HEADER, *rows, ""]
        for d, (vs_spark, vs_noop) in ratios.items():
            ok_s = "met" if vs_spark >= TARGET_VS_SPARK else "NOT met"
            ok_n = "met" if vs_noop >= TARGET_VS_NOOP else "NOT met"
            lines.append(f"- {d}: {vs_spark:.2f}× plain Spark (target ≥ {TARGET_VS_SPARK}: {ok_s}), "
                         f"{vs_noop:.2f}× noop (target ≥ {TARGET_VS_NOOP}: {ok_n})")
        lines += ["", "Seconds: plain queries from `start()` to `awaitTermination()`; this path from "
                  "`PipelineRunner.run()` (group join, table claims included) to the last batch's Delta + Kafka "
                  "commit. MB/s counts record values. Delta commit = `BatchReport.commit_s` (the "
                  "`create_write_transaction` of both tables, files excluded).", ""]
        if local.get("error"):
            lines += [f"Local part failed: {local['error'][:500]}", ""]
        lines += ["## Where this path's time goes (local[2])", "", *phase_lines(local["runs"])]
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
        lines += [f"- {d}: {a:.2f}× plain Spark, {b:.2f}× noop" for d, (a, b) in ratios.items()] + [""]
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
