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


# -- the exact boundaries of each rule ------------------------------------------------------------
# A start offset is next-offset-to-read (invariant 2): start == log end means "caught up", start ==
# earliest means "nothing deleted before it was read". Each boundary is checked on both sides.

def test_a_fingerprint_is_the_first_8_bytes_of_the_ids_sha256_with_the_top_bit_cleared():
    """Tables record fingerprints: they must stay the same across versions of this code, or every
    topic would look recreated after an upgrade."""
    assert topic_fingerprint("AAAAAAAAAAAAAAAAAAAAAA") == 0x8A5BDB4CC1516412 & (2 ** 63 - 1) == 746431285967283218
    assert topic_fingerprint("BBBBBBBBBBBBBBBBBBBBBB") == 5088984084423192689


@pytest.mark.parametrize("on_data_loss", ["fail", "skip"])
def test_a_caught_up_partition_is_not_truncated(on_data_loss):
    """Start offset == log end: every record was read; no reset, no event, the tables stay as they are."""
    verdict = check_partition(TP, 80, ID, PartitionLog(10, 80, ID), None, on_data_loss)
    assert (verdict.offset, verdict.events, verdict.reset_to, verdict.lost, verdict.detail) == (80, (), None, None, "")


@pytest.mark.parametrize("on_data_loss", ["fail", "skip"])
def test_a_caught_up_empty_log_is_neither_truncated_nor_lost(on_data_loss):
    """Start == earliest == log end (every record deleted by retention after it was read): it runs as is."""
    verdict = check_partition(TP, 80, ID, PartitionLog(80, 80, ID), None, on_data_loss)
    assert (verdict.offset, verdict.events, verdict.reset_to, verdict.lost) == (80, (), None, None)


def test_one_past_the_log_end_is_truncated_by_one():
    verdict = check_partition(TP, 81, ID, PartitionLog(10, 80, ID), None, "fail")
    assert (verdict.offset, verdict.events, verdict.reset_to, verdict.lost) == (80, (LOG_TRUNCATED,), 80, None)
    assert "t-3 ends at 80, below the start offset 81 (recorded)" in verdict.detail


@pytest.mark.parametrize("on_data_loss", ["fail", "skip"])
def test_a_partition_at_the_earliest_offset_has_lost_nothing(on_data_loss):
    """Start offset == earliest: nothing was deleted before it was read, under either policy."""
    verdict = check_partition(TP, 10, ID, PartitionLog(10, 80, ID), None, on_data_loss)
    assert (verdict.offset, verdict.events, verdict.reset_to, verdict.lost, verdict.detail) == (10, (), None, None, "")


def test_one_below_the_earliest_offset_loses_exactly_one_record():
    skip = check_partition(TP, 9, ID, PartitionLog(10, 80, ID), None, "skip")
    assert (skip.offset, skip.events, skip.reset_to, skip.lost) == (10, (DATA_LOSS,), None, OffsetRange("t", 3, 9, 10))
    assert skip.detail == ("offsets 9..9 of t-3 were deleted before they were read (1 records); "
                           "skipped (source.on_data_loss: skip), a data_loss row records the range")
    fail = check_partition(TP, 9, ID, PartitionLog(10, 80, ID), None, "fail")
    assert (fail.offset, fail.condition, fail.events, fail.lost) == (None, DATA_LOSS, (), None)
    assert fail.detail == ("offsets 9..9 of t-3 were deleted before they were read (1 records); "
                           "source.on_data_loss is 'fail'")


@pytest.mark.parametrize("on_data_loss", ["fail", "skip"])
def test_a_log_truncated_to_its_earliest_offset_resets_without_data_loss(on_data_loss):
    """After a truncation the reset start is the log end; when that is also the earliest offset (an
    empty log) nothing was lost: the partition runs from there under either policy."""
    verdict = check_partition(TP, 90, ID, PartitionLog(60, 60, ID), None, on_data_loss, "delta")
    assert (verdict.offset, verdict.events, verdict.reset_to, verdict.lost) == (60, (LOG_TRUNCATED,), 60, None)
    assert verdict.detail == ("t-3 ends at 60, below the start offset 90 (delta); "
                              "the log was truncated, records from 60 on are read as new")


# -- a recreated topic ----------------------------------------------------------------------------

@pytest.mark.parametrize("start", [0, 40, 41, 500])
def test_a_recreated_topic_resets_to_0_and_carries_the_new_topic_id(start):
    """Whatever offset the old topic had reached, below, at or past the new log end: reset to 0,
    read under the new ID, no truncation (the new log is not compared with the old offset)."""
    verdict = check_partition(TP, start, ID, PartitionLog(0, 40, NEW_ID), None, "fail")
    assert (verdict.offset, verdict.reset_to, verdict.events, verdict.topic_id, verdict.lost) == (
        0, 0, (TOPIC_RECREATED,), NEW_ID, None)
    assert verdict.detail == (f"topic t was recreated (new topic ID); reading the new one from offset 0 "
                              f"(the table had reached {start})")


