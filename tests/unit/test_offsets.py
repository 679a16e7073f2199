"""Offset values, Spark JSON, and the planned ranges read from a checkpoint's offset log
(docs/DESIGN.md invariants 2 and 3: next-offset convention; ranges are what Spark planned, not the rows)."""
from groupmgr.core import TopicPartition
import pytest

from groupmgr.core import OffsetRange, ranges_between
from pipelines.runtime.checkpoint_log import CheckpointOffsetLog
from pipelines.runtime.hadoop_fs import join
from pipelines.runtime.spark_offsets import assign_json, from_spark_json, to_spark_json

T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def test_spark_json_round_trip_is_sorted_and_exact():
    offsets = {T1: 7, U0: 0, T0: 42}
    text = to_spark_json(offsets)
    assert text == '{"t": {"0": 42, "1": 7}, "u": {"0": 0}}'
    assert from_spark_json(text) == offsets
    assert assign_json([U0, T1, T0, T1]) == '{"t": [0, 1], "u": [0]}'


def test_ranges_use_next_offset_convention():
    ranges = ranges_between({T0: 10, T1: 5}, {T0: 15, T1: 5, U0: 3})
    assert ranges == (OffsetRange("t", 0, 10, 15), OffsetRange("t", 1, 5, 5), OffsetRange("u", 0, 3, 3))
    assert [r.count for r in ranges] == [5, 0, 0]


def _offsets_file(offsets):
    return f'v1\n{{"batchWatermarkMs":0}}\n{to_spark_json(offsets)}\n'


def test_checkpoint_log_gives_planned_ranges_per_batch():
    files = {"s3a://bucket/ckpt/gen-1/offsets/0": _offsets_file({T0: 100, T1: 40}),
             "s3a://bucket/ckpt/gen-1/offsets/1": _offsets_file({T0: 130, T1: 40})}
    log = CheckpointOffsetLog("s3a://bucket/ckpt/gen-1/", {T0: 90, T1: 40}, files.__getitem__)
    assert log.ranges(0) == (OffsetRange("t", 0, 90, 100), OffsetRange("t", 1, 40, 40))
    assert log.ranges(1) == (OffsetRange("t", 0, 100, 130), OffsetRange("t", 1, 40, 40))


@pytest.mark.parametrize("root, parts, expected", [
    ("s3a://bucket/root", ("gen-1", "abc"), "s3a://bucket/root/gen-1/abc"),
    ("s3a://bucket/root/", ("/gen-1/",), "s3a://bucket/root/gen-1"),
    ("hdfs://nn:8020/x", ("y",), "hdfs://nn:8020/x/y"),
    ("file:///tmp/x", ("y",), "file:///tmp/x/y"),
    ("/tmp/x", ("y", "z"), "/tmp/x/y/z"),
    ("relative/dir", ("y",), "relative/dir/y"),
    ("/", ("y",), "/y"),
])
def test_join_keeps_uri_schemes(root, parts, expected):
    assert join(root, *parts) == expected
