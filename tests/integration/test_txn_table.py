"""The exactly-once Delta table (sinks.txn_table) on real Delta tables, read back with deltalake
and delta-spark. Each test names the docs/DESIGN.md invariant it guards."""
from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from groupmgr.core import TopicPartition
from groupmgr.core import OffsetRange
from sinks.txn_table import FencedWriterError, OffsetGapError, TxnDeltaTable, read_recorded_offsets

pytestmark = pytest.mark.delta_only  # the delta-spark test is integration: it uses the spark fixture
SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("v", pa.string())])
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def rows(tp: TopicPartition, offsets) -> pa.Table:
    offsets = list(offsets)
    return pa.table({"topic": [tp.topic] * len(offsets), "partition": [tp.partition] * len(offsets),
                     "offset": offsets, "v": [f"v{o}" for o in offsets]}, schema=SCHEMA)


def coordinates(path) -> list[tuple]:
    table = DeltaTable(str(path)).to_pyarrow_table(columns=["topic", "partition", "offset"])
    return sorted(zip(*(table[c].to_pylist() for c in ("topic", "partition", "offset"))))


@pytest.fixture
def table(tmp_path):
    return TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA)


def test_commit_records_next_offset_per_partition_in_one_commit(table):  # invariants 2, 3
    epochs = table.claim([T0, T1])
    batch = pa.concat_tables([rows(T0, range(0, 5)), rows(T1, range(0, 3))])
    result = table.commit(batch, [OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 0, 3)], epochs)
    assert result.rows_written == 8
    assert table.recorded_offsets([T0, T1]) == {T0: 5, T1: 3}
    history = DeltaTable(table.path).history(1)[0]
    assert history["version"] == result.table_version


def test_replay_writes_nothing_and_partial_replay_only_the_tail(table):  # invariant 3
    epochs = table.claim([T0])
    table.commit(rows(T0, range(0, 5)), [OffsetRange("t", 0, 0, 5)], epochs)
    again = table.commit(rows(T0, range(0, 5)), [OffsetRange("t", 0, 0, 5)], epochs)
    assert again.table_version is None and again.rows_skipped == 5
    tail = table.commit(rows(T0, range(3, 9)), [OffsetRange("t", 0, 3, 9)], epochs)
    assert (tail.rows_written, tail.rows_skipped) == (4, 2)
    assert coordinates(table.path) == [("t", 0, o) for o in range(9)]


def test_range_without_rows_still_advances_the_version(table):  # invariant 3 (gaps)
    epochs = table.claim([T0])
    table.commit(rows(T0, [0, 1, 4]), [OffsetRange("t", 0, 0, 10)], epochs)
    assert table.recorded_offsets([T0]) == {T0: 10}
    table.commit(rows(T0, []), [OffsetRange("t", 0, 10, 12)], epochs)
    assert table.recorded_offsets([T0]) == {T0: 12}


def test_gap_below_batch_start_is_refused(table):
    epochs = table.claim([T0])
    table.commit(rows(T0, range(0, 5)), [OffsetRange("t", 0, 0, 5)], epochs)
    with pytest.raises(OffsetGapError):
        table.commit(rows(T0, range(7, 9)), [OffsetRange("t", 0, 7, 9)], epochs)
    assert table.recorded_offsets([T0]) == {T0: 5}


def test_stale_writer_is_fenced_after_a_new_claim(table):  # invariant 3 (fenced writer)
    old = table.claim([T0])
    new = table.claim([T0])
    assert new[T0] == old[T0] + 1
    with pytest.raises(FencedWriterError) as err:
        table.commit(rows(T0, range(0, 5)), [OffsetRange("t", 0, 0, 5)], old)
    assert err.value.tp == T0
    assert coordinates(table.path) == []
    table.commit(rows(T0, range(0, 5)), [OffsetRange("t", 0, 0, 5)], new)
    assert len(coordinates(table.path)) == 5


