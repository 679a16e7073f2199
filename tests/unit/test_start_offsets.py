"""Where a newly assigned partition starts: Delta version > group commit > policy (pure)."""
import pytest

from groupmgr.core import TopicPartition
from pipelines.runtime.start_offsets import NoStartingOffsetError, StartDecision, choose_start_offsets

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
EARLIEST = {A: 10, B: 20, C: 30}
LATEST = {A: 110, B: 120, C: 130}


def choose(partitions, delta=None, committed=None, policy="earliest"):
    return choose_start_offsets(partitions, delta or {}, committed or {}, policy, EARLIEST, LATEST)


def test_delta_wins_over_kafka_and_policy():
    assert choose([A], delta={A: 55}, committed={A: 77}) == {A: StartDecision(55, "delta")}


def test_delta_version_zero_is_a_real_offset():
    assert choose([A], delta={A: 0}, committed={A: 77}) == {A: StartDecision(0, "delta")}


def test_kafka_commit_used_when_delta_has_none():
    assert choose([A], delta={A: None}, committed={A: 77}) == {A: StartDecision(77, "kafka")}


def test_kafka_commit_zero_is_a_real_offset():
    assert choose([A], committed={A: 0}, policy="latest") == {A: StartDecision(0, "kafka")}


def test_kafka_minus_one_means_no_commit():
    assert choose([A], committed={A: -1}) == {A: StartDecision(10, "earliest")}


@pytest.mark.parametrize("policy, expected", [("earliest", StartDecision(20, "earliest")),
                                              ("latest", StartDecision(120, "latest"))])
def test_policy_when_nothing_is_recorded(policy, expected):
    assert choose([B], policy=policy) == {B: expected}


def test_each_partition_decided_on_its_own():
    result = choose([C, B, A], delta={A: 5}, committed={B: 6})
    assert result == {A: StartDecision(5, "delta"), B: StartDecision(6, "kafka"),
                      C: StartDecision(30, "earliest")}
    assert list(result) == [A, B, C]


def test_error_policy_names_every_partition_without_an_offset():
    with pytest.raises(NoStartingOffsetError) as raised:
        choose([C, A, B], delta={B: 3}, policy="error")
    assert raised.value.condition == "NO_STARTING_OFFSET"
    assert raised.value.partitions == [A, C]
    assert "t-0" in str(raised.value) and "u-0" in str(raised.value)


def test_error_policy_is_fine_when_every_partition_has_an_offset():
    assert choose([A, B], delta={A: 1}, committed={B: 2}, policy="error") == {
        A: StartDecision(1, "delta"), B: StartDecision(2, "kafka")}


def test_a_recorded_offset_below_earliest_is_kept_for_the_sink_to_judge():
    assert choose([A], delta={A: 3}) == {A: StartDecision(3, "delta")}


def test_only_partitions_without_a_recorded_offset_need_the_policy():
    from pipelines.runtime.start_offsets import needs_policy

    assert needs_policy([C, B, A], {A: 5, B: None}, {B: 7, C: -1}) == [C]
    assert needs_policy([A, B], {A: 0}, {B: 0}) == []
    assert needs_policy([A, A], {}, {}) == [A]
