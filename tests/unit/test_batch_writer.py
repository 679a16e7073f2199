"""Commit order of one micro-batch (docs/DESIGN.md invariants 3, 4, 6): dead letters, then the output
table, then Kafka offsets — and no Kafka commit when the table refuses the batch."""
import pyarrow as pa
import pytest

from groupmgr.core import TopicPartition
from pipelines.runtime.batch_writer import ArrowBatch, BatchGate, BatchWriter, DeadLetterDecisions, RoutedTable, TableTargets
from groupmgr.core import OffsetRange
from pipelines.runtime.records import RecordFormat
from sinks.data_files import WrittenFiles
from sinks.txn_table import CommitPlan, CommitResult, FencedWriterError
from tests.support.batch_faults import FailSecondTableOnce

RANGES = (OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 3, 3))


class FakeTable:
    def __init__(self, name, calls, error=None):
        self.name, self.calls, self.error = name, calls, error
        self.path = f"/tables/{name}"

    def file_writer(self, file_prefix):
        return FakeFiles()

    def plan(self, ranges, epochs):
        return CommitPlan({}, {}, ())

    def commit_files(self, ranges, epochs, write, planned=None):
        self.calls.append(self.name)
        if self.error:
            raise self.error
        return CommitResult(7, 2, 0, ())


class FakeFiles:
    def write(self, batches, keep_from):
        return WrittenFiles()


class FakeLog:
    def ranges(self, batch_id):
        return RANGES


def make_writer(calls, table_error=None, one_pass=True):
    targets = TableTargets(FakeTable("table", calls, table_error), FakeTable("dead", calls), {}, {})
    writer = BatchWriter(RecordFormat("raw", None, 1024), None, targets, FakeLog(),
                         commit_kafka=lambda offsets, meta: calls.append(("kafka", offsets, meta)) or True,
                         report=lambda report: calls.append("report"),
                         refused=lambda batch_id, err: calls.append("refused"),
                         prepare=lambda df, ranges, left_out, fmt: ReleaseRecorded(
                             pa.table({"offset": [0, 1], "reason": [None, None]}), pa.table({"offset": []}),
                             calls, one_pass))
    return writer


class ReleaseRecorded(ArrowBatch):
    def __init__(self, records, dead_records, calls, one_pass=True):
        super().__init__(records, dead_records, one_pass)
        self.calls = calls

    def release(self):
        self.calls.append("released")


@pytest.mark.parametrize("one_pass", [True, False])
def test_delta_then_kafka_with_next_offsets_of_nonempty_ranges(one_pass):
    calls = []
    make_writer(calls, one_pass=one_pass)(None, 0)
    assert calls == ["dead", "table", "released", ("kafka", {TopicPartition("t", 0): 5}, "delta:7"), "report"]


@pytest.mark.parametrize("failing", [None, "second"])
def test_routed_tables_commit_in_order_and_kafka_only_after_the_last(failing):
    """Several output tables: the dead letters, then each table in route order, then Kafka; a table
    that fails leaves the group's offsets alone (the next owner reads from the lowest table)."""
    calls = []
    writer = make_writer(calls, one_pass=True)
    writer.targets.routed = tuple(RoutedTable(FakeTable(name, calls, OSError("down") if name == failing else None), {})
                                  for name in ("second", "third"))
    if failing is None:
        writer(None, 0)
        assert calls == ["dead", "table", "second", "third", "released",
                         ("kafka", {TopicPartition("t", 0): 5}, "delta:7"), "report"]
    else:
        with pytest.raises(OSError, match="down"):
            writer(None, 0)
        assert calls == ["dead", "table", "second", "released"]


@pytest.mark.parametrize("one_pass", [True, False])
def test_refused_batch_commits_nothing_to_kafka(one_pass):
    calls = []
    error = FencedWriterError("tbl", TopicPartition("t", 0), 1, 2)
    with pytest.raises(FencedWriterError):
        make_writer(calls, table_error=error, one_pass=one_pass)(None, 0)
    assert calls == ["dead", "table", "refused", "released"]