def test_concurrent_writers_of_one_partition_never_both_win(table):  # invariant 3 (CAS)
    epochs = table.claim([T0])
    barrier, results, errors = threading.Barrier(4, timeout=60), [], []

    def write(first: int) -> None:
        barrier.wait()
        try:
            results.append(table.commit(rows(T0, range(0, 50)), [OffsetRange("t", 0, 0, 50)], epochs))
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert sum(r.rows_written for r in results) == 50
    assert coordinates(table.path) == [("t", 0, o) for o in range(50)]


def test_table_reads_the_same_through_delta_spark(table, spark):  # invariant 5
    epochs = table.claim([T0, T1])
    table.commit(pa.concat_tables([rows(T0, range(4)), rows(T1, range(2))]),
                 [OffsetRange("t", 0, 0, 4), OffsetRange("t", 1, 0, 2)], epochs)
    seen = spark.read.format("delta").load(table.path).select("topic", "partition", "offset").collect()
    assert sorted((r.topic, r.partition, r.offset) for r in seen) == coordinates(table.path)


# -- invariant 3 at its edges: every partition of a batch checked, a one-record gap, a race lost --
@pytest.mark.parametrize("moved_first", [False, True])
def test_stale_writer_spanning_a_moved_and_an_unmoved_partition_is_refused_whole(table, moved_first):
    """invariant 3: every partition of the batch is checked, not just the first one."""
    old = table.claim([T0, T1])
    new = table.claim([T1])                      # T1 moved to another member, T0 did not
    ranges = [OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 0, 2)]
    if moved_first:
        ranges.reverse()
    before = DeltaTable(table.path).version()
    with pytest.raises(FencedWriterError) as err:
        table.commit(pa.concat_tables([rows(T0, range(3)), rows(T1, range(2))]), ranges, old)
    assert (err.value.tp, err.value.ours, err.value.recorded) == (T1, old[T1], new[T1])
    assert DeltaTable(table.path).version() == before and coordinates(table.path) == []
    assert table.recorded_offsets([T0, T1]) == {T0: None, T1: None}
    snapshot = table.snapshot()
    assert snapshot.transaction_version(table.owner_app_id(T1)) == new[T1]   # the new owner's epoch
    assert snapshot.transaction_version(table.owner_app_id(T0)) == old[T0]
    table.commit(rows(T1, range(2)), [OffsetRange("t", 1, 0, 2)], new)       # and it still writes
    assert table.recorded_offsets([T1]) == {T1: 2}


def test_one_record_gap_is_refused(table):
    """invariant 3: recorded == start - 1 is a gap (record start-1 would be lost), not a write."""
    epochs = table.claim([T0])
    table.commit(rows(T0, range(0, 5)), [OffsetRange("t", 0, 0, 5)], epochs)
    with pytest.raises(OffsetGapError) as err:
        table.commit(rows(T0, range(6, 9)), [OffsetRange("t", 0, 6, 9)], epochs)
    assert (err.value.recorded, err.value.range.start) == (5, 6)
    assert table.recorded_offsets([T0]) == {T0: 5}
    assert coordinates(table.path) == [("t", 0, o) for o in range(5)]
    table.commit(rows(T0, range(5, 9)), [OffsetRange("t", 0, 5, 9)], epochs)   # the boundary itself
    assert coordinates(table.path) == [("t", 0, o) for o in range(9)]


def test_a_gap_in_one_partition_refuses_the_whole_batch(table):
    epochs = table.claim([T0, T1])
    table.commit(rows(T1, range(0, 2)), [OffsetRange("t", 1, 0, 2)], epochs)
    with pytest.raises(OffsetGapError) as err:
        table.commit(pa.concat_tables([rows(T0, range(3)), rows(T1, range(4, 6))]),
                     [OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 4, 6)], epochs)
    assert err.value.range.tp == T1
    assert table.recorded_offsets([T0, T1]) == {T0: None, T1: 2}
    assert coordinates(table.path) == [("t", 1, 0), ("t", 1, 1)]