def test_a_recreated_empty_topic_resets_to_0_without_truncation_or_loss():
    verdict = check_partition(TP, 500, ID, PartitionLog(0, 0, NEW_ID), None, "skip")
    assert (verdict.offset, verdict.reset_to, verdict.events, verdict.topic_id) == (0, 0, (TOPIC_RECREATED,), NEW_ID)


def test_a_recreated_topic_whose_start_was_deleted_names_both_events_and_the_new_id():
    skip = check_partition(TP, 500, ID, PartitionLog(7, 40, NEW_ID), None, "skip")
    assert skip.topic_id == NEW_ID
    assert skip.detail == ("topic t was recreated (new topic ID); reading the new one from offset 0 (the table "
                           "had reached 500); offsets 0..6 of t-3 were deleted before they were read (7 records); "
                           "skipped (source.on_data_loss: skip), a data_loss row records the range")
    fail = check_partition(TP, 500, ID, PartitionLog(7, 40, NEW_ID), None, "fail")
    assert (fail.events, fail.reset_to, fail.lost, fail.topic_id) == ((TOPIC_RECREATED,), None, None, NEW_ID)


def test_every_verdict_with_a_log_carries_the_brokers_topic_id():
    """The tables record the ID the partition is read under; one the brokers did not describe has none."""
    logs = {"healthy": (50, ID, PartitionLog(0, 80, ID)), "first": (50, None, PartitionLog(0, 80, NEW_ID)),
            "no start": (None, ID, PartitionLog(0, 80, ID)), "lost": (5, ID, PartitionLog(10, 80, ID)),
            "truncated": (90, ID, PartitionLog(0, 80, ID))}
    for name, (start, recorded, log) in logs.items():
        assert check_partition(TP, start, recorded, log, None, "fail").topic_id == log.topic_id, name
    assert check_partition(TP, 50, ID, None, "LEADER_NOT_AVAILABLE", "fail").topic_id is None


def test_the_same_topic_id_is_not_a_recreation():
    verdict = check_partition(TP, 0, ID, PartitionLog(0, 80, ID), None, "fail")
    assert (verdict.offset, verdict.events, verdict.reset_to) == (0, (), None)


def test_the_lost_range_value_is_sorted_json_naming_the_rule():
    """The marker row's value: the same range always gives the same bytes (sorted keys), and says
    which setting skipped it."""
    assert lost_range_value(OffsetRange("t", 3, 4, 9), 123) == (
        b'{"detected_at_ms": 123, "lost_from": 4, "lost_until": 9, "records": 5, '
        b'"rule": "source.on_data_loss: skip"}')


def test_a_source_change_is_retriable_under_its_own_condition():
    from pipelines.runtime.partition_checks import SourceChanged

    error = SourceChanged(TOPIC_RECREATED, "topic t has a new ID")
    assert (error.condition, error.retriable) == (TOPIC_RECREATED, True)


@pytest.mark.parametrize("policy", ["fail", "FAIL", "Skip", ""])
def test_only_the_skip_policy_skips_lost_records(policy):
    """Records deleted before they were read are skipped only under exactly ``skip``; any other
    policy value stops the partition (nothing is skipped by mistake)."""
    verdict = check_partition(TP, 9, ID, PartitionLog(10, 80, ID), None, policy)
    assert (verdict.runs, verdict.condition, verdict.lost) == (False, DATA_LOSS, None)


def test_every_verdict_names_its_partition():
    """The runner files each verdict under its ``tp``: running, reset, skipped or stopped."""
    cases = [(50, ID, PartitionLog(0, 80, ID), None, "fail"), (50, ID, None, "LEADER_NOT_AVAILABLE", "fail"),
             (None, ID, PartitionLog(0, 80, ID), None, "fail"), (5, ID, PartitionLog(10, 80, ID), None, "fail"),
             (5, ID, PartitionLog(10, 80, ID), None, "skip"), (90, ID, PartitionLog(0, 80, ID), None, "fail")]
    for start, recorded, log, error, policy in cases:
        assert check_partition(TP, start, recorded, log, error, policy).tp == TP


def test_a_partition_the_brokers_cannot_describe_is_named_in_the_detail():
    verdict = check_partition(TP, 50, ID, None, "LEADER_NOT_AVAILABLE", "fail")
    assert verdict.detail == "the brokers did not describe t-3"
