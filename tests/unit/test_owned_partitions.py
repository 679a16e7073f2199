"""The owned partitions (owned_partitions.OwnedPartitions) on real Delta tables (deltalake, no
Spark, no Kafka: the brokers' view of the logs and the group's commits are given): the verdicts a
start is made from, the tables made to agree with them before the query reads, and stopped
partitions re-checked with backoff (docs/DESIGN.md, invariants 3 and 10)."""
from types import SimpleNamespace

import pyarrow as pa
from deltalake import DeltaTable

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.batch_writer import TableTargets
from pipelines.runtime.broker_probe import ProbeResult
from pipelines.runtime.owned_partitions import STOPPED_RECHECK, OwnedPartitions, PartitionChecks, StoppedPartition
from pipelines.runtime.partition_checks import DATA_LOSS_REASON, PartitionLog, PartitionVerdict, topic_fingerprint
from sinks.txn_table import FencedWriterError, TxnDeltaTable
from tests.support.fake_clock import FakeClock

TP = TopicPartition("t", 0)
OLD_ID, NEW_ID = topic_fingerprint("old-topic-id"), topic_fingerprint("new-topic-id")
OUTPUT = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("v", pa.string())])
DEAD = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                  ("timestamp", pa.timestamp("us", tz="UTC")), ("key", pa.binary()), ("value", pa.binary()),
                  ("reason", pa.string())])


class Brokers:
    """What the brokers say of each partition's log (None: the partition is not described)."""

    def __init__(self, logs):
        self.logs = logs

    def describe(self, partitions):
        return ProbeResult({tp: self.logs[tp] for tp in partitions if self.logs.get(tp)},
                           {tp: "LEADER_NOT_AVAILABLE" for tp in partitions if not self.logs.get(tp)})


def owned(tmp_path, logs, on_data_loss="skip", committed=None, clock=None, starting_offsets="earliest", routed=0):
    tables = SimpleNamespace(table=TxnDeltaTable(str(tmp_path / "out"), "app", OUTPUT),
                             dead_table=TxnDeltaTable(str(tmp_path / "dead"), "app", DEAD),
                             routed=tuple(TxnDeltaTable(str(tmp_path / f"out{i}"), "app", OUTPUT) for i in range(routed)))
    lines, commits = [], []
    source = SimpleNamespace(starting_offsets=starting_offsets, on_data_loss=on_data_loss)
    parts = OwnedPartitions(tables, source, lambda partitions: dict(committed or {}), Brokers(logs).describe,
                            lambda offsets, metadata: commits.append((dict(offsets), metadata)) or True,
                            lines.append, clock or FakeClock(), wall_clock_ms=lambda: 1_700_000_000_000)
    return parts, tables, lines, commits


def start(parts, tables, partitions=(TP,)) -> PartitionChecks:
    """What a reader's start does: claim, check, make the tables agree."""
    targets = parts.claim(partitions)
    checks = parts.check(partitions)
    parts.apply(targets, checks)
    return checks


def test_a_new_partition_records_its_topic_id_and_starts_where_the_policy_says(tmp_path):
    parts, tables, _, _ = owned(tmp_path, {TP: PartitionLog(3, 10, OLD_ID)})
    checks = start(parts, tables)
    assert [(v.tp, v.offset, v.events) for v in checks.verdicts] == [(TP, 3, ())]
    assert checks.origin(checks.verdicts[0]) == "earliest"
    assert tables.table.recorded([TP]) == ({TP: None}, {TP: OLD_ID})


def test_the_tables_offset_wins_over_the_groups(tmp_path):
    parts, tables, _, _ = owned(tmp_path, {TP: PartitionLog(0, 10, OLD_ID)}, committed={TP: 4})
    start(parts, tables)
    epochs = tables.table.claim([TP])
    tables.table.commit(OUTPUT.empty_table(), [OffsetRange("t", 0, 0, 7)], epochs)
    assert start(parts, tables).verdicts[0].offset == 7