def test_a_closed_gate_lets_the_writing_batch_finish_and_the_next_write_nothing():
    """The batch boundary (BatchGate): a batch that entered commits in full; once the gate is
    closed a batch Spark still starts reads nothing and commits nothing, to Delta or Kafka."""
    calls = []
    writer = make_writer(calls)
    writer(None, 0)
    assert writer.gate.close(1.0)  # no batch is writing: closed at once
    writer(None, 1)
    assert calls == ["dead", "table", "released", ("kafka", {TopicPartition("t", 0): 5}, "delta:7"), "report"]


def test_released_when_the_batch_writing_at_the_mark_ends():
    """An scg-kafka query dropped a partition while a batch over it was writing: the boundary is
    that batch's end (the next one is planned after it, without the partition), not the next
    batch's start."""
    import threading

    gate, a, b = BatchGate(), TopicPartition("t", 0), TopicPartition("t", 1)
    gate.enter([a, b])            # a batch over both is writing when the partition is dropped
    done, mark = [], gate.mark()
    waiter = threading.Thread(target=lambda: done.append(gate.released([a], mark, 10.0)))
    waiter.start()
    assert not gate.released([a], mark, 0.05)  # still writing
    gate.exit()
    waiter.join(10.0)
    assert done == [True]


def test_released_with_no_batch_writing_waits_for_one_planned_after_the_drop():
    """No batch writing at the mark: one may be being planned with the partition. A batch that
    began after the mark and reads none of the partitions is the boundary; so is the end of one
    that does read them (every batch after it is planned after the drop)."""
    gate, a, b = BatchGate(), TopicPartition("t", 0), TopicPartition("t", 1)
    mark = gate.mark()
    assert not gate.released([a], mark, 0.05)  # nothing began or ended since
    gate.enter([b])               # planned after the drop
    assert gate.released([a], mark, 0.05)
    gate.exit()

    mark = gate.mark()
    gate.enter([a, b])            # was being planned at the mark: still reads it
    assert not gate.released([a], mark, 0.05)
    gate.exit()
    assert gate.released([a], mark, 0.05)
    assert not gate.released([a], gate.mark(), 0.05)  # only batches since the mark count


def test_a_batch_writes_only_the_partitions_the_gate_allows_when_it_begins():
    """BatchGate.allow (an scg-kafka runner's claims): a batch planned over a partition given up
    since writes without it, so the partition is released when that batch begins, not when it
    ends; None allows any partition again."""
    gate, a, b = BatchGate(), TopicPartition("t", 0), TopicPartition("t", 1)
    assert gate.enter([a, b]) == {a, b}      # no claims told yet: every planned partition
    gate.exit()
    gate.allow([b])                           # a given up after the next batch was planned
    mark = gate.mark()
    assert gate.enter([a, b]) == {b}
    assert gate.released([a], mark, 0.05)     # while that batch still writes
    assert not gate.released([b], mark, 0.05)
    gate.exit()
    gate.allow(None)
    assert gate.enter([a, b]) == {a, b}
    gate.exit()


def test_a_batch_whose_records_are_all_of_partitions_given_up_does_nothing():
    calls = []
    writer = make_writer(calls)
    writer.gate.allow([TopicPartition("t", 1)])   # RANGES has records of t-0 only
    writer(None, 0)
    assert calls == []                            # not prepared, committed nor reported


# -- against real Delta tables (deltalake on tmp_path; only the Spark part, _prepare, is stubbed) --
OUT_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                        ("value", pa.binary())])
DEAD_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                         ("value", pa.binary()), ("reason", pa.string())])
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def out_rows(tp, offsets):
    return pa.table({"topic": [tp.topic] * len(offsets), "partition": [tp.partition] * len(offsets),
                     "offset": list(offsets), "value": [b"v%d" % o for o in offsets]}, schema=OUT_SCHEMA)