class RacedTable(TxnDeltaTable):
    """A writer that lets ``race`` commit right after it has decided (on its snapshot) and before it
    writes: a deterministic concurrent commit, no thread timing. ``race`` runs once."""

    def __init__(self, *args, race=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.race, self.raced, self.decisions = race, False, 0

    def _plan(self, table, ranges):
        plan = super()._plan(table, ranges)
        self.decisions += 1
        if self.race is not None and not self.raced:
            self.raced = True
            self.race()
        return plan


def raced(path, race) -> RacedTable:
    return RacedTable(str(path), "app", SCHEMA, race=race)


def test_cas_loser_of_a_race_over_the_same_range_replays_and_writes_nothing(tmp_path):
    """invariant 3 (CAS): the injected commit wrote the same range; the loser's write, built on
    the snapshot it decided on, fails; it re-decides, sees a replay and writes nothing."""
    other = TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA)
    epochs = other.claim([T0])
    batch, ranges = rows(T0, range(0, 5)), [OffsetRange("t", 0, 0, 5)]
    winner = []
    loser = raced(tmp_path / "t", lambda: winner.append(other.commit(batch, ranges, epochs)))
    result = loser.commit(batch, ranges, epochs)
    assert loser.raced and loser.decisions == 2                     # decided, lost, decided again
    assert winner[0].rows_written == 5
    assert (result.table_version, result.rows_written, result.rows_skipped) == (None, 0, 5)
    assert result.replayed == (T0,)
    assert coordinates(tmp_path / "t") == [("t", 0, o) for o in range(5)]
    assert other.recorded_offsets([T0]) == {T0: 5}


def test_cas_loser_of_a_race_over_part_of_its_range_writes_only_the_tail(tmp_path):
    other = TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA)
    epochs = other.claim([T0])
    loser = raced(tmp_path / "t", lambda: other.commit(rows(T0, range(0, 3)), [OffsetRange("t", 0, 0, 3)], epochs))
    result = loser.commit(rows(T0, range(0, 5)), [OffsetRange("t", 0, 0, 5)], epochs)
    assert loser.raced and loser.decisions == 2
    assert (result.rows_written, result.rows_skipped, result.replayed) == (2, 3, (T0,))
    assert coordinates(tmp_path / "t") == [("t", 0, o) for o in range(5)]
    assert other.recorded_offsets([T0]) == {T0: 5}


def test_cas_loser_of_a_race_with_a_new_claim_is_fenced_and_writes_nothing(tmp_path):
    """The injected commit is another member claiming the partition: re-deciding fences us."""
    other = TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA)
    epochs = other.claim([T0])
    loser = raced(tmp_path / "t", lambda: other.claim([T0]))
    with pytest.raises(FencedWriterError):
        loser.commit(rows(T0, range(0, 5)), [OffsetRange("t", 0, 0, 5)], epochs)
    assert loser.raced and coordinates(tmp_path / "t") == []
    assert other.recorded_offsets([T0]) == {T0: None}
    assert other.snapshot().transaction_version(other.owner_app_id(T0)) == epochs[T0] + 1


def test_read_recorded_offsets_without_creating_the_table(tmp_path):
    path = tmp_path / "t"
    assert read_recorded_offsets(str(path), "app", [T0]) == {} and not path.exists()
    table = TxnDeltaTable(str(path), "app", SCHEMA)
    epochs = table.claim([T0, T1])
    table.commit(rows(T0, range(3)), [OffsetRange("t", 0, 0, 3)], epochs)
    assert read_recorded_offsets(path, "app", [T0, T1]) == {T0: 3, T1: None}
    assert read_recorded_offsets(str(path), "other-app", [T0]) == {T0: None}