def test_with_several_output_tables_a_partition_starts_from_the_lowest_offset_any_holds(tmp_path):
    """A batch committed to some tables and not yet to the others is read again from there (each
    table skips what it holds); a table that holds nothing of it yet does not hold it back."""
    parts, tables, _, _ = owned(tmp_path, {TP: PartitionLog(0, 10, OLD_ID)}, committed={TP: 9}, routed=2)
    assert start(parts, tables).verdicts[0].offset == 9  # nothing in any table: the group's offset
    first, second, third = (table for table, _ in parts.claim([TP]).outputs)
    assert [t.recorded([TP]) for t in (first, second, third)] == [({TP: None}, {TP: OLD_ID})] * 3
    first.commit(OUTPUT.empty_table(), [OffsetRange("t", 0, 0, 7)], parts.claim([TP]).epochs)
    assert start(parts, tables).verdicts[0].offset == 7          # the others hold nothing yet
    claim = parts.claim([TP])
    claim.routed[0].table.commit(OUTPUT.empty_table(), [OffsetRange("t", 0, 0, 5)], claim.routed[0].epochs)
    assert start(parts, tables).verdicts[0].offset == 5
    assert parts.recorded([TP]) == ({TP: 5}, {TP: OLD_ID})


def test_a_recreated_topic_resets_both_tables_to_0_and_records_the_new_id_once(tmp_path):
    parts, tables, lines, _ = owned(tmp_path, {TP: PartitionLog(0, 2, NEW_ID)})
    epochs = tables.table.claim([TP])
    tables.table.record_partitions(epochs, {TP: 8}, {TP: OLD_ID})  # the table read the old topic to 8
    checks = start(parts, tables)
    assert checks.verdicts[0].offset == 0 and checks.verdicts[0].events == ("TOPIC_RECREATED",)
    assert tables.table.recorded([TP]) == ({TP: 0}, {TP: NEW_ID})
    assert tables.dead_table.recorded_offsets([TP]) == {TP: 0}
    assert any("[TOPIC_RECREATED]" in line for line in lines)
    again = start(parts, tables)  # the next start: the table holds the new ID, nothing is reset again
    assert again.verdicts[0].offset == 0 and again.verdicts[0].events == ()
    assert again.verdicts[0].reset_to is None


def test_a_caught_up_partition_is_not_reset(tmp_path):
    parts, tables, _, _ = owned(tmp_path, {TP: PartitionLog(0, 10, OLD_ID)})
    epochs = tables.table.claim([TP])
    tables.table.record_partitions(epochs, {TP: 10}, {TP: OLD_ID})
    checks = start(parts, tables)
    assert checks.verdicts[0].offset == 10 and checks.verdicts[0].events == ()
    assert checks.verdicts[0].reset_to is None
    assert tables.table.recorded([TP]) == ({TP: 10}, {TP: OLD_ID})


def test_a_truncated_log_resets_both_tables_to_its_end(tmp_path):
    parts, tables, _, _ = owned(tmp_path, {TP: PartitionLog(0, 6, OLD_ID)})
    epochs = tables.table.claim([TP])
    tables.table.record_partitions(epochs, {TP: 9}, {TP: OLD_ID})
    checks = start(parts, tables)
    assert checks.verdicts[0].offset == 6 and checks.verdicts[0].events == ("LOG_TRUNCATED",)
    assert tables.table.recorded_offsets([TP]) == {TP: 6} and tables.dead_table.recorded_offsets([TP]) == {TP: 6}