def dead_rows(tp, offsets):
    return pa.table({"topic": [tp.topic] * len(offsets), "partition": [tp.partition] * len(offsets),
                     "offset": list(offsets), "value": [None] * len(offsets),
                     "reason": ["null_value"] * len(offsets)}, schema=DEAD_SCHEMA)


def _without(rows, partitions):
    keep = [TopicPartition(t, p) not in partitions
            for t, p in zip(rows["topic"].to_pylist(), rows["partition"].to_pylist())]
    return rows.filter(pa.array(keep, pa.bool_()))


def coordinates(path):
    from deltalake import DeltaTable
    table = DeltaTable(str(path)).to_pyarrow_table(columns=["topic", "partition", "offset"])
    return sorted(zip(*(table[c].to_pylist() for c in ("topic", "partition", "offset"))))


class PlannedLog:
    def __init__(self, ranges):
        self.planned = ranges

    def ranges(self, batch_id):
        return self.planned[batch_id]


@pytest.fixture
def delta_tables(tmp_path):
    """Output and dead-letter tables whose owner epochs differ per table and per partition, so a
    writer that hands one table's epochs to the other is refused."""
    from sinks.txn_table import TxnDeltaTable
    table = TxnDeltaTable(str(tmp_path / "out"), "orders", OUT_SCHEMA)
    dead = TxnDeltaTable(str(tmp_path / "dead"), "orders", DEAD_SCHEMA)
    table.claim([T0, T1])
    dead.claim([T1])
    epochs, dead_epochs = table.claim([T0, T1]), dead.claim([T0, T1])
    assert epochs == {T0: 2, T1: 2} and dead_epochs == {T0: 1, T1: 2}
    return TableTargets(table, dead, epochs, dead_epochs)


def real_writer(targets, planned, batches, calls):
    def prepare(batch_df, ranges, left_out, fmt):  # as SparkBatch(without_partitions(batch_df, left_out)) would
        good, dead = (_without(rows, left_out) for rows in batches.pop(0))
        calls.append(("prepared without", left_out))
        return ArrowBatch(good.append_column("reason", pa.nulls(good.num_rows, pa.string())), dead)

    return BatchWriter(RecordFormat("raw", None, 1024), None, targets, PlannedLog(planned),
                       commit_kafka=lambda offsets, meta: calls.append(("kafka", offsets, meta)) or True,
                       report=lambda report: calls.append(report),
                       refused=lambda batch_id, err: calls.append(("refused", err)), prepare=prepare)


def test_batches_land_in_real_tables_with_each_tables_own_epochs(delta_tables):
    calls = []
    planned = {0: (OffsetRange("t", 0, 0, 4), OffsetRange("t", 1, 0, 2)),
               1: (OffsetRange("t", 0, 4, 6), OffsetRange("t", 1, 2, 2))}
    batches = [(pa.concat_tables([out_rows(T0, [0, 2, 3]), out_rows(T1, [0, 1])]), dead_rows(T0, [1])),
               (out_rows(T0, [4, 5]), dead_rows(T0, []))]
    writer = real_writer(delta_tables, planned, batches, calls)
    writer(None, 0)
    writer(None, 1)
    out, dead = delta_tables.table, delta_tables.dead_table
    assert coordinates(out.path) == [("t", 0, 0), ("t", 0, 2), ("t", 0, 3), ("t", 0, 4), ("t", 0, 5),
                                     ("t", 1, 0), ("t", 1, 1)]
    assert coordinates(dead.path) == [("t", 0, 1)]
    assert out.recorded_offsets([T0, T1]) == dead.recorded_offsets([T0, T1]) == {T0: 6, T1: 2}
    for table, epochs in ((out, delta_tables.epochs), (dead, delta_tables.dead_epochs)):
        snapshot = table.snapshot()
        assert {tp: snapshot.transaction_version(table.owner_app_id(tp)) for tp in (T0, T1)} == epochs
    kafka = [c for c in calls if isinstance(c, tuple) and c[0] == "kafka"]
    assert [k[1] for k in kafka] == [{T0: 4, T1: 2}, {T0: 6}]
    reports = [c for c in calls if not isinstance(c, tuple)]
    assert [(r.batch_id, r.rows_written, r.dead_letters, r.kafka_committed) for r in reports] == [
        (0, 5, 1, True), (1, 2, 0, True)]
    assert kafka[0][2] == f"delta:{reports[0].delta_version}" and reports[0].delta_version is not None


