"""The pure part of `scg offsets FILE reset`: --to and --partitions parsing, partition selection,
resolving targets from log starts/ends and timestamp answers, refusals naming each partition,
the plan's lines and the reset's commit info."""
from __future__ import annotations

import pytest

from groupmgr.core import ExitCategory, TopicPartition
from pipelines.runtime.offset_reset import (EARLIEST, LATEST, OFFSET, OFFSETS_RESET, TIMESTAMP, BadPartitionList,
                                            BadResetTarget, GroupHasMembers, LogUnknown, PartitionState,
                                            ResetIncomplete, ResetOutOfRange, ResetTarget, TimestampPastEnd,
                                            UnknownResetPartition, build_plan, commit_info, parse_partitions,
                                            parse_target, refuse_members, resolve_target, select_partitions)

T0, T1, T2, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2), TopicPartition("u", 0)
JAN_1_2026_MS = 1_767_225_600_000


def state(tp=T0, table=10, dead=10, committed=10, start=2, end=20, **more) -> PartitionState:
    return PartitionState(tp, table, dead, committed, "", start, end, 7, **more)


# -- --to ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("earliest", ResetTarget(EARLIEST)),
    ("LATEST", ResetTarget(LATEST)),
    ("0", ResetTarget(OFFSET, 0)),
    ("1234", ResetTarget(OFFSET, 1234)),
    ("2026-01-01T00:00:00Z", ResetTarget(TIMESTAMP, JAN_1_2026_MS)),
    ("2026-01-01", ResetTarget(TIMESTAMP, JAN_1_2026_MS)),                       # a date: midnight UTC
    ("2026-01-01T00:00:00", ResetTarget(TIMESTAMP, JAN_1_2026_MS)),              # no zone: UTC
    ("2026-01-01T01:00:00+01:00", ResetTarget(TIMESTAMP, JAN_1_2026_MS)),        # its zone counts
    ("2026-01-01T00:00:00.250Z", ResetTarget(TIMESTAMP, JAN_1_2026_MS + 250)),
])
def test_targets(text, expected):
    assert parse_target(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "+3", "3.5", "first", "2026-13-01", "yesterday", "1969-12-31T00:00:00Z"])
def test_malformed_target_names_the_argument(text):
    with pytest.raises(BadResetTarget) as raised:
        parse_target(text)
    assert raised.value.condition == "RESET_BAD_TARGET" and "--to" in str(raised.value)
    assert raised.value.exit_category is ExitCategory.CONFIG


def test_targets_describe_themselves():
    assert str(ResetTarget(OFFSET, 3)) == "offset 3"
    assert str(parse_target("2026-01-01T00:00:00.250Z")) == "time 2026-01-01T00:00:00.250Z"
    assert str(ResetTarget(EARLIEST)) == "earliest"


# -- --partitions --------------------------------------------------------------------------------
def test_partition_list_is_sorted_and_each_once():
    assert parse_partitions("t:3, t:0,u:0,t:3") == (T0, TopicPartition("t", 3), U0)
    assert parse_partitions("my.topic-v2_x:12") == (TopicPartition("my.topic-v2_x", 12),)
    assert parse_partitions(None) is None


@pytest.mark.parametrize("text, named", [("t", "'t'"), ("t:", "'t:'"), (":0", "':0'"), ("t:0,,t:1", "''"),
                                         ("t:-1", "'t:-1'"), ("t:x", "'t:x'"), ("t:0:1", "'t:0:1'")])
def test_malformed_partition_list_names_the_entry(text, named):
    with pytest.raises(BadPartitionList) as raised:
        parse_partitions(text)
    assert raised.value.condition == "RESET_BAD_PARTITIONS" and named in str(raised.value)


def test_every_partition_when_none_is_named():
    assert select_partitions([T1, T0, U0], None) == (T0, T1, U0)


def test_named_partitions_must_exist():
    assert select_partitions([T0, T1, U0], [T1]) == (T1,)
    with pytest.raises(UnknownResetPartition) as raised:
        select_partitions([T0, T1], [T1, T2, U0])
    message = str(raised.value)
    assert "t:2" in message and "u:0" in message and "t:1," not in message
    assert "t (0..1)" in message


def test_no_partitions_at_all_is_refused():
    with pytest.raises(UnknownResetPartition):
        select_partitions([], None)


# -- resolving a target --------------------------------------------------------------------------
def test_earliest_and_latest_are_the_log_start_and_end():
    assert resolve_target(state(start=2, end=20), ResetTarget(EARLIEST)) == 2
    assert resolve_target(state(start=2, end=20), ResetTarget(LATEST)) == 20


@pytest.mark.parametrize("offset", [2, 11, 20])
def test_an_offset_within_the_log_including_both_ends(offset):
    assert resolve_target(state(start=2, end=20), ResetTarget(OFFSET, offset)) == offset