def test_a_skipped_range_is_one_data_loss_row_committed_in_both_tables_once(tmp_path):
    parts, tables, _, _ = owned(tmp_path, {TP: PartitionLog(5, 10, OLD_ID)})
    epochs = tables.table.claim([TP])
    tables.table.record_partitions(epochs, {TP: 2}, {TP: OLD_ID})
    checks = start(parts, tables)
    assert checks.verdicts[0].offset == 5 and checks.verdicts[0].lost == OffsetRange("t", 0, 2, 5)
    dead = DeltaTable(tables.dead_table.path).to_pyarrow_table().to_pylist()
    assert [(r["offset"], r["reason"]) for r in dead] == [(2, DATA_LOSS_REASON)]
    assert b'"lost_from": 2, "lost_until": 5' in dead[0]["value"]
    assert tables.table.recorded_offsets([TP]) == {TP: 5} and tables.dead_table.recorded_offsets([TP]) == {TP: 5}
    start(parts, tables)  # a retry finds the range recorded and writes nothing
    assert len(DeltaTable(tables.dead_table.path).to_pyarrow_table()) == 1


def test_a_stopped_partition_is_committed_with_its_condition_and_rechecked_with_backoff(tmp_path):
    clock = FakeClock()
    parts, tables, lines, commits = owned(tmp_path, {TP: None}, clock=clock)
    parts.assign([TP])
    checks = start(parts, tables)
    assert checks.runs == [] and checks.verdicts[0].condition == "LEADER_NOT_AVAILABLE"
    parts.note_stopped(PartitionChecks(checks.verdicts, recorded_offsets={TP: 4}))
    assert commits == [({TP: 4}, "scg:stopped:LEADER_NOT_AVAILABLE: the brokers did not describe t-0")]
    first = parts.stopped[TP].next_check
    assert clock() + STOPPED_RECHECK.delay(1, 0.0) <= first <= clock() + STOPPED_RECHECK.delay(1, 1.0)
    assert not parts.recheck_due() and parts.stopped[TP].checks == 1   # not due yet
    clock.now = first
    assert not parts.recheck_due() and parts.stopped[TP].checks == 2   # still stopped: backoff grows
    assert parts.stopped[TP].next_check - clock() >= STOPPED_RECHECK.delay(2, 0.0)
    assert len(commits) == 1 and sum("stopped: [LEADER_NOT_AVAILABLE]" in line for line in lines) == 1
    parts.check = lambda partitions: PartitionChecks([PartitionVerdict(TP, 4)])
    clock.now = parts.stopped[TP].next_check
    assert parts.recheck_due()                                          # it can run again


def test_a_stopped_partition_no_longer_owned_is_not_rechecked(tmp_path):
    clock = FakeClock()
    parts, _, _, _ = owned(tmp_path, {TP: None}, clock=clock)
    parts.assign([TP])
    parts.note_stopped(PartitionChecks([PartitionVerdict(TP, None, "LEADER_NOT_AVAILABLE", "x")]))
    parts.assign([])
    clock.advance(3600)
    asked = []
    parts.check = lambda partitions: asked.append(partitions) or PartitionChecks([])
    assert not parts.recheck_due() and asked == [] and parts.stopped == {}


def test_a_reset_names_its_events_in_both_tables_history(tmp_path):
    parts, tables, _, _ = owned(tmp_path, {TP: PartitionLog(0, 2, NEW_ID)})
    epochs = tables.table.claim([TP])
    tables.table.record_partitions(epochs, {TP: 8}, {TP: OLD_ID})
    checks = start(parts, tables)
    detail = checks.verdicts[0].detail
    for path in (tables.table.path, tables.dead_table.path):
        last = DeltaTable(path).history(1)[0]
        assert last["scg.event"] == "TOPIC_RECREATED" and last["scg.detail"] == detail


