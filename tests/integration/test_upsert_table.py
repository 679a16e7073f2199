"""The upsert table (sinks.upsert_table) on real Delta tables, read back with deltalake: changes
merged with the batch's transactions in one commit (docs/DESIGN.md invariant 11), replays that
change nothing, fenced writers refused, a concurrent merge survived."""
from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from groupmgr.core import OffsetRange, TopicPartition
from sinks.txn_table import FencedWriterError, OffsetGapError, SchemaIncompatible, read_recorded_offsets
from sinks.upsert_table import DELETE, UpsertDeltaTable

pytestmark = pytest.mark.delta_only
SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("id", pa.int64()), ("name", pa.string())])
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def changes(tp: TopicPartition, *items: tuple[int, int, str | None]) -> pa.Table:
    """(offset, id, name) changes of ``tp``; a name of None deletes the id."""
    return pa.table({"topic": [tp.topic] * len(items), "partition": pa.array([tp.partition] * len(items), pa.int32()),
                     "offset": pa.array([o for o, _, _ in items], pa.int64()),
                     "id": pa.array([i for _, i, _ in items], pa.int64()), "name": [n for _, _, n in items],
                     DELETE: [n is None for _, _, n in items]})


def rows(table: UpsertDeltaTable) -> dict[int, str]:
    data = DeltaTable(table.path).to_pyarrow_table()
    ids = data["id"].to_pylist()
    assert len(ids) == len(set(ids)), "two rows of one key"
    return dict(zip(ids, data["name"].to_pylist()))


@pytest.fixture
def table(tmp_path) -> UpsertDeltaTable:
    return UpsertDeltaTable(str(tmp_path / "t"), "app", SCHEMA, key=("id",))


def test_changes_insert_update_and_delete_with_the_offsets_in_one_commit(table):
    epochs = table.claim([T0])
    table.commit_changes([OffsetRange("t", 0, 0, 3)], epochs, lambda plan: changes(T0, (0, 1, "a"), (1, 2, "b"),
                                                                                   (2, 3, None)))
    version = table.snapshot().version()
    result = table.commit_changes([OffsetRange("t", 0, 3, 6)], epochs,
                                  lambda plan: changes(T0, (3, 1, "a2"), (4, 2, None), (5, 4, "d")))
    assert rows(table) == {1: "a2", 4: "d"}
    assert result.table_version == version + 1 and table.snapshot().version() == version + 1
    assert dict(result.counts) == {"inserted": 1, "updated": 1, "deleted": 1}
    assert (result.rows_written, result.rows_skipped, result.replayed) == (3, 0, ())
    assert 0 < result.commit_s < 60
    assert read_recorded_offsets(table.path, "app", [T0]) == {T0: 6}


def test_a_replayed_batch_commits_nothing_and_a_partly_replayed_one_gets_the_rest(table):
    epochs = table.claim([T0])
    table.commit_changes([OffsetRange("t", 0, 0, 2)], epochs, lambda plan: changes(T0, (0, 1, "a"), (1, 2, "b")))
    version = table.snapshot().version()
    asked = []
    replay = table.commit_changes([OffsetRange("t", 0, 0, 2)], epochs,
                                  lambda plan: asked.append(plan) or changes(T0, (1, 2, None)))
    assert replay.table_version is None and not asked and table.snapshot().version() == version
    assert (replay.rows_written, replay.rows_skipped, replay.replayed) == (0, 0, (T0,))
    partly = table.commit_changes([OffsetRange("t", 0, 0, 4)], epochs,
                                  lambda plan: asked.append(plan.keep_from) or changes(T0, (3, 5, "e")))
    assert asked == [{T0: 2}] and rows(table) == {1: "a", 2: "b", 5: "e"} and partly.replayed == (T0,)
    with pytest.raises(OffsetGapError):
        table.commit_changes([OffsetRange("t", 0, 9, 10)], epochs, lambda plan: changes(T0, (9, 9, "x")))


def test_a_fenced_writer_changes_nothing(table):
    stale = table.claim([T0])
    table.claim([T0])
    version = table.snapshot().version()
    with pytest.raises(FencedWriterError):
        table.commit_changes([OffsetRange("t", 0, 0, 1)], stale, lambda plan: changes(T0, (0, 1, "stale")))
    assert table.snapshot().version() == version and rows(table) == {}


