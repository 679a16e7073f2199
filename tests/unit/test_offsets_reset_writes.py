"""`scg offsets FILE reset`'s writes, on fake tables: every table is claimed before any offset is
written, the output table first, topic IDs only there, and a failure after a table was written is
RESET_INCOMPLETE naming it (a failure before is raised as it is)."""
from __future__ import annotations

import pytest

from groupmgr.core import TopicPartition
from pipelines.cli.offsets_command import OffsetsView, write_reset
from pipelines.runtime.offset_reset import OFFSETS_RESET, PartitionState, ResetIncomplete, ResetTarget, build_plan
from sinks.txn_table import FencedWriterError

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


class FakeTable:
    """Records the calls a reset makes; ``fail`` raises from record_partitions."""

    def __init__(self, path, calls, fail=None):
        self.path, self.calls, self.fail = path, calls, fail
        self.offsets = {T0: 10, T1: 9}

    def claim(self, partitions):
        self.calls.append((self.path, "claim", tuple(partitions)))
        return {tp: 2 for tp in partitions}

    def recorded_offsets(self, partitions):
        return {tp: self.offsets.get(tp) for tp in partitions}

    def record_partitions(self, epochs, offsets, topic_ids, event=None):
        self.calls.append((self.path, "record", dict(offsets), dict(topic_ids), dict(event or {})))
        if self.fail:
            raise self.fail
        self.offsets.update(offsets)

    def snapshot(self):
        return type("Snapshot", (), {"version": lambda self: 7})()


def view(table, dead):
    states = tuple(PartitionState(tp, 10, 10, 10, "", 0, 20, 99) for tp in (T0, T1))
    return OffsetsView(group=None, table=table, dead_table=dead, states=states)


def plan():
    return build_plan(view(None, None).states, ResetTarget("offset", 3))


def test_both_tables_are_claimed_before_any_offset_is_written():
    calls = []
    lines = write_reset(view(FakeTable("out", calls), FakeTable("dead", calls)), plan(), "ann@h", "scg ...")
    assert [c[:2] for c in calls] == [("out", "claim"), ("dead", "claim"), ("out", "record"), ("dead", "record")]
    out, dead = calls[2], calls[3]
    assert out[2] == dead[2] == {T0: 3, T1: 3}
    assert out[3] == {T0: 99, T1: 99} and dead[3] == {}  # the topic ID is the output table's
    assert out[4]["scg.event"] == OFFSETS_RESET and out[4]["scg.reset.from"] == "t:0=10,t:1=9"
    assert lines == ["output table out: offsets written (version 7)", "dead-letter table dead: offsets written (version 7)"]


def test_a_missing_table_is_left_alone():
    calls = []
    assert len(write_reset(view(FakeTable("out", calls), None), plan(), "ann@h", "scg ...")) == 1
    assert {c[0] for c in calls} == {"out"}


def test_a_failure_after_the_output_table_was_written_names_it():
    calls = []
    fenced = FencedWriterError("dead", T0, 2, 3)
    with pytest.raises(ResetIncomplete) as raised:
        write_reset(view(FakeTable("out", calls), FakeTable("dead", calls, fenced)), plan(), "ann@h", "scg ...")
    message = str(raised.value)
    assert "output table out: offsets written" in message and "FENCED_WRITER" in message
    assert "run the same command again" in message


def test_a_failure_before_any_table_was_written_is_raised_as_it_is():
    calls = []
    fenced = FencedWriterError("out", T0, 2, 3)
    with pytest.raises(FencedWriterError):
        write_reset(view(FakeTable("out", calls, fenced), FakeTable("dead", calls)), plan(), "ann@h", "scg ...")
    assert [c[:2] for c in calls if c[1] == "record"] == [("out", "record")]  # the dead-letter table untouched