def test_storage_options_reach_every_deltalake_call(tmp_path, monkeypatch):
    """S3 and friends are configured through storage options: every table open and the creating
    write must carry them (a local table ignores them, so the calls are recorded)."""
    import sinks.txn_table as txn_table
    opened, created = [], []
    real_table, real_write = txn_table.DeltaTable, txn_table.write_deltalake

    def open_table(path, storage_options=None):
        opened.append((str(path), storage_options))
        return real_table(path, storage_options=storage_options)

    def write(target, data, **kwargs):
        if isinstance(target, str):
            created.append((target, kwargs.get("storage_options")))
        return real_write(target, data, **kwargs)

    monkeypatch.setattr(txn_table, "DeltaTable", open_table)
    monkeypatch.setattr(txn_table, "write_deltalake", write)
    options = {"aws_region": "eu-west-1"}
    path = str(tmp_path / "t")
    table = TxnDeltaTable(path, "app", SCHEMA, storage_options=options)
    epochs = table.claim([T0])
    table.commit(rows(T0, range(2)), [OffsetRange("t", 0, 0, 2)], epochs)
    assert table.recorded_offsets([T0]) == {T0: 2}
    assert read_recorded_offsets(path, "app", [T0], storage_options=options) == {T0: 2}
    assert created == [(path, options)]
    assert opened and all(o == (path, options) for o in opened)
    opened.clear()
    plain = TxnDeltaTable(str(tmp_path / "u"), "app", SCHEMA)
    plain.claim([T0])
    assert read_recorded_offsets(str(tmp_path / "u"), "app", [T0]) == {T0: None}
    assert opened and all(o == (str(tmp_path / "u"), None) for o in opened)


def test_record_partitions_resets_offsets_and_records_topic_ids_only_for_the_owner(table):  # invariant 10
    epochs = table.claim([T0, T1])
    table.commit(rows(T0, range(0, 5)), [OffsetRange("t", 0, 0, 5)], epochs)
    table.record_partitions(epochs, {T0: 0}, {T0: 11, T1: 12}, {"scg.event": "TOPIC_RECREATED"})
    assert table.recorded_offsets([T0, T1]) == {T0: 0, T1: None}  # moved down: a new incarnation
    assert table.recorded_topic_ids([T0, T1]) == {T0: 11, T1: 12}
    assert DeltaTable(table.path).history(1)[0]["scg.event"] == "TOPIC_RECREATED"
    table.commit(rows(T0, range(0, 3)), [OffsetRange("t", 0, 0, 3)], epochs)  # the new records are written
    assert len(coordinates(table.path)) == 8
    newer = table.claim([T0])
    with pytest.raises(FencedWriterError):
        table.record_partitions(epochs, {T0: 0}, {}, None)
    table.record_partitions(newer, {}, {}, None)  # nothing to record: no commit
    assert table.recorded_offsets([T0]) == {T0: 3}


def test_a_created_table_checkpoints_every_ten_commits(tmp_path):
    """Each app-transaction lookup scans the log since the last checkpoint (delta-rs 1.6): the
    table keeps that scan short, and readers see the checkpoints it writes."""
    table = TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA)
    epochs = table.claim([T0])
    for start in range(0, 12):
        table.commit(rows(T0, [start]), [OffsetRange("t", 0, start, start + 1)], epochs)
    snapshot = DeltaTable(str(tmp_path / "t"))
    assert snapshot.metadata().configuration["delta.checkpointInterval"] == "10"
    assert [p.name for p in (tmp_path / "t" / "_delta_log").glob("*.checkpoint.parquet")] == [
        "00000000000000000009.checkpoint.parquet"]  # versions 0-13: the table, a claim, 12 commits
    assert table.recorded_offsets([T0]) == {T0: 12}


