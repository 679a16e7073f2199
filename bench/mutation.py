"""Mutation testing of the core decision code with mutmut (run through ``bin/mutation``).

Copies the project's sources and tests into ``.scg/mutation/work`` (mutmut writes its ``mutants/``
tree and reads its ``[mutmut]`` settings there, so the repository is left alone), runs
``mutmut run`` against the fast tests, then writes ``bench/results/mutation.json`` and
``bench/results/mutation.md``.

Score = detected / (detected + undetected), where detected = killed + timeout and undetected =
survived + no tests; a surviving mutant justified in ``bench/mutation_equivalents.toml`` (an
equivalent mutant: no test can tell it from the original) counts as neither, and is listed with its
reason. A justification names the mutant and a line of its diff; when the source changes so that
the line no longer matches, the justification is reported stale and the mutant counts as survived.
"""
from __future__ import annotations

import argparse
import ast
import configparser
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

# What is mutated: the core decision code. Each module is mutated against the fast tests;
# mutmut picks, per mutated function, only the tests that call it.
MODULES = (
    "groupmgr/assignors/api.py",
    "groupmgr/assignors/range.py",
    "groupmgr/assignors/roundrobin.py",
    "groupmgr/assignors/sticky.py",
    "groupmgr/assignors/validate.py",
    "groupmgr/heartbeat.py",
    "groupmgr/member_loop.py",
    "groupmgr/rebalance.py",
    "groupmgr/core/offset_range.py",
    "sinks/txn_table.py",
    "sinks/upsert_table.py",
    "sinks/schema_widening.py",
    "pipelines/runtime/start_offsets.py",
    "pipelines/runtime/checkpoint_log.py",
    "pipelines/runtime/batch_writer.py",
    "pipelines/runtime/partition_checks.py",
    "pipelines/runtime/records.py",
    "pipelines/runtime/arrow_records.py",
    "pipelines/config/secrets.py",
    "pipelines/runtime/runner.py",
    "pipelines/runtime/query_supervisor.py",
    "pipelines/runtime/reader_modes.py",
    "pipelines/runtime/owned_partitions.py",
    "pipelines/runtime/warm_up.py",
    "pipelines/runtime/membership.py",
    "pipelines/runtime/member_probes.py",
    "pipelines/runtime/metrics.py",
    "pipelines/runtime/schema_follower.py",
)
# The fast tests: no Kafka broker, no Spark (the Delta-only sink tests run on deltalake). The config
# and CLI tests exercise layers that are not mutated; leaving them out keeps the baseline run short
# and independent of work in progress there. The docs tests compare docs/ and README.md, which the
# work copy does not hold, with the code; they decide nothing a mutant could change. The tests that
# run a Spark query are left out like the delta-spark read-back.
TESTS = ("tests/unit", "tests/integration/test_txn_table.py", "tests/integration/test_table_schema_evolution.py",
         "tests/integration/test_schema_follower.py", "tests/integration/test_upsert_table.py",
         "--deselect=tests/integration/test_table_schema_evolution.py::"
         "test_delta_spark_reads_a_nested_field_older_files_lack_as_null",
         "--deselect=tests/integration/test_txn_table.py::test_table_reads_the_same_through_delta_spark",
         "--deselect=tests/unit/test_local_checkpoint_manager.py::test_a_query_checkpoints_through_the_chosen_manager",
         "--ignore-glob=tests/unit/test_config*.py", "--ignore=tests/unit/test_cli_arguments.py",
         "--ignore=tests/unit/test_kafka_node_config.py", "--ignore-glob=tests/unit/test_docs_*.py",
         "--ignore=tests/unit/test_scg_wrapper_paths.py",  # runs bin/scg, which the work tree has not
         "--ignore=tests/unit/test_yaml_limits.py")  # the config layer; its YAML loader differs in mutmut's venv
