"""The exactly-once Delta table (sinks.txn_table) on real Delta tables, read back with deltalake
and delta-spark. Each test names the docs/DESIGN.md invariant it guards."""
from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from groupmgr.core import TopicPartition
from groupmgr.core import OffsetRange
from sinks.txn_table import FencedWriterError, OffsetGapError, TxnDeltaTable

pytestmark = pytest.mark.integration
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
    barrier, results, errors = threading.Barrier(4), [], []

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