def test_where_each_start_came_from(tmp_path):
    from groupmgr.offsets import OffsetAndMetadata

    B = TopicPartition("t", 1)
    parts, tables, _, _ = owned(tmp_path, {TP: PartitionLog(2, 10, OLD_ID), B: PartitionLog(2, 10, OLD_ID)},
                                committed={TP: OffsetAndMetadata(6, "delta:3", leader_epoch=1)},
                                starting_offsets="latest")
    checks = start(parts, tables, (TP, B))
    by_tp = {v.tp: v for v in checks.verdicts}
    assert by_tp[TP].offset == 6 and checks.origin(by_tp[TP]) == "kafka"      # the group's commit
    assert by_tp[B].offset == 10 and checks.origin(by_tp[B]) == "latest"      # the policy: the log end
    epochs = tables.table.claim([TP])
    tables.table.record_partitions(epochs, {TP: 4}, {})
    again = start(parts, tables, (TP,))
    assert again.verdicts[0].offset == 4 and again.origin(again.verdicts[0]) == "delta"
    assert again.recorded_offsets == {TP: 4}
    recreated = PartitionVerdict(TP, 0, events=("TOPIC_RECREATED", "LOG_TRUNCATED"))
    assert again.origin(recreated) == "log_truncated"                          # the last rule that moved it


def test_a_lost_range_marker_is_stamped_when_it_was_found(tmp_path):
    import datetime as dt
    import json

    parts, tables, _, _ = owned(tmp_path, {TP: PartitionLog(5, 10, OLD_ID)})
    epochs = tables.table.claim([TP])
    tables.table.record_partitions(epochs, {TP: 2}, {TP: OLD_ID})
    start(parts, tables)
    row = DeltaTable(tables.dead_table.path).to_pyarrow_table().to_pylist()[0]
    assert row["timestamp"] == dt.datetime.fromtimestamp(1_700_000_000, dt.timezone.utc)
    assert row["key"] is None and json.loads(row["value"])["detected_at_ms"] == 1_700_000_000_000


def test_a_recheck_that_fails_keeps_the_partition_stopped_with_its_condition(tmp_path):
    clock = FakeClock()
    parts, _, lines, _ = owned(tmp_path, {TP: None}, clock=clock)
    B = TopicPartition("t", 1)
    parts.assign([TP, B])
    parts.note_stopped(PartitionChecks([PartitionVerdict(TP, None, "LEADER_NOT_AVAILABLE", "x"),
                                        PartitionVerdict(B, None, "KAFKA_DATA_LOSS", "y")]))
    since = parts.stopped[TP].since
    parts.stopped[B] = StoppedPartition(parts.stopped[B].verdict, since, clock() + 3600, 1)  # not due
    clock.advance(STOPPED_RECHECK.delay(1, 1.0))

    def failing(partitions):
        assert tuple(partitions) == (TP,)  # only the due one is asked about
        raise RuntimeError("brokers unreachable")

    parts.check = failing
    assert not parts.recheck_due()
    assert parts.stopped[TP].verdict.condition == "LEADER_NOT_AVAILABLE" and parts.stopped[TP].checks == 2
    assert parts.stopped[TP].since == since and B in parts.stopped
    assert [v.tp for v in parts.stopped_except([TP])] == [B]
    assert not any("resumes" in line for line in lines)


def _refusal(table, epochs):
    try:
        table.plan([OffsetRange(TP.topic, TP.partition, 0, 1)], epochs)
    except FencedWriterError as refusal:
        return refusal
    raise AssertionError("the batch was not refused")


def test_a_refusal_of_an_older_claim_of_this_member_s_is_told_from_another_member_s_claim(tmp_path):
    parts, tables, _, _ = owned(tmp_path, {TP: PartitionLog(0, 10, OLD_ID)})
    first = parts.claim([TP]).epochs
    again = parts.claim([TP]).epochs  # this member's own newer claim refuses its older batch
    assert parts.claimed_since(_refusal(tables.table, first))
    other = TxnDeltaTable(str(tmp_path / "out"), "app", OUTPUT)
    newer = other.claim([TP])     # another member's claim, newer than this member's latest
    refusal = _refusal(tables.table, again)
    assert refusal.recorded == newer[TP] and not parts.claimed_since(refusal)
    parts.claim([TP])             # claimed again since (the group gave the partition back)
    assert parts.claimed_since(refusal)
    TxnDeltaTable(str(tmp_path / "dead"), "app", DEAD).claim([TP])  # epochs are per table
    assert not parts.claimed_since(_refusal(tables.dead_table, {TP: 0}))