def test_a_partition_given_up_after_its_batch_was_planned_is_left_to_its_next_owner(delta_tables):
    """The batch began after T1 was given up (BatchGate.allow): its T1 records are left out of
    the batch's rows, T1's range out of both tables' commits and the Kafka commit, so T1's next
    owner, reading from what the tables hold, writes each of them once."""
    calls = []
    planned = {0: (OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 0, 2))}
    rows = (pa.concat_tables([out_rows(T0, [0, 2]), out_rows(T1, [0])]),
            pa.concat_tables([dead_rows(T0, [1]), dead_rows(T1, [1])]))
    writer = real_writer(delta_tables, planned, [rows], calls)
    writer.gate.allow([T0])
    writer(None, 0)
    out, dead = delta_tables.table, delta_tables.dead_table
    assert ("prepared without", {T1}) in calls
    assert coordinates(out.path) == [("t", 0, 0), ("t", 0, 2)] and coordinates(dead.path) == [("t", 0, 1)]
    assert out.recorded_offsets([T0, T1]) == dead.recorded_offsets([T0, T1]) == {T0: 3, T1: None}
    report = calls[-1]
    assert [c for c in calls if isinstance(c, tuple) and c[0] == "kafka"] == [
        ("kafka", {T0: 3}, f"delta:{report.delta_version}")]
    assert report.ranges == (OffsetRange("t", 0, 0, 3),) and report.rows_written == 2

    next_owner = TableTargets(out, dead, out.claim([T1]), dead.claim([T1]))
    real_writer(next_owner, {0: (OffsetRange("t", 1, 0, 2),)},
                [(out_rows(T1, [0]), dead_rows(T1, [1]))], [])(None, 0)
    assert coordinates(out.path) == [("t", 0, 0), ("t", 0, 2), ("t", 1, 0)]
    assert coordinates(dead.path) == [("t", 0, 1), ("t", 1, 1)]


def test_replayed_batch_writes_nothing_and_commits_kafka_as_replay(delta_tables):
    calls = []
    planned = {0: (OffsetRange("t", 0, 0, 2),)}
    batch = (out_rows(T0, [0]), dead_rows(T0, [1]))
    real_writer(delta_tables, planned, [batch, batch], calls)(None, 0)
    writer = real_writer(delta_tables, planned, [batch], calls)
    writer(None, 0)                                   # the same batch again (a restart replays it)
    assert coordinates(delta_tables.table.path) == [("t", 0, 0)]
    assert coordinates(delta_tables.dead_table.path) == [("t", 0, 1)]
    assert calls[-2] == ("kafka", {T0: 2}, "delta:replay")
    assert (calls[-1].rows_written, calls[-1].rows_skipped, calls[-1].delta_version) == (0, 1, None)


