"""Offset values, Spark JSON, and the planned ranges read from a checkpoint's offset log
(docs/DESIGN.md invariants 2 and 3: next-offset convention; ranges are what Spark planned, not the rows)."""
from groupmgr.core import TopicPartition
from groupmgr.core import OffsetRange, ranges_between
from pipelines.runtime.checkpoint_log import CheckpointOffsetLog
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


def _write_offsets(checkpoint, batch_id, offsets):
    directory = checkpoint / "offsets"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / str(batch_id)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{to_spark_json(offsets)}\n')


def test_checkpoint_log_gives_planned_ranges_per_batch(tmp_path):
    _write_offsets(tmp_path, 0, {T0: 100, T1: 40})
    _write_offsets(tmp_path, 1, {T0: 130, T1: 40})
    log = CheckpointOffsetLog(tmp_path, {T0: 90, T1: 40})
    assert log.ranges(0) == (OffsetRange("t", 0, 90, 100), OffsetRange("t", 1, 40, 40))
    assert log.ranges(1) == (OffsetRange("t", 0, 100, 130), OffsetRange("t", 1, 40, 40))