def test_partitions_waiting_on_a_transient_fault_are_published_at_the_table_s_offsets(tmp_path):
    """For scg describe: the partitions a retried batch holds back, at the table's offsets; the
    stopped ones keep their own condition; a never-written partition has no offset to commit."""
    t1, t2 = TopicPartition("t", 1), TopicPartition("t", 2)
    parts, tables, _, commits = owned(tmp_path, {})
    parts.assign([TP, t1, t2])
    epochs = tables.table.claim([TP, t1])
    tables.table.commit(pa.table({"topic": ["t"], "partition": [0], "offset": [6], "v": ["x"]}, schema=OUTPUT),
                        [OffsetRange("t", 0, 6, 7)], epochs)
    parts.note_stopped(PartitionChecks([PartitionVerdict(t1, None, condition="LEADER_NOT_AVAILABLE", detail="gone")],
                                       recorded_offsets={t1: 3}))
    commits.clear()
    parts.publish_waiting("SCHEMA_INCOMPATIBLE", "version 4 of subject t-value cannot be written")
    assert commits == [({TP: 7}, "scg:stopped:SCHEMA_INCOMPATIBLE: version 4 of subject t-value cannot be written")]


def test_a_waiting_partition_the_tables_hold_nothing_of_is_published_at_its_query_s_start(tmp_path):
    """A first batch retried under a transient fault: describe still names the condition, at the
    offset the query started the partition from; a revoked partition is not published."""
    t1 = TopicPartition("t", 1)
    parts, tables, _, commits = owned(tmp_path, {TP: PartitionLog(3, 10, OLD_ID), t1: PartitionLog(0, 4, OLD_ID)})
    parts.assign([TP, t1])
    start(parts, tables, (TP, t1))
    commits.clear()
    parts.publish_waiting("SCHEMA_REGISTRY_UNAVAILABLE", "no answer")
    assert commits == [({TP: 3, t1: 0}, "scg:stopped:SCHEMA_REGISTRY_UNAVAILABLE: no answer")]
    parts.revoke([t1])
    commits.clear()
    parts.publish_waiting("SCHEMA_REGISTRY_UNAVAILABLE", "no answer")
    assert commits == [({TP: 3}, "scg:stopped:SCHEMA_REGISTRY_UNAVAILABLE: no answer")]


def test_a_waiting_partition_started_at_the_log_s_end_is_not_published(tmp_path):
    """``starting_offsets: latest`` skips the records before the log's end: committing that start
    would claim records no table holds (and outlive a later change of the policy)."""
    parts, tables, _, commits = owned(tmp_path, {TP: PartitionLog(3, 10, OLD_ID)}, starting_offsets="latest")
    parts.assign([TP])
    assert [v.offset for v in start(parts, tables).verdicts] == [10]
    commits.clear()
    parts.publish_waiting("SCHEMA_REGISTRY_UNAVAILABLE", "no answer")
    assert commits == []


def test_publishing_what_partitions_wait_on_is_best_effort_and_only_for_a_batch_s_own_faults(tmp_path):
    parts, tables, _, commits = owned(tmp_path, {TP: None})
    parts.assign([TP])
    epochs = tables.table.claim([TP])
    tables.table.commit(pa.table({"topic": ["t"], "partition": [0], "offset": [0], "v": ["x"]}, schema=OUTPUT),
                        [OffsetRange("t", 0, 0, 1)], epochs)
    for condition in ("FENCED_WRITER", "BROKER_NOT_AVAILABLE", "STORAGE_UNAVAILABLE"):
        parts.publish_waiting(condition, "the group, the brokers or the storage show it")
    assert commits == []
    tables.table.recorded = lambda partitions: (_ for _ in ()).throw(OSError("storage down"))
    parts.publish_waiting("SCHEMA_REGISTRY_UNAVAILABLE", "down")
    assert commits == []