def test_a_stale_writer_is_refused_by_the_real_table_and_commits_nothing(delta_tables):
    calls = []
    delta_tables.table.claim([T1])                    # another member took T1 of the output table
    planned = {0: (OffsetRange("t", 0, 0, 1), OffsetRange("t", 1, 0, 1))}
    writer = real_writer(delta_tables, planned,
                         [(pa.concat_tables([out_rows(T0, [0]), out_rows(T1, [0])]), dead_rows(T0, []))], calls)
    with pytest.raises(FencedWriterError) as err:
        writer(None, 0)
    assert err.value.tp == T1 and [c[0] for c in calls] == ["prepared without", "refused"]
    assert coordinates(delta_tables.table.path) == []
    assert delta_tables.table.recorded_offsets([T0, T1]) == {T0: None, T1: None}


T2 = TopicPartition("t", 2)


@pytest.mark.parametrize("made_up_epoch", [False, True])
def test_a_batch_over_a_partition_this_writer_never_claimed_is_refused_and_commits_nothing(delta_tables,
                                                                                          made_up_epoch):
    """Neither table records an owner for T2 and this writer never claimed it (no epoch, or one it
    did not get from a claim): the batch is refused whole (``refused`` called, FencedWriterError
    raised), neither table nor Kafka gets anything of it, T0's records included."""
    calls = []
    if made_up_epoch:
        delta_tables = TableTargets(delta_tables.table, delta_tables.dead_table, {**delta_tables.epochs, T2: 1},
                                    {**delta_tables.dead_epochs, T2: 1})
    planned = {0: (OffsetRange("t", 0, 0, 2), OffsetRange("t", 2, 0, 2))}
    writer = real_writer(delta_tables, planned,
                         [(pa.concat_tables([out_rows(T0, [0]), out_rows(T2, [0])]), dead_rows(T2, [1]))], calls)
    with pytest.raises(FencedWriterError) as err:
        writer(None, 0)
    assert (err.value.tp, err.value.recorded) == (T2, None)
    assert [c[0] for c in calls] == ["prepared without", "refused"]
    for table in (delta_tables.table, delta_tables.dead_table):
        assert coordinates(table.path) == []
        assert table.recorded_offsets([T0, T2]) == {T0: None, T2: None}


def _classified(tp, offsets, dead):
    """An ArrowBatch of ``offsets`` whose records in ``dead`` this attempt's settings reject."""
    records = out_rows(tp, offsets)
    reasons = ["value_too_large" if o in dead else None for o in offsets]
    return ArrowBatch(records.append_column("reason", pa.array(reasons, pa.string())),
                      dead_rows(tp, [o for o in offsets if o in dead]))


@pytest.mark.parametrize("first_dead, retry_dead", [({1}, {2}), ({1, 2}, set()), (set(), {0, 3})])
def test_a_retry_with_other_settings_keeps_every_record_in_exactly_one_table(delta_tables, first_dead, retry_dead):
    """The dead-letter commit of the first attempt stands; the retry (whose settings would classify
    differently, e.g. a new max_value_bytes) writes to the output table exactly the records the
    dead-letter table does not hold."""
    from pipelines.runtime.batch_writer import BatchHooks

    planned = {0: (OffsetRange("t", 0, 0, 4),)}
    attempts = [_classified(T0, range(4), first_dead), _classified(T0, range(4), retry_dead)]

    def writer(hooks):
        return BatchWriter(RecordFormat("raw", None, 1024), None, delta_tables, PlannedLog(planned),
                           commit_kafka=lambda offsets, meta: True, report=lambda report: None,
                           refused=lambda batch_id, err: None, hooks=hooks,
                           prepare=lambda df, ranges, left_out, fmt: attempts.pop(0))

    with pytest.raises(OSError):
        writer(BatchHooks(files_written=FailSecondTableOnce()))(None, 0)
    writer(BatchHooks())(None, 0)
    out, dead = coordinates(delta_tables.table.path), coordinates(delta_tables.dead_table.path)
    assert dead == [("t", 0, o) for o in sorted(first_dead)]
    assert sorted(out + dead) == [("t", 0, o) for o in range(4)]