# Functions that only build Spark plans (need a JVM, so no fast test can run them): their mutants are
# counted apart, as out of scope. Of pipelines/runtime/records.py only the pure parts count: the
# dead-letter rule (reason_rules, dead_letter_reason, RecordFacts) and kafka_row_ddl.
SPARK_ONLY = ("pipelines.runtime.batch_writer.xǁBatchWriterǁ_prepare__mutmut_",
              "pipelines.runtime.runner.xǁPipelineRunnerǁopen__mutmut_",
              "pipelines.runtime.reader_modes.xǁRestartingQueryǁstart__mutmut_",
              "pipelines.runtime.reader_modes.xǁFollowingQueryǁ_start_query__mutmut_",
              "pipelines.runtime.reader_modes.xǁFollowingQueryǁregistered__mutmut_",
              "pipelines.runtime.reader_modes.x_reader_mode__mutmut_",
              "pipelines.runtime.warm_up.xǁSourceWarmUpǁ",
              "pipelines.runtime.warm_up.xǁInQueryWarmUpǁ",
              "pipelines.runtime.warm_up.xǁWarmUpContextǁmade_up__mutmut_",
              "pipelines.runtime.batch_writer.xǁSparkRowsǁwrite__mutmut_",
              "pipelines.runtime.batch_writer.x__write_task__mutmut_",
              "pipelines.runtime.batch_writer.x_apply_transform__mutmut_",
              "pipelines.runtime.batch_writer.xǁSparkBatchǁ",
              "pipelines.runtime.batch_writer.x__with_decisions__mutmut_",
              "pipelines.runtime.batch_writer.x_without_partitions__mutmut_",
              "pipelines.runtime.batch_writer.x_warm_up__mutmut_",
              "pipelines.runtime.batch_writer.x_warm_up_batch__mutmut_",
              "pipelines.runtime.records.xǁRecordColumnsǁ",
              "pipelines.runtime.records.xǁ_SparkFactsǁ",
              "pipelines.runtime.records.x_record_columns__mutmut_",
              "pipelines.runtime.records.x__record_columns__mutmut_",
              "pipelines.runtime.records.x_classify__mutmut_",
              "pipelines.runtime.records.x__reason__mutmut_",
              "pipelines.runtime.records.x_good_rows__mutmut_",
              "pipelines.runtime.records.x__output_columns__mutmut_",
              "pipelines.runtime.records.x_key_text__mutmut_",
              "pipelines.runtime.records.x_dead_letters__mutmut_",
              "pipelines.runtime.records.x__dead_letter_columns__mutmut_",
              "pipelines.runtime.records.x_split_rows__mutmut_")