def test_a_commit_after_its_plan_decides_again_on_the_plan_s_snapshot_brought_up_to_date(tmp_path, monkeypatch):
    """commit_files(planned=...) starts from the snapshot plan() read, updated with the commits
    since (no fresh load): another member's commit in between is seen (its partition's offset
    is kept, the CAS holds), and a claim in between fences the commit, nothing written."""
    import sinks.txn_table as txn_table

    path = str(tmp_path / "t")
    ours, other = TxnDeltaTable(path, "app", SCHEMA), TxnDeltaTable(path, "app", SCHEMA)
    epochs, other_epochs = ours.claim([T0]), other.claim([T1])
    opened = []
    real_table = txn_table.DeltaTable
    monkeypatch.setattr(txn_table, "DeltaTable", lambda *a, **k: opened.append(a) or real_table(*a, **k))
    writer = ours.file_writer()
    planned = ours.plan([OffsetRange("t", 0, 0, 3)], epochs)
    other.commit(rows(T1, range(4)), [OffsetRange("t", 1, 0, 4)], other_epochs)
    opened.clear()
    result = ours.commit_files([OffsetRange("t", 0, 0, 3)], epochs,
                               lambda plan: writer.write(rows(T0, range(3)).to_batches(), plan.keep_from), planned)
    assert opened == [] and result.rows_written == 3
    assert ours.recorded_offsets([T0, T1]) == {T0: 3, T1: 4}
    planned = ours.plan([OffsetRange("t", 0, 3, 5)], epochs)
    TxnDeltaTable(path, "app", SCHEMA).claim([T0])  # a new owner, between the plan and the commit
    with pytest.raises(FencedWriterError):
        ours.commit_files([OffsetRange("t", 0, 3, 5)], epochs,
                          lambda plan: writer.write(rows(T0, range(3, 5)).to_batches(), plan.keep_from), planned)
    assert len(coordinates(path)) == 7 and ours.recorded_offsets([T0]) == {T0: 3}


# -- a partition the writer never claimed -----------------------------------------------------------
def test_a_batch_for_a_partition_nobody_claimed_is_refused_and_writes_nothing(table):
    """invariant 3: no owner epoch recorded for T0 (only T1 was claimed) means no writer owns it:
    an epoch the writer made up for it is not the table's, the whole batch is refused."""
    epochs = {**table.claim([T1]), T0: 1}
    ranges = [OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 0, 2)]
    before = DeltaTable(table.path).version()
    for attempt in (lambda: table.plan(ranges, epochs),
                    lambda: table.commit(pa.concat_tables([rows(T0, range(3)), rows(T1, range(2))]), ranges, epochs)):
        with pytest.raises(FencedWriterError) as err:
            attempt()
        assert (err.value.table, err.value.tp, err.value.ours, err.value.recorded) == (table.path, T0, 1, None)
    assert DeltaTable(table.path).version() == before and coordinates(table.path) == []
    assert table.recorded_offsets([T0, T1]) == {T0: None, T1: None}


@pytest.mark.parametrize("claimed_by_another", [False, True])
def test_a_writer_holding_no_epoch_for_a_partition_is_refused(table, claimed_by_another):
    """invariant 3: a partition missing from the writer's epochs was never claimed by it, whether
    the table records no owner for it or another member's: refused before any file is written."""
    epochs = table.claim([T1])
    if claimed_by_another:
        TxnDeltaTable(table.path, "app", SCHEMA).claim([T0])
    written = []
    with pytest.raises(FencedWriterError) as err:
        table.commit_files([OffsetRange("t", 1, 0, 2), OffsetRange("t", 0, 0, 3)], epochs, written.append)
    assert (err.value.table, err.value.tp, err.value.ours, err.value.recorded) == (
        table.path, T0, -1, 1 if claimed_by_another else None)
    assert written == [] and coordinates(table.path) == []
    assert table.recorded_offsets([T0, T1]) == {T0: None, T1: None}


