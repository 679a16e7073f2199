"""What one micro-batch hands to its hooks, its source check, its report and its refusal callback,
and what each table receives in one pass or two (pipelines.runtime.batch_writer.BatchWriter), on
real Delta tables (deltalake on tmp_path); only the Spark part, the batch's rows, is stubbed with
an ArrowBatch."""
from __future__ import annotations

import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.batch_writer import (ArrowBatch, ArrowRows, BatchGate, BatchHooks, BatchWriter,
                                            DeadLetterDecisions, TableTargets)
from pipelines.runtime.partition_checks import SourceChanged
from pipelines.runtime.records import RecordFormat
from sinks.txn_table import FencedWriterError, TxnDeltaTable

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
OUT = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.binary())])
DEAD = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.binary()),
                  ("reason", pa.string())])


def out_rows(tp, offsets, reasons=None):
    table = pa.table({"topic": [tp.topic] * len(offsets), "partition": [tp.partition] * len(offsets),
                      "offset": list(offsets), "value": [b"v%d" % o for o in offsets]}, schema=OUT)
    return table.append_column("reason", pa.array(reasons or [None] * len(offsets), pa.string()))


def dead_rows(tp, offsets):
    return pa.table({"topic": [tp.topic] * len(offsets), "partition": [tp.partition] * len(offsets),
                     "offset": list(offsets), "value": [None] * len(offsets),
                     "reason": ["null_value"] * len(offsets)}, schema=DEAD)


def coordinates(table: TxnDeltaTable) -> list[tuple]:
    data = DeltaTable(table.path).to_pyarrow_table(columns=["topic", "partition", "offset"])
    return sorted(zip(*(data[c].to_pylist() for c in ("topic", "partition", "offset"))))


class CountedBatch(ArrowBatch):
    """An ArrowBatch that counts how its rows are written."""

    def __init__(self, records, dead_records, one_pass, writes):
        super().__init__(records, dead_records, one_pass)
        self.writes, self.in_one_pass = writes, False

    def write_both(self, dead, output):
        self.writes.append("one pass")
        self.in_one_pass = True
        try:
            return super().write_both(dead, output)
        finally:
            self.in_one_pass = False

    @property
    def dead(self):
        if not self.in_one_pass:
            self.writes.append("dead")
        return super().dead

    def output(self, decided, index=0):
        if not self.in_one_pass:
            self.writes.append("output")
        return super().output(decided)


@pytest.fixture
def targets(tmp_path):
    table = TxnDeltaTable(str(tmp_path / "out"), "orders", OUT)
    dead = TxnDeltaTable(str(tmp_path / "dead"), "orders", DEAD, count_by="reason")
    return TableTargets(table, dead, table.claim([T0, T1]), dead.claim([T0, T1]))


def writer_for(targets, planned, batch, one_pass=True, **kwargs):
    """A BatchWriter over ``planned`` ranges whose batches are ``batch`` = (output rows, dead letters)."""
    seen = {"prepared": [], "kafka": [], "reports": [], "refused": [], "writes": []}

    def prepare(batch_df, ranges, left_out, fmt):
        seen["prepared"].append(batch_df)
        return CountedBatch(batch[0], batch[1], one_pass, seen["writes"])

    writer = BatchWriter(RecordFormat("raw", None, 1024), None, targets, type("Log", (), {"ranges": lambda s, i: planned})(),
                         commit_kafka=lambda offsets, meta: seen["kafka"].append((offsets, meta)) or True,
                         report=seen["reports"].append, refused=lambda batch_id, err: seen["refused"].append((batch_id, err)),
                         prepare=prepare, **kwargs)
    return writer, seen


@pytest.mark.parametrize("one_pass", [True, False])
def test_hooks_the_source_check_and_the_report_see_the_batch(targets, monkeypatch, one_pass):
    calls, results = [], []
    real_commit = TxnDeltaTable.commit_files

    def commit_files(self, *args, **kwargs):
        results.append(real_commit(self, *args, **kwargs))
        return results[-1]

    monkeypatch.setattr(TxnDeltaTable, "commit_files", commit_files)
    hooks = BatchHooks(before_commit=lambda *a: calls.append(("before", *a)),
                       files_written=lambda b, r, w: calls.append(("files", b, r, w.rows_written)),
                       after_delta_commit=lambda *a: calls.append(("after", *a)))
    ranges = (OffsetRange("t", 0, 0, 3),)
    writer, seen = writer_for(targets, ranges, (out_rows(T0, [0, 2]), dead_rows(T0, [1])), one_pass, hooks=hooks,
                              check_sources=lambda checked: calls.append(("source", checked)))
    started = time.monotonic()
    writer("the batch's rows", 7)
    elapsed = time.monotonic() - started
    assert seen["prepared"] == ["the batch's rows"]
    assert calls[0] == ("before", 7, ranges) and calls[-1] == ("after", 7, ranges)
    assert [c for c in calls if c[0] == "source"] == [("source", ranges)]          # once, after the rows were read
    assert [c for c in calls if c[0] == "files"] == [("files", 7, ranges, 1), ("files", 7, ranges, 2)]
    assert calls.index(("source", ranges)) < calls.index(("files", 7, ranges, 2))
    report = seen["reports"][0]
    assert (report.batch_id, report.ranges, report.rows_written, report.dead_letters, report.kafka_committed,
            report.dead_letter_reasons) == (7, ranges, 2, 1, True, {"null_value": 1})
    assert report.delta_version == DeltaTable(targets.table.path).version()
    assert 0 < report.duration_s <= elapsed
    assert report.commit_s == pytest.approx(sum(r.commit_s for r in results)) and report.commit_s > 0
    for table in (targets.table, targets.dead_table):
        assert all(f.split("/")[-1].startswith("part-b7-") for f in DeltaTable(table.path).file_uris())


