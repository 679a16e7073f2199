"""The per-partition rules before a query starts (pipelines.runtime.partition_checks)."""
from __future__ import annotations

import json

import pytest

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.partition_checks import (DATA_LOSS, LOG_TRUNCATED, NO_STARTING_OFFSET, TOPIC_RECREATED,
                                                PartitionLog, check_partition, lost_range_value,
                                                topic_fingerprint)

TP = TopicPartition("t", 3)
ID = topic_fingerprint("AAAAAAAAAAAAAAAAAAAAAA")
NEW_ID = topic_fingerprint("BBBBBBBBBBBBBBBBBBBBBB")


def test_fingerprint_is_a_stable_non_negative_64_bit_version():
    assert ID == topic_fingerprint("AAAAAAAAAAAAAAAAAAAAAA")
    assert 0 <= ID < 2 ** 63 and 0 <= NEW_ID < 2 ** 63 and ID != NEW_ID


def test_a_healthy_partition_starts_where_it_was():
    verdict = check_partition(TP, 50, ID, PartitionLog(0, 80, ID), None, "fail")
    assert (verdict.runs, verdict.offset, verdict.events, verdict.reset_to, verdict.lost) == (True, 50, (), None, None)


def test_start_at_either_end_of_the_log_is_healthy():
    assert check_partition(TP, 10, ID, PartitionLog(10, 80, ID), None, "fail").offset == 10
    assert check_partition(TP, 80, ID, PartitionLog(10, 80, ID), None, "fail").offset == 80


def test_a_partition_the_brokers_cannot_describe_is_stopped_under_their_condition():
    verdict = check_partition(TP, 50, ID, None, "LEADER_NOT_AVAILABLE", "fail")
    assert (verdict.runs, verdict.condition) == (False, "LEADER_NOT_AVAILABLE")
    assert check_partition(TP, 50, ID, None, None, "fail").condition == "PARTITION_UNAVAILABLE"


def test_no_start_offset_stops_only_that_partition():
    verdict = check_partition(TP, None, None, PartitionLog(0, 80, ID), None, "fail")
    assert (verdict.runs, verdict.condition) == (False, NO_STARTING_OFFSET)
    assert "starting_offsets is 'error'" in verdict.detail


def test_data_loss_with_fail_stops_the_partition_and_names_the_range():
    verdict = check_partition(TP, 10, ID, PartitionLog(25, 80, ID), None, "fail")
    assert (verdict.runs, verdict.condition, verdict.lost) == (False, DATA_LOSS, None)
    assert "offsets 10..24 of t-3 were deleted" in verdict.detail and "15 records" in verdict.detail


def test_data_loss_with_skip_moves_to_the_earliest_offset_and_keeps_the_range():
    verdict = check_partition(TP, 10, ID, PartitionLog(25, 80, ID), None, "skip")
    assert (verdict.runs, verdict.offset, verdict.events) == (True, 25, (DATA_LOSS,))
    assert verdict.lost == OffsetRange("t", 3, 10, 25) and verdict.reset_to is None


def test_a_recreated_topic_is_read_from_its_start_never_taken_for_a_replay():
    verdict = check_partition(TP, 500, ID, PartitionLog(0, 40, NEW_ID), None, "fail")
    assert (verdict.runs, verdict.offset, verdict.reset_to, verdict.events) == (True, 0, 0, (TOPIC_RECREATED,))
    # the new incarnation grew past the old offset: still read from 0
    assert check_partition(TP, 10, ID, PartitionLog(0, 40, NEW_ID), None, "fail").offset == 0


def test_a_recreated_topic_whose_start_was_deleted_follows_the_data_loss_policy():
    skip = check_partition(TP, 500, ID, PartitionLog(7, 40, NEW_ID), None, "skip")
    assert (skip.offset, skip.reset_to, skip.lost, skip.events) == (7, 0, OffsetRange("t", 3, 0, 7),
                                                                    (TOPIC_RECREATED, DATA_LOSS))
    fail = check_partition(TP, 500, ID, PartitionLog(7, 40, NEW_ID), None, "fail")
    assert (fail.runs, fail.condition) == (False, DATA_LOSS)


def test_a_truncated_log_resets_to_its_end():
    verdict = check_partition(TP, 90, ID, PartitionLog(0, 60, ID), None, "fail", "delta")
    assert (verdict.offset, verdict.reset_to, verdict.events) == (60, 60, (LOG_TRUNCATED,))
    assert "records from 60 on are read as new" in verdict.detail


def test_no_recorded_topic_id_adopts_the_current_one():
    verdict = check_partition(TP, 50, None, PartitionLog(0, 80, NEW_ID), None, "fail")
    assert (verdict.offset, verdict.events) == (50, ())


@pytest.mark.parametrize("start, end", [(0, 1), (10, 25)])
def test_lost_range_value_states_the_range(start, end):
    value = json.loads(lost_range_value(OffsetRange("t", 3, start, end), 123))
    assert (value["lost_from"], value["lost_until"], value["records"], value["detected_at_ms"]) == \
        (start, end, end - start, 123)