def test_a_never_claimed_partition_is_refused_even_as_a_replay(table):
    """A range the table already holds is a replay only for its owner: a writer without an epoch
    for the partition is refused, not told the batch is committed."""
    epochs = table.claim([T0])
    table.commit(rows(T0, range(3)), [OffsetRange("t", 0, 0, 3)], epochs)
    stranger = TxnDeltaTable(table.path, "app", SCHEMA)
    with pytest.raises(FencedWriterError):
        stranger.commit(rows(T0, range(3)), [OffsetRange("t", 0, 0, 3)], {})
    other_app = TxnDeltaTable(table.path, "other-app", SCHEMA)      # its own app ids: never claimed
    with pytest.raises(FencedWriterError) as err:
        other_app.commit(rows(T0, range(3)), [OffsetRange("t", 0, 0, 3)], epochs)
    assert (err.value.tp, err.value.recorded) == (T0, None)
    assert coordinates(table.path) == [("t", 0, o) for o in range(3)]


def test_record_partitions_refuses_a_partition_the_writer_never_claimed(table):
    """invariant 10: a reset or a topic ID is recorded only by the partition's owner."""
    epochs = table.claim([T1])
    before = DeltaTable(table.path).version()
    with pytest.raises(FencedWriterError) as err:
        table.record_partitions(epochs, {T0: 0}, {T0: 11}, {"scg.event": "TOPIC_RECREATED"})
    assert (err.value.tp, err.value.recorded) == (T0, None)
    with pytest.raises(FencedWriterError):
        table.record_partitions({**epochs, T0: 1}, {}, {T0: 11}, None)
    assert DeltaTable(table.path).version() == before
    assert table.recorded_topic_ids([T0]) == {T0: None}


# -- what each commit records, and the plan of a batch over several partitions -------------------
def _log_actions(path, kind: str) -> list[dict]:
    import json
    from pathlib import Path

    actions = []
    for commit in sorted(Path(path, "_delta_log").glob("*.json")):
        actions += [json.loads(line)[kind] for line in commit.read_text().splitlines() if kind in json.loads(line)]
    return actions


def test_a_replayed_partition_does_not_stop_the_partitions_after_it(table):
    """invariant 3: per partition; a full replay of T0 leaves T1 (next in the batch) to be written."""
    epochs = table.claim([T0, T1])
    table.commit(rows(T0, range(3)), [OffsetRange("t", 0, 0, 3)], epochs)
    result = table.commit(pa.concat_tables([rows(T0, range(3)), rows(T1, range(2))]),
                          [OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 0, 2)], epochs)
    assert (result.rows_written, result.rows_skipped, result.replayed) == (2, 3, (T0,))
    assert table.recorded_offsets([T0, T1]) == {T0: 3, T1: 2}


def test_a_partition_recorded_exactly_at_the_batch_start_is_written_not_replayed(table):
    """invariant 3: recorded == start is the ordinary case (nothing of the batch is in the table
    yet), so the batch is not reported as a replay of it; recorded inside the range is one."""
    epochs = table.claim([T0, T1])
    table.commit(pa.concat_tables([rows(T0, range(3)), rows(T1, range(1))]),
                 [OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 0, 1)], epochs)
    result = table.commit(pa.concat_tables([rows(T0, range(3, 5)), rows(T1, range(0, 2))]),
                          [OffsetRange("t", 0, 3, 5), OffsetRange("t", 1, 0, 2)], epochs)
    assert (result.replayed, result.rows_written, result.rows_skipped) == ((T1,), 3, 1)
    assert table.plan([OffsetRange("t", 0, 5, 6)], epochs).replayed == ()


def test_a_gap_names_the_table_that_refused(table):
    epochs = table.claim([T0])
    table.commit(rows(T0, range(2)), [OffsetRange("t", 0, 0, 2)], epochs)
    with pytest.raises(OffsetGapError) as err:
        table.plan([OffsetRange("t", 0, 3, 4)], epochs)
    assert (err.value.table, err.value.range, err.value.recorded) == (table.path, OffsetRange("t", 0, 3, 4), 2)