# Property tests run this many Hypothesis examples per property under mutation (100 in bin/test):
# a broken assignor fails within a few examples, and every mutant re-runs these tests.
HYPOTHESIS_EXAMPLES = 10
# Lines never mutated: logging only (no decision is taken on a log line).
DO_NOT_MUTATE = (r"^\s*log\.(debug|info|warning|error|exception)\(",)
COPY = ("groupmgr", "sinks", "pipelines", "tests", "conf")
DETECTED = ("killed", "timeout")
UNDETECTED = ("survived", "no tests")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--max-children", type=int, default=2,
                        help="parallel mutant runs (default 2: the machine has 2 cores)")
    parser.add_argument("--only", action="append", default=[],
                        help="mutate only this module (repeatable); the report covers just these")
    parser.add_argument("--resume", action="store_true",
                        help="keep the last run's results: take sources and tests of --tree again, "
                             "test the mutants not yet checked (or changed), and re-test every survivor "
                             "not justified as equivalent")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild the report from the last run in .scg/mutation/work")
    parser.add_argument("--tree", default="HEAD",
                        help="git commit to test (default HEAD: committed code only, so edits in "
                             "progress do not count); '' tests the working tree")
    parser.add_argument("--min-score", type=float, default=0.90)
    parser.add_argument("--note", default="", help="a line for the report (e.g. how the run went)")
    args = parser.parse_args()
    root = args.root.resolve()
    modules = tuple(args.only) or MODULES
    unknown = [m for m in modules if not (root / m).is_file()]
    if unknown:
        parser.error(f"no such module: {', '.join(unknown)}")
    work = root / ".scg" / "mutation" / "work"
    resumed = args.resume and (work / "mutants").is_dir()
    if not args.report_only:
        if resumed:
            refresh(root, work, args.tree)
        else:
            prepare(root, work, modules, args.tree)
        started = time.monotonic()
        code = mutmut(work, ["run", "--max-children", str(args.max_children)], "a" if resumed else "w")
        if code == 0 and resumed:
            justified = {e["mutant"] for e in load_equivalents(root)}
            again = [n for module, per in load_results(work, modules).items() for n, s in per.items()
                     if s not in DETECTED and not n.startswith(SPARK_ONLY) and n not in justified
                     and not message_only(work, module, n)]
            for i in range(0, len(again), 200):
                code = code or mutmut(work, ["run", "--max-children", str(args.max_children), *again[i:i + 200]], "a")
        elapsed = time.monotonic() - started
        total = elapsed + (float((work / "wall_s").read_text()) if resumed and (work / "wall_s").exists() else 0.0)
        (work / "wall_s").write_text(str(round(total, 1)))
        with open(work / "commands", "a") as f:  # every sitting whose results the report covers
            f.write(command_line(sys.argv[1:]) + "\n")
        if code != 0:
            print((work / "mutmut.log").read_text()[-3000:], file=sys.stderr)
            print(f"mutation: mutmut run failed with exit code {code}", file=sys.stderr)
            return code
    wall_s = float((work / "wall_s").read_text()) if (work / "wall_s").exists() else None
    report = build_report(root, work, modules, wall_s, args.max_children)
    report["note"] = args.note
    out = root / "bench" / "results"
    if tuple(args.only):
        out = work / "partial-results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "mutation.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    (out / "mutation.md").write_text(markdown(report))
    print(markdown_summary(report))
    print(f"mutation: wrote {out / 'mutation.json'} and {out / 'mutation.md'}")
    return 0 if report["score"] >= args.min_score and not report["unjustified_survivors"] else 1


def command_line(argv: list[str]) -> str:
    """``bin/mutation`` with the options of this sitting (not --root, which bin/mutation adds, nor --note)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--root", "--note"):
            skip = True
        elif not arg.startswith(("--root=", "--note=")):
            kept.append(arg)
    return shlex.join(["bin/mutation", *kept])


# -- the work directory -----------------------------------------------------------------------
def mutmut(work: Path, args: list[str], mode: str) -> int:
    log = work / "mutmut.log"
    print(f"mutation: mutmut {' '.join(args[:3])}{' ...' if len(args) > 3 else ''}; progress in {log}", flush=True)
    with open(log, mode) as out:
        return subprocess.run([sys.executable, "-m", "mutmut", *args], cwd=work, stdout=out,
                              stderr=subprocess.STDOUT).returncode


def extract(root: Path, work: Path, tree: str, names: tuple[str, ...]) -> str:
    """Copy ``names`` of commit ``tree`` (or of the working tree when empty) into ``work``."""
    if tree:
        commit = git(root, "rev-parse", "--verify", tree + "^{commit}")
        archive = subprocess.run(["git", "-C", str(root), "archive", commit, *names],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
        return commit
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in names:
        shutil.copytree(root / name, work / name, ignore=ignore, symlinks=True, dirs_exist_ok=True)
    return "working tree"


def fewer_examples(work: Path) -> None:
    path = work / "tests" / "unit" / "test_assignor_properties.py"
    if path.exists():
        path.write_text(path.read_text().replace("max_examples=100", f"max_examples={HYPOTHESIS_EXAMPLES}"))


def refresh(root: Path, work: Path, tree: str) -> None:
    """--resume: sources and tests of ``tree`` replace the copied ones. mutmut keeps the results of
    every function whose source is unchanged, makes new mutants of changed ones, and collects
    test stats for new tests; the survivors are re-tested afterwards."""
    for name in COPY:
        shutil.rmtree(work / name)
    copied = extract(root, work, tree, COPY)
    fewer_examples(work)
    (work / "copied_from").write_text(copied)

def prepare(root: Path, work: Path, modules: tuple[str, ...], tree: str) -> str:
    """A fresh copy of sources + tests (of git commit ``tree``, or of the working tree when it is
    empty) and a setup.cfg with the project's settings (pytest's, and the entry points a test
    reads) plus the mutmut settings. Every run starts clean: no stale mutant results. Returns what
    was copied (a commit or "working tree")."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    copied = extract(root, work, tree, COPY)
    if tree:
        (work / "setup.cfg").write_text(git(root, "show", f"{copied}:setup.cfg") + "\n")
    else:
        shutil.copy(root / "setup.cfg", work / "setup.cfg")
    fewer_examples(work)
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(work / "setup.cfg")
    cfg["mutmut"] = {
        "source_paths": "\n" + "\n".join(("groupmgr", "sinks", "pipelines")),
        "only_mutate": "\n" + "\n".join(modules),
        "also_copy": "\nconf",
        "pytest_add_cli_args_test_selection": "\n" + "\n".join(TESTS),
        "pytest_add_cli_args": "\n-p\nno:cacheprovider",
        "do_not_mutate_patterns": "\n" + "\n".join(DO_NOT_MUTATE),
        "use_git_change_detection": "false",
        # Each mutant's tests run in a process forked from a server that has run no test: a process
        # forked after deltalake started its tokio runtime cannot use deltalake (it panics on the
        # new pid), so with mutmut's default every test writing a Delta table failed in every
        # mutant's process and the mutant counted as killed.
        "process_isolation": "forkserver",
    }
    with open(work / "setup.cfg", "w") as f:
        cfg.write(f)
    (work / "copied_from").write_text(copied)
    return copied


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


