"""One task of a one-pass micro-batch (pipelines.runtime.batch_writer._write_both_task), on Arrow
batches shaped like records.split_rows (no Spark): each record's row goes to the files of the
table whose struct is set, each table's plan decides what it keeps, and the task returns both
tables' file metadata, named by table."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from groupmgr.core import TopicPartition
from pipelines.runtime.batch_writer import PlannedWrite, _write_both_task
from pipelines.runtime.records import DEAD_LETTER, OUTPUT
from sinks.data_files import DataFileWriter, WrittenFiles

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
OUT = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.binary())])
DEAD = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.binary()),
                  ("reason", pa.string())])


def split_batch(records) -> pa.RecordBatch:
    """``records``: (partition, offset, reason or None); a record with a reason is a dead letter."""
    out = [None if reason else {"topic": "t", "partition": p, "offset": o, "value": b"v%d" % o}
           for p, o, reason in records]
    dead = [{"topic": "t", "partition": p, "offset": o, "value": b"v%d" % o, "reason": reason} if reason else None
            for p, o, reason in records]
    return pa.RecordBatch.from_arrays([pa.array(out, pa.struct(OUT)), pa.array(dead, pa.struct(DEAD))],
                                      names=[OUTPUT, DEAD_LETTER])


def tables(tmp_path):
    for name in ("dead", "out"):
        (tmp_path / name).mkdir(exist_ok=True)


def run_task(tmp_path, batches, dead_keep, out_keep):
    tables(tmp_path)
    dead = PlannedWrite(DataFileWriter(str(tmp_path / "dead"), DEAD), dead_keep)
    out = PlannedWrite(DataFileWriter(str(tmp_path / "out"), OUT), out_keep)
    metadata = [row for batch in _write_both_task(dead, out, iter(batches)) for row in batch.to_pylist()]
    return WrittenFiles.from_metadata(metadata, DEAD_LETTER), WrittenFiles.from_metadata(metadata, OUTPUT), metadata


def read(root, written: WrittenFiles) -> list[tuple]:
    tables = [pq.read_table(root / f.path) for f in written.files]
    return sorted((r["partition"], r["offset"]) for t in tables for r in t.to_pylist())


def test_each_record_goes_to_the_table_whose_row_it_has(tmp_path):
    batches = [split_batch([(0, 0, None), (0, 1, "null_value"), (1, 0, None)]),
               split_batch([(0, 2, None), (1, 1, "value_too_large")])]
    dead, out, metadata = run_task(tmp_path, batches, {T0: 0, T1: 0}, {T0: 0, T1: 0})
    assert read(tmp_path / "dead", dead) == [(0, 1), (1, 1)]
    assert read(tmp_path / "out", out) == [(0, 0), (0, 2), (1, 0)]
    assert (dead.rows_written, out.rows_written, dead.rows_skipped, out.rows_skipped) == (2, 3, 0, 0)
    assert {row["table"] for row in metadata} == {DEAD_LETTER, OUTPUT}
    reasons = pq.read_table(tmp_path / "dead" / dead.files[0].path)["reason"].to_pylist()
    assert sorted(reasons) == ["null_value", "value_too_large"]


def test_each_table_keeps_only_what_its_own_plan_keeps(tmp_path):
    """The dead-letter table already holds T0 (a replay: nothing kept); the output table keeps T0
    from offset 2 and none of T1."""
    batches = [split_batch([(0, 0, None), (0, 1, "null_value"), (0, 2, None), (0, 3, "null_value"), (1, 0, None)])]
    dead, out, _ = run_task(tmp_path, batches, {}, {T0: 2})
    assert dead.files == () and dead.rows_skipped == 2
    assert read(tmp_path / "out", out) == [(0, 2)] and out.rows_skipped == 2


def test_a_batch_with_no_dead_letter_writes_only_output_files(tmp_path):
    dead, out, metadata = run_task(tmp_path, [split_batch([(0, 0, None), (0, 1, None)])], {T0: 0}, {T0: 0})
    assert dead == WrittenFiles() and read(tmp_path / "out", out) == [(0, 0), (0, 1)]
    assert [row["table"] for row in metadata if row["path"] is None] == [DEAD_LETTER, OUTPUT]  # a skip count each


def test_a_failing_task_returns_no_metadata(tmp_path):
    """A task that fails part-way returns nothing: its files are never committed."""
    def batches():
        yield split_batch([(0, 0, None), (0, 1, "null_value")])
        raise OSError("the executor lost its disk")

    tables(tmp_path)
    dead = PlannedWrite(DataFileWriter(str(tmp_path / "dead"), DEAD), {T0: 0})
    out = PlannedWrite(DataFileWriter(str(tmp_path / "out"), OUT), {T0: 0})
    task = _write_both_task(dead, out, batches())
    with pytest.raises(OSError):
        next(task)