def test_a_merge_that_meets_a_concurrent_one_merges_again_and_both_hold(table):
    epochs = table.claim([T0, T1])
    other = UpsertDeltaTable(table.path, "app", SCHEMA, key=("id",))
    calls = []

    def ours(plan):
        calls.append(plan.keep_from)
        if len(calls) == 1:  # another member's merge lands between our snapshot and our commit
            other.commit_changes([OffsetRange("t", 1, 0, 1)], epochs, lambda p: changes(T1, (0, 7, "theirs")))
        return changes(T0, (0, 1, "ours"))

    table.commit_changes([OffsetRange("t", 0, 0, 1)], epochs, ours)
    assert len(calls) == 1  # the plan was the same: the changes were reused, the merge tried again
    assert rows(table) == {1: "ours", 7: "theirs"}
    assert table.recorded_offsets([T0, T1]) == {T0: 1, T1: 1}


def test_a_batch_without_changes_records_its_offsets(table):
    epochs = table.claim([T0])
    version = table.snapshot().version()
    result = table.commit_changes([OffsetRange("t", 0, 0, 5)], epochs, lambda plan: changes(T0))
    assert table.recorded_offsets([T0]) == {T0: 5} and rows(table) == {}
    assert result.table_version == version + 1 and dict(result.counts) == {"inserted": 0, "updated": 0, "deleted": 0}


def test_changes_of_other_columns_are_refused(table):
    epochs = table.claim([T0])
    wrong = changes(T0, (0, 1, "a")).rename_columns(["topic", "partition", "offset", "id", "label", DELETE])
    with pytest.raises(SchemaIncompatible, match="the changes' columns are not the table's") as refused:
        table.commit_changes([OffsetRange("t", 0, 0, 1)], epochs, lambda plan: wrong)
    assert refused.value.table == table.path and "label" in refused.value.batch_schema
    assert "name" in refused.value.table_schema
    assert table.recorded_offsets([T0]) == {T0: None}


def test_a_key_of_several_columns_with_any_names(tmp_path):
    schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                        ("Region", pa.string()), ('the "id"', pa.int64()), ("v", pa.string())])
    table = UpsertDeltaTable(str(tmp_path / "t"), "app", schema, key=("Region", 'the "id"'))
    epochs = table.claim([T0])

    def batch(*items):
        return pa.table({"topic": ["t"] * len(items), "partition": pa.array([0] * len(items), pa.int32()),
                         "offset": pa.array([o for o, *_ in items], pa.int64()), "Region": [r for _, r, _, _ in items],
                         'the "id"': pa.array([i for _, _, i, _ in items], pa.int64()),
                         "v": [v for *_, v in items], DELETE: [v is None for *_, v in items]})

    table.commit_changes([OffsetRange("t", 0, 0, 3)], epochs, lambda plan: batch((0, "eu", 1, "a"), (1, "us", 1, "b"),
                                                                                 (2, "eu", 2, "c")))
    table.commit_changes([OffsetRange("t", 0, 3, 5)], epochs, lambda plan: batch((3, "eu", 1, "a2"), (4, "us", 1, None)))
    data = DeltaTable(table.path).to_pyarrow_table()
    assert sorted(zip(data["Region"].to_pylist(), data['the "id"'].to_pylist(), data["v"].to_pylist())) == [
        ("eu", 1, "a2"), ("eu", 2, "c")]


def test_with_schema_is_the_same_table_with_rows_of_another_schema(tmp_path):
    table = UpsertDeltaTable(str(tmp_path / "t"), "app", SCHEMA, key=("id",), partition_by=("topic",),
                             storage_options={"timeout": "10s"})
    wider = SCHEMA.append(pa.field("city", pa.string()))
    other = table.with_schema(wider, add_columns=True)
    assert isinstance(other, UpsertDeltaTable) and other.schema == wider and not other.add_columns
    assert (other.path, other.app_id, other.key, other.partition_by, other.storage_options) == (
        table.path, "app", ("id",), ["topic"], {"timeout": "10s"})
