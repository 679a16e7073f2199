"""Data-file benchmark (not a test): one Spark task's share of a small micro-batch, one Parquet file
of 200 records written by ``DataFileWriter`` in this process, on a local table and on s3proxy (a
real S3-compatible server on loopback, plain HTTP). Two ways, alternating in the same run:

* ``kept``: the writer's way, the process keeps the table's file system
  (``sinks.table_file_systems.FILE_SYSTEMS``) and the file's size is what the stream wrote;
* ``new``: as before 2026-11-24, a new file system per task (a new object-store client) and one
  request for the file's size after it is written.

    .venv/bin/python bench/bench_file_writes.py [--files 60]

Writes bench/results/file_writes.json and bench/results/file_writes.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pyarrow as pa  # noqa: E402

from git_commit import short_commit  # noqa: E402
from sinks import data_files  # noqa: E402
from sinks.data_files import DataFile, DataFileWriter  # noqa: E402
from sinks.table_file_systems import TableFileSystems  # noqa: E402
from tests.support.s3_server import S3Server  # noqa: E402

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("v", pa.string())])
RECORDS = 200
SKIP = 4  # first files of each way left out


class NewPerTask(TableFileSystems):
    """The way before: every task made its own file system."""

    def get(self, table_uri, storage_options):
        return TableFileSystems().get(table_uri, storage_options)


def close_asking_the_size(self, values) -> DataFile:
    """``_OpenFile.close`` before: close, then ask the store for the file's size."""
    self._flush()
    self.writer.close()
    self.stream.close()
    size = self.fs.get_file_info(self.path).size
    return DataFile(self.path, int(size), values, self.stats.num_records, self.stats.to_json())


def write_files(table_uri: str, options: dict, files: int) -> dict[str, list[float]]:
    """``files`` one-file tasks, alternating kept / new; seconds per task."""
    rows = pa.table({"topic": ["t"] * RECORDS, "partition": [0] * RECORDS, "offset": list(range(RECORDS)),
                     "v": ["x" * 100] * RECORDS}, schema=SCHEMA)
    writer = DataFileWriter(table_uri, SCHEMA, storage_options=options)
    kept, new, close = data_files.FILE_SYSTEMS, NewPerTask(), data_files._OpenFile.close
    seconds: dict[str, list[float]] = {"kept": [], "new": []}
    for i in range(files):
        way = "kept" if i % 2 == 0 else "new"
        data_files.FILE_SYSTEMS = kept if way == "kept" else new
        data_files._OpenFile.close = close if way == "kept" else close_asking_the_size
        try:
            started = time.perf_counter()
            writer.write(rows.to_batches())
            seconds[way].append(time.perf_counter() - started)
        finally:
            data_files.FILE_SYSTEMS, data_files._OpenFile.close = kept, close
    return seconds


def summary(seconds: dict[str, list[float]]) -> dict[str, float]:
    medians = {way: statistics.median(values[SKIP:]) for way, values in seconds.items()}
    return {**{f"{way}_ms": value * 1000 for way, value in medians.items()},
            "kept_over_new": medians["kept"] / medians["new"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="scg-bench-file-writes-"))
    results: dict = {"records": RECORDS, "files": args.files, "cpu_count": os.cpu_count(),
                     "load_average_start": os.getloadavg(), "commit": short_commit(), "stores": {}}
    (work / "local").mkdir()
    results["stores"]["local disk"] = summary(write_files(str(work / "local"), {}, args.files))
    with S3Server(work / "s3") as s3:
        bucket = s3.make_bucket("bench-files")
        options = s3.delta_options()
        results["stores"]["s3proxy (loopback)"] = summary(write_files(f"s3://{bucket}/t", options, args.files))
    results["wall_s"] = time.monotonic() - began
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "file_writes.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "file_writes.md").write_text(markdown(results))
    print(markdown(results))


def markdown(results: dict) -> str:
    lines = ["# Data files: the table's file system kept by the process vs a new one per task", "",
             f"One Parquet file of {results['records']} records per task, {results['files']} tasks per store "
             f"alternating the two ways, medians without the first {SKIP} of each; {results['cpu_count']} CPUs "
             f"(load average {results['load_average_start'][0]:.1f} at the start), wall {results['wall_s']:.0f} s, "
             f"commit {results['commit']}. `new` is the way before: a new object-store client per task and a "
             "request for each file's size after it is written. s3proxy is plain HTTP on loopback: a real object "
             "store adds a TLS handshake to each new connection.", "",
             "| store | kept (ms) | new (ms) | kept / new |", "|---|---:|---:|---:|"]
    for store, row in results["stores"].items():
        lines.append(f"| {store} | {row['kept_ms']:.1f} | {row['new_ms']:.1f} | {row['kept_over_new']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