# -- the report --------------------------------------------------------------------------------
def load_results(work: Path, modules: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """module path -> {mutant name: status}."""
    from mutmut.stats import status_by_exit_code

    results = {}
    for module in modules:
        meta = work / "mutants" / (module + ".meta")
        data = json.loads(meta.read_text()) if meta.exists() else {}
        results[module] = {name: status_by_exit_code[code]
                           for name, code in sorted(data.get("exit_code_by_key", {}).items())}
    return results


def mutant_diffs(work: Path, names: list[str]) -> dict[str, str]:
    """The unified diff of each named mutant, as ``mutmut show`` prints it."""
    if not names:
        return {}
    code = ("import json, sys\nfrom mutmut.__main__ import find_mutant, get_diff_for_mutant\n"
            "out = {}\nfor name in sys.argv[1:]:\n"
            "    try:\n"
            "        out[name] = get_diff_for_mutant(name, path=find_mutant(name).path)\n"
            "    except Exception as exc:\n"
            "        out[name] = f'(no diff: {exc!r})'\n"
            "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", code, *names], cwd=work, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def changed_lines(diff: str) -> list[str]:
    return [line for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


MESSAGE_RULE = ("message text only: the mutant changes nothing but the human-readable text of an error "
                "(docs/DESIGN.md, Errors: tests match conditions and types, never message text)")


def message_only(work: Path, module: str, name: str) -> bool:
    """True when mutant ``name`` differs from the original only in the text of string literals
    inside an error's message (not in dropping it): the arguments of a ``raise``, or the ``__init__`` of an ``...Error`` class (which only
    stores fields and formats the message). Decided on the ASTs of the generated functions."""
    dotted = module[:-3].replace("/", ".")
    func = name[len(dotted) + 1:]
    orig = re.sub(r"__mutmut_\d+$", "__mutmut_orig", func)
    tree = ast.parse((work / "mutants" / module).read_text())
    defs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if func not in defs or orig not in defs:
        return False
    parts = func.split("ǁ")
    errors = {c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
              and (c.name.endswith(("Error", "Exception"))
                   or any(isinstance(b, ast.Name) and b.id.endswith(("Error", "Exception")) for b in c.bases))}
    in_error_init = len(parts) == 3 and parts[1] in errors and parts[2].startswith("__init__")
    differences: list[tuple[object, object, bool]] = []
    _compare(defs[orig].body, defs[func].body, in_error_init, differences)
    return bool(differences) and all(ctx and _texty(a) and _texty(b) for a, b, ctx in differences)


def _texty(node: object) -> bool:
    """Message text: a string literal or f-string (a message dropped for None is not just text)."""
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _compare(a: object, b: object, ctx: bool, out: list) -> None:
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append((a, b, ctx))
            return
        for x, y in zip(a, b):
            _compare(x, y, ctx, out)
    elif isinstance(a, ast.AST) and type(a) is type(b):
        if isinstance(a, ast.Constant):
            if a.value != b.value or type(a.value) is not type(b.value):
                out.append((a, b, ctx))
            return
        for field in a._fields:
            inner = ctx or (isinstance(a, ast.Raise) and field == "exc")
            _compare(getattr(a, field), getattr(b, field), inner, out)
    elif a != b:
        out.append((a, b, ctx))


def load_equivalents(root: Path) -> list[dict]:
    path = root / "bench" / "mutation_equivalents.toml"
    return tomllib.loads(path.read_text()).get("equivalent", []) if path.exists() else []


def build_report(root: Path, work: Path, modules: tuple[str, ...], wall_s: float | None,
                 max_children: int) -> dict:
    results = load_results(work, modules)
    spark_only = Counter()
    for module, per in results.items():
        for name in [n for n in per if n.startswith(SPARK_ONLY)]:
            spark_only[module] += 1
            del per[name]
    not_detected = [name for per in results.values() for name, s in per.items() if s not in DETECTED]
    diffs = mutant_diffs(work, not_detected)
    justified, stale = {}, []
    for entry in load_equivalents(root):
        name = entry["mutant"]
        lines = changed_lines(diffs.get(name, ""))
        if name in diffs and any(entry["line"].strip() in line for line in lines):
            justified[name] = entry["reason"]
        elif any(name in per for per in results.values()):
            stale.append({"mutant": name, "why": "killed now or its diff changed; update the entry"
                          if name in diffs else "killed now: remove the entry"})
    for module, per in results.items():
        for name, status in per.items():
            if status not in DETECTED and name not in justified and message_only(work, module, name):
                justified[name] = MESSAGE_RULE
    rows, totals = [], Counter()
    survivors, equivalents = [], []
    for module, per in results.items():
        counts = Counter(per.values())
        equivalent = sum(1 for name in per if name in justified)
        detected = sum(counts[s] for s in DETECTED)
        undetected = sum(counts[s] for s in UNDETECTED) - equivalent
        other = len(per) - detected - undetected - equivalent
        scored = detected + undetected
        rows.append({"module": module, "mutants": len(per), "killed": counts["killed"],
                     "timeout": counts["timeout"], "survived": counts["survived"],
                     "no_tests": counts["no tests"], "equivalent": equivalent, "other": other,
                     "score": round(detected / scored, 4) if scored else None})
        totals.update({"mutants": len(per), "killed": counts["killed"], "timeout": counts["timeout"],
                       "survived": counts["survived"], "no_tests": counts["no tests"],
                       "equivalent": equivalent, "other": other})
        for name, status in per.items():
            if status in DETECTED:
                continue
            entry = {"mutant": name, "status": status, "diff": changed_lines(diffs.get(name, ""))}
            if name in justified:
                equivalents.append({**entry, "reason": justified[name]})
            else:
                survivors.append(entry)
    detected = totals["killed"] + totals["timeout"]
    sittings = (work / "commands").read_text().splitlines() if (work / "commands").exists() else []
    scored = detected + totals["survived"] + totals["no_tests"] - totals["equivalent"]
    return {
        "tool": f"mutmut {version('mutmut')}",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, {platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "tested": (work / "copied_from").read_text() if (work / "copied_from").exists() else None,
        "command": sittings[-1] if sittings else "bin/mutation" + (f" --max-children {max_children}" if max_children != 2 else ""),
        "sittings": sittings,
        "tests": list(TESTS),
        "modules": list(modules),
        "mutants": totals["mutants"],
        "killed": totals["killed"],
        "survived": totals["survived"] + totals["no_tests"] - totals["equivalent"],
        "timeout": totals["timeout"],
        "equivalent": totals["equivalent"],
        "other": totals["other"],
        "score": round(detected / scored, 4) if scored else 0.0,
        "score_counting_equivalents_as_survived": round(detected / (scored + totals["equivalent"]), 4)
        if scored + totals["equivalent"] else 0.0,
        "out_of_scope_spark_only": sum(spark_only.values()),
        "hypothesis_examples": HYPOTHESIS_EXAMPLES,
        "wall_s": wall_s,
        "max_children": max_children,
        "per_module": rows,
        "unjustified_survivors": survivors,
        "equivalent_mutants": equivalents,
        "stale_justifications": stale,
    }


def version(dist: str) -> str:
    from importlib.metadata import version as v
    return v(dist)


def markdown_summary(report: dict) -> str:
    wall = f"{report['wall_s'] / 60:.1f} min" if report["wall_s"] else "n/a"
    return (f"mutation score {report['score']:.3f} ({report['killed']} killed, {report['timeout']} timeout, "
            f"{report['survived']} survived, {report['equivalent']} equivalent; {report['mutants']} mutants; "
            f"wall {wall} with {report['max_children']} workers)")


def markdown(report: dict) -> str:
    out = ["# Mutation testing", "",
           f"`{report['command']}` — {report['tool']}, {report['date']}, {report['machine']}.", "",
           *([f"Sittings recorded on this work directory ({len(report['sittings'])}; the results are theirs "
              "together): " + ", then ".join(f"`{c}`" for c in report["sittings"]) + ".", ""]
             if len(report.get("sittings", [])) > 1 else []),
           markdown_summary(report) + ".", "", *([report["note"], ""] if report.get("note") else []),
           "Score = (killed + timeout) / (killed + timeout + survived); equivalent mutants (justified in "
           "`bench/mutation_equivalents.toml`, or message text only) are left out. Tests: "
           + ", ".join(f"`{t}`" for t in report["tests"])
           + f"; property tests at {report['hypothesis_examples']} Hypothesis examples. Tested: {report['tested']}. "
           f"{report['out_of_scope_spark_only']} mutants of Spark-only functions "
           "(`BatchWriter._prepare`, `SparkBatch`, `SparkRows.write`, `_write_task`, `_with_decisions`, "
           "`without_partitions`, `apply_transform`, `warm_up`, `warm_up_batch`; in records.py the Spark column "
           "builders) are not counted: "
           "no fast test can run them.",
           "", "| module | mutants | killed | timeout | survived | equivalent | score |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for row in report["per_module"]:
        score = f"{row['score']:.3f}" if row["score"] is not None else "—"
        out.append(f"| `{row['module']}` | {row['mutants']} | {row['killed']} | {row['timeout']} | "
                   f"{row['survived'] + row['no_tests'] - row['equivalent']} | {row['equivalent']} | {score} |")
    out.append(f"| **all** | {report['mutants']} | {report['killed']} | {report['timeout']} | "
               f"{report['survived']} | {report['equivalent']} | **{report['score']:.3f}** |")
    for title, items in (("Surviving mutants (no test tells them apart yet)", report["unjustified_survivors"]),
                         ("Equivalent mutants", report["equivalent_mutants"])):
        out += ["", f"## {title}", ""]
        if not items:
            out.append("None.")
        for item in items:
            diff = "; ".join(f"`{line.strip()}`" for line in item["diff"] if line.startswith("+"))
            reason = f" — {item['reason']}" if "reason" in item else f" ({item['status']})"
            out.append(f"- `{item['mutant']}`: {diff}{reason}")
    if report["stale_justifications"]:
        out += ["", "## Stale justifications", ""]
        out += [f"- `{s['mutant']}`: {s['why']}" for s in report["stale_justifications"]]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