def test_the_dead_letter_decision_applies_only_within_its_ranges():
    batch = _classified(T0, range(3), {0})
    batch.records = pa.concat_tables([batch.records, _classified(T1, range(2), {1}).records])
    decided = DeadLetterDecisions((OffsetRange("t", 0, 0, 3),), dead_rows(T0, [2]).select(["topic", "partition", "offset"]))
    kept = batch.output(decided).table
    assert list(zip(kept["partition"].to_pylist(), kept["offset"].to_pylist())) == [(0, 0), (0, 1), (1, 0)]


class CommittedMeanwhile(ArrowBatch):
    """A one-pass batch during whose write another attempt's dead-letter commit of the same range
    lands, with other decisions (records in ``committed_dead``)."""

    def __init__(self, batch, dead_table, epochs, committed_dead):
        super().__init__(batch.records, batch.dead_records)
        self.dead_table, self.epochs, self.committed_dead = dead_table, epochs, committed_dead

    def write_both(self, dead, output):
        written = super().write_both(dead, output)
        self.dead_table.commit(dead_rows(T0, sorted(self.committed_dead)), (OffsetRange("t", 0, 0, 4),), self.epochs)
        return written


def test_a_plan_changed_after_the_one_pass_write_is_decided_again_in_two_passes(delta_tables):
    """The files written in one pass were planned on a dead-letter table that holds none of the
    batch; when it holds the batch by the commit, those files are not committed and the output
    follows the dead-letter table's decisions (invariant 6), not this attempt's."""
    planned = {0: (OffsetRange("t", 0, 0, 4),)}
    batch = CommittedMeanwhile(_classified(T0, range(4), {3}), delta_tables.dead_table,
                               delta_tables.dead_epochs, committed_dead={2})
    writer = BatchWriter(RecordFormat("raw", None, 1024), None, delta_tables, PlannedLog(planned),
                         commit_kafka=lambda offsets, meta: True, report=lambda report: None,
                         refused=lambda batch_id, err: None, prepare=lambda df, ranges, left_out, fmt: batch)
    writer(None, 0)
    out, dead = coordinates(delta_tables.table.path), coordinates(delta_tables.dead_table.path)
    assert dead == [("t", 0, 2)]
    assert out == [("t", 0, 0), ("t", 0, 1), ("t", 0, 3)]

def test_a_rehearsed_batch_goes_to_the_rehearsal_and_writes_nothing():
    """BatchWriter.rehearse (the scg-kafka member's warm-up in its own query): while set, a batch
    is handed over with its planned ranges and nothing is committed, to Delta or Kafka, nor
    reported; it still passes the gate. Unset, batches write again."""
    calls, rehearsed = [], []
    writer = make_writer(calls)
    writer.rehearse(lambda df, ranges: rehearsed.append((df, ranges)))
    mark = writer.gate.mark()
    writer("rows", 0)
    assert rehearsed == [("rows", RANGES)] and calls == []
    assert writer.gate.released([TopicPartition("u", 0)], mark, 0.05)
    writer.rehearse(None)
    writer(None, 1)
    assert rehearsed == [("rows", RANGES)]
    assert calls == ["dead", "table", "released", ("kafka", {TopicPartition("t", 0): 5}, "delta:7"), "report"]


def test_a_closed_gate_with_no_batch_writing_is_released():
    """A stopping member closed the gate: no batch of the query writes any more, so a partition
    revoked then (a rebalance during the leave) is released at once, not after a batch boundary
    that never comes; while a batch still writes, only its end releases."""
    gate, a = BatchGate(), TopicPartition("t", 0)
    gate.enter([a])
    gate.close(0.0)               # closing while a batch writes
    mark = gate.mark()
    assert not gate.released([a], mark, 0.05)
    gate.exit()
    assert gate.released([a], mark, 0.05)
    assert gate.released([a], gate.mark(), 0.05)
    assert gate.enter([a]) is None  # a batch Spark starts now writes nothing
    assert gate.released([a], gate.mark(), 0.05)
