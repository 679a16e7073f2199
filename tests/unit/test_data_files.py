"""Data files written outside the driver: Parquet under the table, Delta statistics, partition
directories and values, replay filtering with skip counts, and the metadata round trip."""
from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from groupmgr.core import TopicPartition
from sinks.data_files import (DataFileWriter, StatsCollector, WrittenFiles, partition_value_text)

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("name", pa.string())])


def rows(tp, offsets, names=None):
    return pa.table({"topic": [tp.topic] * len(offsets), "partition": [tp.partition] * len(offsets),
                     "offset": list(offsets), "name": names or [f"n{o}" for o in offsets]}, schema=SCHEMA)


def test_files_hold_the_rows_and_describe_themselves(tmp_path):
    writer = DataFileWriter(str(tmp_path), SCHEMA)
    written = writer.write(pa.concat_tables([rows(T0, [0, 1]), rows(T1, [5])]).to_batches())
    assert written.rows_written == 3 and written.rows_skipped == 0 and len(written.files) == 1
    data_file = written.files[0]
    assert (tmp_path / data_file.path).stat().st_size == data_file.size
    assert pq.read_table(tmp_path / data_file.path).num_rows == 3
    stats = json.loads(data_file.stats)
    assert stats["numRecords"] == 3
    assert stats["minValues"]["offset"] == 0 and stats["maxValues"]["offset"] == 5
    assert stats["nullCount"] == {"topic": 0, "partition": 0, "offset": 0, "name": 0}


def test_keep_from_writes_only_new_rows_and_counts_the_rest(tmp_path):
    writer = DataFileWriter(str(tmp_path), SCHEMA)
    batch = pa.concat_tables([rows(T0, range(0, 5)), rows(T1, range(0, 3))]).to_batches()
    written = writer.write(batch, {T0: 3})                       # T1 fully replayed, T0 from 3
    assert written.rows_written == 2 and written.rows_skipped == 6
    table = pq.read_table(tmp_path / written.files[0].path)
    assert table["offset"].to_pylist() == [3, 4] and set(table["partition"].to_pylist()) == {0}


@pytest.mark.parametrize("keep_from, kept", [
    ({T0: 0}, [0, 1, 2, 3]),            # a block of one partition, every row new
    ({T0: 2, T1: 0}, [2, 3]),           # partly replayed
    ({T0: 9}, []),                      # wholly replayed
    ({T1: 0}, []),                      # a partition the batch does not write
])
def test_keep_from_on_a_block_of_one_partition(tmp_path, keep_from, kept):
    written = DataFileWriter(str(tmp_path), SCHEMA).write(rows(T0, range(4)).to_batches(), keep_from)
    assert written.rows_written == len(kept) and written.rows_skipped == 4 - len(kept)
    assert [o for f in written.files for o in pq.read_table(tmp_path / f.path)["offset"].to_pylist()] == kept


def test_keep_from_on_one_batch_mixing_partitions_and_a_row_without_offset(tmp_path):
    mixed = pa.concat_tables([rows(T0, range(3)), rows(T1, range(3)),
                              pa.table({"topic": ["t"], "partition": [0], "offset": [None], "name": ["x"]},
                                       schema=SCHEMA)]).combine_chunks().to_batches()
    assert len(mixed) == 1
    written = DataFileWriter(str(tmp_path), SCHEMA).write(mixed, {T0: 1, T1: 2})
    table = pq.read_table(tmp_path / written.files[0].path)
    assert sorted(zip(table["partition"].to_pylist(), table["offset"].to_pylist())) == [(0, 1), (0, 2), (1, 2)]
    assert written.rows_skipped == 4
    alone = DataFileWriter(str(tmp_path / "alone"), SCHEMA).write([mixed[0].slice(6)], {T0: 0})
    assert alone.rows_written == 0 and alone.rows_skipped == 1


def test_a_boundary_offset_is_kept(tmp_path):
    written = DataFileWriter(str(tmp_path), SCHEMA).write(rows(T0, [4, 5]).to_batches(), {T0: 5})
    assert written.rows_written == 1 and written.rows_skipped == 1


def test_nothing_to_keep_writes_no_file(tmp_path):
    written = DataFileWriter(str(tmp_path), SCHEMA).write(rows(T0, [1, 2]).to_batches(), {})
    assert written.files == () and written.rows_skipped == 2
    assert list(tmp_path.iterdir()) == []


def test_no_rows_no_file(tmp_path):
    assert DataFileWriter(str(tmp_path), SCHEMA).write([]) == WrittenFiles()


def test_partitioned_files_go_to_hive_directories_without_their_columns(tmp_path):
    writer = DataFileWriter(str(tmp_path), SCHEMA, partition_by=("topic", "partition"))
    other = TopicPartition("a/b c%", 2)
    written = writer.write(pa.concat_tables([rows(T0, [0]), rows(other, [7, 8])]).to_batches())
    by_values = {f.partition_values: f for f in written.files}
    assert set(by_values) == {(("topic", "t"), ("partition", "0")), (("topic", "a/b c%"), ("partition", "2"))}
    odd = by_values[(("topic", "a/b c%"), ("partition", "2"))]
    assert odd.path.startswith("topic=a%2Fb%20c%25/partition=2/") and odd.num_records == 2
    assert pq.read_table(tmp_path / odd.path).column_names == ["offset", "name"]
    assert "topic" not in json.loads(odd.stats)["minValues"]


def test_row_groups_are_bounded_by_bytes_not_by_the_batch(tmp_path):
    writer = DataFileWriter(str(tmp_path), SCHEMA, row_group_bytes=1)
    written = writer.write([rows(T0, [0, 1]).to_batches()[0], rows(T0, [2]).to_batches()[0]])
    assert pq.ParquetFile(tmp_path / written.files[0].path).num_row_groups == 2