def test_the_version_a_commit_reports_is_its_own_when_another_writer_commits_right_after(tmp_path, monkeypatch):
    """The commit is found by its own marker: a commit another writer (without one) makes right
    after ours is not taken for it."""
    from deltalake import write_deltalake

    table = TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA)
    epochs = table.claim([T0])
    real = TxnDeltaTable._try_commit

    def then_another_writer(self, *args, **kwargs):
        done = real(self, *args, **kwargs)
        write_deltalake(self.path, rows(T1, [9]), mode="append")
        return done

    monkeypatch.setattr(TxnDeltaTable, "_try_commit", then_another_writer)
    result = table.commit(rows(T0, range(2)), [OffsetRange("t", 0, 0, 2)], epochs)
    assert DeltaTable(table.path).version() == result.table_version + 1


def test_a_commit_adds_its_files_as_new_data_with_statistics_and_a_modification_time(table):
    """Delta readers rely on the add actions: ``dataChange`` true (a streaming reader skips the
    others), per-file statistics (data skipping, row counts), a modification time in ms."""
    import time

    epochs = table.claim([T0])
    before = int(time.time() * 1000)
    table.commit(rows(T0, range(3)), [OffsetRange("t", 0, 0, 3)], epochs)
    after = int(time.time() * 1000)
    adds = _log_actions(table.path, "add")
    assert len(adds) == 1 and adds[0]["dataChange"] is True
    assert before <= adds[0]["modificationTime"] <= after
    actions = DeltaTable(table.path).get_add_actions(flatten=True)
    assert actions["num_records"].to_pylist() == [3] and actions["max.offset"].to_pylist() == [2]


def test_every_transaction_records_when_it_was_written(table):
    import time

    before = int(time.time() * 1000)
    epochs = table.claim([T0])
    table.commit(rows(T0, range(1)), [OffsetRange("t", 0, 0, 1)], epochs)
    table.record_partitions(epochs, {}, {T0: 7}, None)
    after = int(time.time() * 1000)
    txns = _log_actions(table.path, "txn")
    assert {t["appId"] for t in txns} == {table.owner_app_id(T0), table.offset_app_id(T0), table.topic_id_app_id(T0)}
    assert all(before <= t["lastUpdated"] <= after for t in txns), txns


def test_a_commit_reports_its_time_and_the_rows_it_wrote_per_counted_value(tmp_path):
    import time

    table = TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA, count_by="v")
    epochs = table.claim([T0])
    started = time.monotonic()
    result = table.commit(rows(T0, [0, 1]), [OffsetRange("t", 0, 0, 2)], epochs)
    assert 0 < result.commit_s <= time.monotonic() - started
    assert result.counts == {"v0": 1, "v1": 1}


def test_a_conflicting_commit_is_retried_after_a_growing_pause(table, monkeypatch):
    import sinks.txn_table as txn_table

    epochs = table.claim([T0])
    pauses, attempts = [], []
    real = TxnDeltaTable._try_commit
    monkeypatch.setattr(txn_table, "_sleep", pauses.append)  # not time.sleep: other threads (py4j) sleep too
    monkeypatch.setattr(TxnDeltaTable, "_try_commit",
                        lambda self, *a, **k: attempts.append(1) is None and len(attempts) > 2 and real(self, *a, **k))
    result = table.commit(rows(T0, range(2)), [OffsetRange("t", 0, 0, 2)], epochs)
    assert result.rows_written == 2 and pauses == [0.05, 0.1]


def test_a_file_writer_writes_the_tables_files_with_its_options(tmp_path):
    from sinks.data_files import DataFileWriter

    table = TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA, partition_by=("partition",),
                          storage_options={"timeout": "10s"}, count_by="v")
    assert table.file_writer() == DataFileWriter(table.path, SCHEMA, ("partition",), {"timeout": "10s"}, "part",
                                                 count_by="v")
    assert table.file_writer("part-b7").file_prefix == "part-b7"
    assert table.file_writer().storage_options == {"timeout": "10s"}