@pytest.mark.parametrize("offset", [1, 21])
def test_an_offset_outside_the_log_is_refused_naming_the_partition(offset):
    with pytest.raises(ResetOutOfRange) as raised:
        resolve_target(state(start=2, end=20), ResetTarget(OFFSET, offset))
    assert "t:0" in str(raised.value) and "2..20" in str(raised.value)
    assert raised.value.exit_category is ExitCategory.CONFIG


def test_a_timestamp_resolves_to_the_brokers_answer():
    assert resolve_target(state(start=2, end=20), ResetTarget(TIMESTAMP, 1), at_time=7) == 7
    assert resolve_target(state(start=2, end=20), ResetTarget(TIMESTAMP, 1), at_time=19) == 19


@pytest.mark.parametrize("answer", [None, -1, 20])
def test_a_timestamp_past_the_log_end_is_refused_never_mapped_to_the_end(answer):
    with pytest.raises(TimestampPastEnd) as raised:
        resolve_target(state(start=2, end=20), ResetTarget(TIMESTAMP, 1), at_time=answer)
    assert "t:0" in str(raised.value) and raised.value.condition == "RESET_TIMESTAMP_PAST_END"


def test_an_undescribed_log_cannot_be_checked():
    undescribed = PartitionState(T0, 10, 10, 10, log_error="LEADER_NOT_AVAILABLE")
    with pytest.raises(LogUnknown) as raised:
        resolve_target(undescribed, ResetTarget(EARLIEST))
    assert "t:0" in str(raised.value) and "LEADER_NOT_AVAILABLE" in str(raised.value)
    assert raised.value.exit_category is ExitCategory.RUNTIME


# -- the plan ------------------------------------------------------------------------------------
def test_plan_moves_each_partition_and_keeps_where_it_came_from():
    plan = build_plan([state(T1, table=9, dead=None, committed=8), state(T0, table=10, dead=10, committed=None)],
                      ResetTarget(OFFSET, 3))
    assert [m.tp for m in plan.moves] == [T0, T1]
    assert plan.offsets == {T0: 3, T1: 3}
    assert plan.lines() == ["reset to offset 3:",
                            "  t:0: table 10 -> 3, dead letters 10 -> 3, group - -> 3",
                            "  t:1: table 9 -> 3, dead letters - -> 3, group 8 -> 3"]


def test_plan_by_timestamp_uses_each_partitions_answer():
    plan = build_plan([state(T0), state(T1)], ResetTarget(TIMESTAMP, 5), {T0: 4, T1: 6})
    assert plan.offsets == {T0: 4, T1: 6}


def test_plan_refusal_names_every_partition_refused_for_the_same_reason():
    states = [state(T0, start=2, end=20), state(T1, start=0, end=5), state(T2, start=4, end=30)]
    with pytest.raises(ResetOutOfRange) as raised:
        build_plan(states, ResetTarget(OFFSET, 25))
    message = str(raised.value)
    assert "t:0" in message and "t:1" in message and "t:2" not in message
    assert message.count("scg offsets FILE show") == 1  # the advice once, after the partitions


def test_plan_refusal_takes_the_first_reason_met():
    states = [state(T0, start=None, end=None), state(T1, start=0, end=5)]
    with pytest.raises(LogUnknown):
        build_plan(states, ResetTarget(OFFSET, 25))


def test_lag_is_measured_from_the_table_else_the_group():
    assert state(table=10, committed=4, end=20).lag == 10
    assert state(table=None, committed=4, end=20).lag == 16
    assert state(table=None, committed=None, end=20).lag is None
    assert state(table=25, end=20).lag == 0


# -- members, commit info ------------------------------------------------------------------------
def test_members_refuse_the_reset_naming_them():
    refuse_members("g", [])
    with pytest.raises(GroupHasMembers) as raised:
        refuse_members("g", [("m-1", None, "/10.0.0.1"), ("m-2", "inst-b", "/10.0.0.2")])
    message = str(raised.value)
    assert "m-1 on /10.0.0.1" in message and "m-2 (instance inst-b)" in message and "--force" in message
    assert raised.value.exit_category is ExitCategory.CONFIG


def test_commit_info_names_the_reset():
    plan = build_plan([state(T0), state(T1)], ResetTarget(OFFSET, 3))
    info = commit_info(plan, {T0: 10, T1: None}, "ann@host1", "scg offsets p.yaml reset --to 3")
    assert info["scg.event"] == OFFSETS_RESET
    assert info["scg.reset.by"] == "ann@host1"
    assert info["scg.reset.from"] == "t:0=10,t:1=-"
    assert info["scg.reset.to"] == "t:0=3,t:1=3"
    assert info["scg.reset.command"] == "scg offsets p.yaml reset --to 3"
    assert all(isinstance(v, str) for v in info.values())


def test_an_incomplete_reset_is_a_runtime_failure():
    assert ResetIncomplete("x").exit_category is ExitCategory.RUNTIME