def test_metadata_rows_round_trip_through_spark_shaped_records(tmp_path):
    writer = DataFileWriter(str(tmp_path), SCHEMA, partition_by=("partition",))
    out = list(writer.write_metadata(iter(pa.concat_tables([rows(T0, [0, 1]), rows(T1, [2])]).to_batches()),
                                     {T0: 1, T1: 0}))
    records = [r for batch in out for r in batch.to_pylist()]
    assert sum(1 for r in records if r["path"] is None) == 1       # the skip-count row
    written = WrittenFiles.from_metadata(records)
    assert written.rows_written == 2 and written.rows_skipped == 1
    assert {f.partition_values for f in written.files} == {(("partition", "0"),), (("partition", "1"),)}


def test_the_writer_pickles_without_opening_anything(tmp_path):
    import pickle

    writer = DataFileWriter(str(tmp_path), SCHEMA, storage_options={"AWS_SECRET_ACCESS_KEY": "canary"})
    assert pickle.loads(pickle.dumps(writer)) == writer
    assert "canary" not in repr(writer)


# -- statistics ----------------------------------------------------------------------------------
def stats_of(table: pa.Table) -> dict:
    collector = StatsCollector(table.schema)
    collector.add(table)
    return json.loads(collector.to_json())


def test_stats_bounds_hold_for_timestamps_strings_and_decimals():
    ts = pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc),
                   dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), None], pa.timestamp("us", "UTC"))
    table = pa.table({"ts": ts, "s": ["b", "a" * 40, None],
                      "d": pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("-3.50")], pa.decimal128(12, 2)),
                      "day": pa.array([dt.date(2024, 1, 2), None, dt.date(2023, 1, 1)]),
                      "f": pa.array([1.5, float("nan"), None]), "b": pa.array([b"x", None, b"y"])})
    stats = stats_of(table)
    assert stats["minValues"]["ts"] == "2024-01-01T00:00:00.000Z"
    assert stats["maxValues"]["ts"] == "2024-01-02T03:04:05.124Z"          # rounded up: still a bound
    assert stats["minValues"]["s"] == "a" * 32 and stats["maxValues"]["s"] == "b"
    assert (stats["minValues"]["d"], stats["maxValues"]["d"]) == (-3.5, 1.25)
    assert (stats["minValues"]["day"], stats["maxValues"]["day"]) == ("2023-01-01", "2024-01-02")
    assert stats["minValues"]["f"] == stats["maxValues"]["f"] == 1.5          # NaN is not a bound
    assert "b" not in stats["minValues"] and "b" not in stats["nullCount"]    # no stats for binary
    assert stats["nullCount"] == {"ts": 1, "s": 1, "d": 1, "day": 1, "f": 1}


def test_a_long_maximum_string_is_left_out_rather_than_cut_too_small():
    stats = stats_of(pa.table({"s": ["a", "z" * 40]}))
    assert stats["minValues"]["s"] == "a" and "s" not in stats["maxValues"]


def test_stats_recurse_into_structs_and_merge_chunks():
    struct = pa.array([{"x": 1}, {"x": 3}, None], pa.struct([("x", pa.int32())]))
    collector = StatsCollector(pa.schema([("st", struct.type)]))
    collector.add(pa.table({"st": struct}))
    collector.add(pa.table({"st": pa.array([{"x": -2}], struct.type)}))
    stats = json.loads(collector.to_json())
    assert stats["numRecords"] == 4
    assert stats["minValues"] == {"st": {"x": -2}} and stats["maxValues"] == {"st": {"x": 3}}
    assert stats["nullCount"] == {"st": {"x": 1}}


@pytest.mark.parametrize("value, text", [
    (None, None), ("", None), ("x", "x"), (True, "true"), (7, "7"), (dt.date(2024, 1, 2), "2024-01-02"),
    (dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc), "2024-01-02 03:04:05.000006"),
])
def test_partition_values_use_deltas_string_forms(value, text):
    assert partition_value_text(value) == text


def test_files_written_but_never_committed_are_reported_as_unreferenced(tmp_path):
    from sinks.data_files import unreferenced_files
    from sinks.txn_table import TxnDeltaTable
    from groupmgr.core import OffsetRange

    table = TxnDeltaTable(str(tmp_path / "t"), "app", SCHEMA, partition_by=["topic"])
    epochs = table.claim([T0])
    table.commit(rows(T0, [0, 1]), [OffsetRange("t", 0, 0, 2)], epochs)
    assert unreferenced_files(table.path).count == 0
    stray = table.file_writer().write(rows(T0, [2]).to_batches())     # written, never committed
    report = unreferenced_files(table.path)
    assert report.count == 1 and report.bytes == stray.files[0].size


def test_a_count_by_column_is_counted_per_file_over_the_kept_rows_only(tmp_path):
    from sinks.data_files import metadata_batch

    writer = DataFileWriter(str(tmp_path), SCHEMA, count_by="name")
    table = pa.concat_tables([rows(T0, [0, 1, 2, 3], ["bad", "bad", "worse", None]), rows(T1, [0], ["bad"])])
    written = writer.write(table.to_batches(), {T0: 1, T1: 0})      # T0's offset 0 is a replay
    assert written.counts == {"bad": 2, "worse": 1, "": 1} and written.rows_written == 4
    records = metadata_batch(written, "dead").to_pylist()
    assert WrittenFiles.from_metadata(records, "dead").counts == written.counts
    assert DataFileWriter(str(tmp_path), SCHEMA).write(table.to_batches()).counts == {}