def test_coordinates_are_the_rows_held_within_the_ranges(table):
    """Half-open ranges per (topic, partition): a dead-letter decision covers exactly them."""
    epochs = table.claim([T0, T1])
    table.commit(pa.concat_tables([rows(T0, range(6)), rows(T1, range(6))]),
                 [OffsetRange("t", 0, 0, 6), OffsetRange("t", 1, 0, 6)], epochs)
    held = table.coordinates([OffsetRange("t", 0, 2, 4), OffsetRange("t", 1, 4, 5)])
    assert held.column_names == ["topic", "partition", "offset"]
    assert sorted(zip(*(held[c].to_pylist() for c in held.column_names))) == [("t", 0, 2), ("t", 0, 3), ("t", 1, 4)]
    assert table.coordinates([OffsetRange("u", 0, 0, 9)]).num_rows == 0
    empty = table.coordinates([])
    assert empty.num_rows == 0 and empty.schema == pa.schema([SCHEMA.field(c) for c in ("topic", "partition", "offset")])


def test_a_table_that_is_not_created_is_reported_by_the_storage_with_its_options(tmp_path, monkeypatch):
    """When the table is still missing after every attempt to create it, the last open, with the
    table's path and options, raises the storage's own error."""
    import sinks.txn_table as txn_table
    from deltalake.exceptions import TableNotFoundError

    opened = []

    def missing(path, storage_options=None):
        opened.append((path, storage_options))
        raise TableNotFoundError("no table")

    monkeypatch.setattr(txn_table, "DeltaTable", missing)
    monkeypatch.setattr(txn_table, "write_deltalake", lambda *a, **k: None)
    table = TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA, storage_options={"timeout": "10s"})
    with pytest.raises(TableNotFoundError):
        table.snapshot()
    assert opened == [(table.path, {"timeout": "10s"})] * (txn_table.COMMIT_ATTEMPTS + 1)


@pytest.mark.parametrize("step", ["open", "commit", "read"])
def test_a_storage_failure_names_the_table_and_the_storages_reason(tmp_path, monkeypatch, step):
    import sinks.txn_table as txn_table
    from sinks.txn_table import StorageUnavailable

    table = TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA)
    epochs = table.claim([T0])

    def refuse(*args, **kwargs):
        raise OSError("Access Denied")

    if step == "open":
        monkeypatch.setattr(txn_table, "DeltaTable", refuse)
        attempt = table.snapshot
    elif step == "commit":
        monkeypatch.setattr(DeltaTable, "create_write_transaction", refuse)
        attempt = lambda: table.commit(rows(T0, [0]), [OffsetRange("t", 0, 0, 1)], epochs)  # noqa: E731
    else:
        monkeypatch.setattr(DeltaTable, "to_pyarrow_dataset", refuse)
        attempt = lambda: table.coordinates([OffsetRange("t", 0, 0, 1)])  # noqa: E731
    with pytest.raises(StorageUnavailable) as err:
        attempt()
    assert (err.value.path, err.value.reason) == (table.path, "Access Denied")


def test_creating_a_table_another_member_created_first_is_no_error(tmp_path):
    first, second = (TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA) for _ in range(2))
    first.snapshot()
    second._create()
    assert DeltaTable(first.path).version() == 0


def test_a_partitioned_table_takes_commits_into_its_partitions(tmp_path):
    table = TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA, partition_by=("partition",))
    epochs = table.claim([T0, T1])
    table.commit(pa.concat_tables([rows(T0, range(2)), rows(T1, range(1))]),
                 [OffsetRange("t", 0, 0, 2), OffsetRange("t", 1, 0, 1)], epochs)
    snapshot = DeltaTable(table.path)
    assert snapshot.metadata().partition_columns == ["partition"]
    assert sorted(p["partition"] for p in snapshot.partitions()) == ["0", "1"]
    assert coordinates(table.path) == [("t", 0, 0), ("t", 0, 1), ("t", 1, 0)]