@pytest.mark.parametrize("one_pass", [True, False])
def test_a_batch_whose_source_changed_commits_nothing(targets, one_pass):
    def changed(ranges):
        raise SourceChanged("TOPIC_RECREATED", "t has a new ID")

    writer, seen = writer_for(targets, (OffsetRange("t", 0, 0, 2),), (out_rows(T0, [0]), dead_rows(T0, [1])),
                              one_pass, check_sources=changed)
    with pytest.raises(SourceChanged):
        writer(None, 0)
    assert coordinates(targets.table) == coordinates(targets.dead_table) == [] and seen["kafka"] == []
    assert targets.table.recorded_offsets([T0]) == targets.dead_table.recorded_offsets([T0]) == {T0: None}


def test_a_refused_batch_hands_its_id_and_the_refusal_over_and_keeps_it(targets):
    targets.table.claim([T0])                                   # another member took T0
    writer, seen = writer_for(targets, (OffsetRange("t", 0, 0, 1),), (out_rows(T0, [0]), dead_rows(T0, [])))
    assert writer.failure is None
    with pytest.raises(FencedWriterError) as err:
        writer(None, 4)
    assert seen["refused"] == [(4, err.value)] and writer.failure is err.value


def test_one_pass_writes_each_table_once_and_a_two_pass_batch_never_in_one_pass(targets):
    ranges = (OffsetRange("t", 0, 0, 3),)
    writer, seen = writer_for(targets, ranges, (out_rows(T0, [0, 2]), dead_rows(T0, [1])), one_pass=True)
    writer(None, 0)
    assert seen["writes"] == ["one pass"]
    ranges = (OffsetRange("t", 0, 3, 5),)
    writer, seen = writer_for(targets, ranges, (out_rows(T0, [3]), dead_rows(T0, [4])), one_pass=False)
    writer(None, 1)
    assert seen["writes"] == ["dead", "output"]
    assert coordinates(targets.table) == [("t", 0, 0), ("t", 0, 2), ("t", 0, 3)]


def test_an_empty_range_of_a_partition_the_tables_hold_keeps_the_batch_in_one_pass(targets):
    """An scg-kafka batch carries an empty range for a claimed partition with nothing new: the
    dead-letter table decided nothing of this batch, so it is still written in one pass."""
    writer, _ = writer_for(targets, (OffsetRange("t", 1, 0, 2),), (out_rows(T1, [0, 1]), dead_rows(T1, [])))
    writer(None, 0)
    ranges = (OffsetRange("t", 0, 0, 2), OffsetRange("t", 1, 2, 2))
    writer, seen = writer_for(targets, ranges, (out_rows(T0, [0]), dead_rows(T0, [1])))
    writer(None, 1)
    assert seen["writes"] == ["one pass"]


def test_the_output_table_writes_only_what_it_does_not_hold_in_one_pass(targets):
    """The output table already holds offsets 0-1 of the batch (committed there alone), the
    dead-letter table nothing: in one pass each table keeps what its own plan keeps, and no record
    is in the output table twice."""
    targets.table.commit(out_rows(T0, [0, 1]).drop_columns(["reason"]), [OffsetRange("t", 0, 0, 2)], targets.epochs)
    writer, seen = writer_for(targets, (OffsetRange("t", 0, 0, 4),), (out_rows(T0, [0, 1, 3]), dead_rows(T0, [2])))
    writer(None, 0)
    assert seen["writes"] == ["one pass"]
    assert coordinates(targets.table) == [("t", 0, 0), ("t", 0, 1), ("t", 0, 3)]
    assert coordinates(targets.dead_table) == [("t", 0, 2)]


def test_the_dead_letter_table_writes_only_what_it_does_not_hold_in_two_passes(targets):
    """The dead-letter table already holds offsets 0-1 of the batch: it keeps only 2-3, and the
    output table follows its decisions (no record in both, none twice)."""
    targets.dead_table.commit(dead_rows(T0, [1]), [OffsetRange("t", 0, 0, 2)], targets.dead_epochs)
    writer, seen = writer_for(targets, (OffsetRange("t", 0, 0, 4),), (out_rows(T0, [0, 2]), dead_rows(T0, [1, 3])))
    writer(None, 0)
    assert seen["writes"] == ["dead", "output"]
    assert coordinates(targets.dead_table) == [("t", 0, 1), ("t", 0, 3)]
    assert coordinates(targets.table) == [("t", 0, 0), ("t", 0, 2)]


def test_the_dead_letter_decision_ends_where_its_range_ends():
    """Within a decided range the dead-letter table's records are the dead letters; a record at the
    range's end is outside it and follows its own reason."""
    batch = ArrowBatch(out_rows(T0, [0, 1, 2], [None, "null_value", "value_too_large"]), dead_rows(T0, []))
    decided = DeadLetterDecisions((OffsetRange("t", 0, 0, 2),),
                                  pa.table({"topic": ["t"], "partition": pa.array([0], pa.int32()), "offset": [1]}))
    rows = batch.output(decided).table
    assert rows["offset"].to_pylist() == [0] and "reason" not in rows.column_names


def test_an_empty_batch_has_no_output_rows():
    batch = ArrowBatch(out_rows(T0, []), dead_rows(T0, []))
    assert batch.output(None).table.num_rows == 0
    assert isinstance(batch.dead, ArrowRows) and batch.dead.table.num_rows == 0


def test_the_gate_says_whether_a_batch_is_writing():
    gate = BatchGate()
    assert gate.writing is False
    gate.enter([T0])
    assert gate.writing is True
    gate.exit()
    assert gate.writing is False
