"""The scg-kafka planner and range reader without a broker: fakes stand for the admin client and
the consumer (their real behaviour is covered in tests/integration/test_assigned_source.py)."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.config.model import SourceConfig
from pipelines.runtime import assigned_source
from pipelines.runtime.assigned_offsets import INITIAL, Assignment, Claim, RateLimits, SourceOffset
from pipelines.runtime.assigned_source import (AssignedKafkaReader, AssignedKafkaSource, AssignmentFile,
                                               LogEndsUnavailable, assigned_source_options, source_options)
from pipelines.runtime.kafka_range_reader import (FETCH_DEFAULTS, FETCH_ROWS, KAFKA_ROW_WITH_HEADERS_ARROW,
                                                  READER_SETTINGS, KafkaDataLoss, KafkaReadStalled,
                                                  RangeConsumers, read_range)
from pipelines.runtime.records import kafka_row_ddl

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


class FakeProbe:
    def __init__(self, ends):
        self.ends, self.closed = dict(ends), 0

    def log_ends(self, partitions, committed_only=False):
        self.committed_only = committed_only
        return ({tp: self.ends[tp] for tp in partitions if tp in self.ends},
                {tp: "LEADER_NOT_AVAILABLE" for tp in partitions if tp not in self.ends})

    def close(self):
        self.closed += 1


def reader(tmp_path, claims, ends, limits=RateLimits(), **config):
    file = AssignmentFile(tmp_path / "assignment.json")
    file.write(Assignment(claims))
    return AssignedKafkaReader(source_options({"bootstrap.servers": "x", **config}, file.path, limits),
                               probe=FakeProbe(ends))


def test_the_planner_reads_the_assignment_file_at_every_call(tmp_path):
    r = reader(tmp_path, {A: Claim(1, 3)}, {A: 10, B: 7})
    first = r.latestOffset(INITIAL.to_dict(), ReadAllAvailable())
    assert SourceOffset.from_dict(first).end == {A: 10}
    r.assignment_file.write(Assignment({B: Claim(2, 0)}))
    second = SourceOffset.from_dict(r.latestOffset(first, ReadAllAvailable()))
    assert second.end == {B: 7} and second.starts == {B: 0}
    assert [p.ranges for p in r.partitions(first, second.to_dict())] == [(OffsetRange("t", 1, 0, 7),)]


def test_a_task_reads_its_ranges_one_after_the_other(tmp_path, monkeypatch):
    file = AssignmentFile(tmp_path / "assignment.json")
    r = AssignedKafkaReader(source_options({"bootstrap.servers": "x"}, file.path, RateLimits(), task_slots=2))
    start = SourceOffset({A: 0, B: 0, C: 0}, {A: 1, B: 1, C: 1})
    end = SourceOffset({A: 9, B: 2, C: 4}, {A: 1, B: 1, C: 1})
    tasks = r.partitions(start.to_dict(), end.to_dict())
    assert [t.ranges for t in tasks] == [(OffsetRange("t", 0, 0, 9),), (OffsetRange("t", 1, 0, 2), OffsetRange("u", 0, 0, 4))]
    monkeypatch.setattr(assigned_source, "read_range", lambda config, rng, headers: iter([rng.tp]))
    assert list(r.read(tasks[1])) == [B, C]


def test_tasks_follow_the_cores_the_runner_last_wrote_not_those_at_query_start(tmp_path):
    file = AssignmentFile(tmp_path / "assignment.json")
    r = AssignedKafkaReader(source_options({"bootstrap.servers": "x"}, file.path, RateLimits(), task_slots=1))
    start = SourceOffset({A: 0, B: 0, C: 0}, {A: 1, B: 1, C: 1})
    end = SourceOffset({A: 9, B: 2, C: 4}, {A: 1, B: 1, C: 1})
    assert len(r.partitions(start.to_dict(), end.to_dict())) == 1   # the option: 1 core at query start
    file.write(Assignment({A: Claim(1, 0), B: Claim(1, 0), C: Claim(1, 0)}, task_slots=3))
    assert len(r.partitions(start.to_dict(), end.to_dict())) == 3   # executors registered since
    file.write(Assignment({A: Claim(1, 0), B: Claim(1, 0), C: Claim(1, 0)}, task_slots=2))
    assert len(r.partitions(start.to_dict(), end.to_dict())) == 2   # ... and one went away


def test_the_planner_asks_for_last_stable_offsets_only_under_read_committed(tmp_path):
    r = reader(tmp_path, {A: Claim(1, 0)}, {A: 5})
    r.latestOffset(INITIAL.to_dict(), ReadAllAvailable())
    assert r._probe.committed_only is False  # Spark's Kafka source default: read_uncommitted
    r = reader(tmp_path, {A: Claim(1, 0)}, {A: 5}, **{"isolation.level": "read_committed"})
    r.latestOffset(INITIAL.to_dict(), ReadAllAvailable())
    assert r._probe.committed_only is True


def test_max_rows_caps_the_batch(tmp_path):
    r = reader(tmp_path, {A: Claim(1, 0), B: Claim(1, 0)}, {A: 300, B: 100}, RateLimits(max_rows=40))
    assert isinstance(r.getDefaultReadLimit(), ReadMaxRows)
    end = SourceOffset.from_dict(r.latestOffset(INITIAL.to_dict(), ReadMaxRows(40))).end
    assert end == {A: 30, B: 10}


def test_min_rows_waits_for_data_but_never_delays_an_assignment_change(tmp_path):
    r = reader(tmp_path, {A: Claim(1, 0)}, {A: 5}, RateLimits(max_rows=1000, min_rows=100, max_delay_ms=600_000))
    first = r.latestOffset(INITIAL.to_dict(), ReadMaxRows(1000))  # the claim is new: planned at once
    r._probe.ends[A] = 20
    assert r.latestOffset(first, ReadMaxRows(1000)) == first  # 15 records < 100: wait
    r.assignment_file.write(Assignment({A: Claim(1, 0), B: Claim(2, 0)}))
    assert SourceOffset.from_dict(r.latestOffset(first, ReadMaxRows(1000))).claims == {A: 1, B: 2}


def test_the_idle_planner_waits_for_a_new_assignment_and_plans_it(tmp_path, monkeypatch):
    """Nothing to read: latestOffset waits (assignmentWaitMs) for the runner to write a new
    assignment and plans on it, so partitions claimed while the query is idle are read in this
    trigger. The file is rewritten only once the planner has asked for the log ends, i.e. after
    it read the file: without the wait the answer would be "nothing new"."""
    import threading

    r = reader(tmp_path, {A: Claim(1, 0)}, {A: 5})
    first = r.latestOffset(INITIAL.to_dict(), ReadAllAvailable())
    monkeypatch.setattr(assigned_source, "idle_wait_s", lambda now_ms, interval_ms: 30.0)
    asked, log_ends = threading.Event(), r._probe.log_ends

    def answering(partitions, committed_only=False):
        asked.set()
        return log_ends(partitions, committed_only)

    r._probe.log_ends = answering
    writer = threading.Thread(target=lambda: asked.wait(10) and r.assignment_file.write(
        Assignment({A: Claim(1, 0), B: Claim(2, 0)})))
    r._probe.ends[B] = 7
    writer.start()
    latest = SourceOffset.from_dict(r.latestOffset(first, ReadAllAvailable()))
    writer.join(10)
    assert latest.claims == {A: 1, B: 2} and latest.end == {A: 5, B: 7}


def test_the_idle_planner_answers_nothing_new_when_no_assignment_came(tmp_path, monkeypatch):
    r = reader(tmp_path, {A: Claim(1, 0)}, {A: 5})
    first = r.latestOffset(INITIAL.to_dict(), ReadAllAvailable())
    monkeypatch.setattr(assigned_source, "idle_wait_s", lambda now_ms, interval_ms: 0.05)
    latest = SourceOffset.from_dict(r.latestOffset(first, ReadAllAvailable()))
    assert (latest.end, latest.claims) == ({A: 5}, {A: 1})


def test_a_planner_with_records_to_read_does_not_wait(tmp_path, monkeypatch):
    r = reader(tmp_path, {A: Claim(1, 0)}, {A: 5})
    first = r.latestOffset(INITIAL.to_dict(), ReadAllAvailable())
    monkeypatch.setattr(assigned_source, "idle_wait_s", lambda now_ms, interval_ms: 30.0)
    monkeypatch.setattr(r.assignment_file, "wait_for_change", lambda version, deadline: pytest.fail("waited"))
    r._probe.ends[A] = 9
    assert SourceOffset.from_dict(r.latestOffset(first, ReadAllAvailable())).end == {A: 9}


def test_every_write_of_the_assignment_file_is_a_new_version(tmp_path):
    file = AssignmentFile(tmp_path / "assignment.json")
    assert file.version() is None
    file.write(Assignment({A: Claim(1, 0)}))
    before = file.version()
    assert not file.wait_for_change(before, deadline=0.0)  # (a deadline in the past: no wait)
    file.write(Assignment({A: Claim(1, 0)}))               # the same content
    assert file.version() != before and file.wait_for_change(before, deadline=0.0)


def test_the_idle_wait_ends_before_the_next_trigger_is_due():
    idle_wait_s = assigned_source.idle_wait_s
    assert idle_wait_s(1_000_000, 0) == 0.0                          # no interval: Spark plans again at once
    assert idle_wait_s(1_000_000, 500) == pytest.approx(0.4)         # a trigger on time: until 100 ms before the next
    assert idle_wait_s(1_000_350, 500) == pytest.approx(0.05)        # a late one: the next multiple is nearer
    assert idle_wait_s(1_000_450, 500) == 0.0                        # too near to wait at all
    assert idle_wait_s(1_000_000, 100) == pytest.approx(0.08)        # margin: a fifth of a short interval
    assert idle_wait_s(1_000_000, 60_000) == pytest.approx(assigned_source.IDLE_WAIT_MAX_MS / 1000)
    options = assigned_source_options({"bootstrap.servers": "x"}, "a.json", SourceConfig(), trigger_interval_ms=500)
    assert AssignedKafkaReader(options).trigger_interval_ms == 500


def test_the_first_trigger_waits_for_nothing(tmp_path, monkeypatch):
    """The runner may wait for the query's first trigger to be planned before it joins."""
    file = AssignmentFile(tmp_path / "assignment.json")
    r = AssignedKafkaReader(source_options({"bootstrap.servers": "x"}, file.path, RateLimits(),
                                           trigger_interval_ms=60_000), probe=FakeProbe({}))
    monkeypatch.setattr(r.assignment_file, "wait_for_change", lambda version, deadline: pytest.fail("waited"))
    assert SourceOffset.from_dict(r.latestOffset(INITIAL.to_dict(), ReadAllAvailable())).claims == {}


def test_a_log_that_went_back_below_the_query_is_data_loss(tmp_path):
    r = reader(tmp_path, {A: Claim(1, 0)}, {A: 50})
    first = r.latestOffset(INITIAL.to_dict(), ReadAllAvailable())
    r._probe.ends[A] = 10
    with pytest.raises(KafkaDataLoss, match=r"KAFKA_DATA_LOSS.*stands at offset 50.*ends at 10"):
        r.latestOffset(first, ReadAllAvailable())


def test_an_unanswered_partition_keeps_its_place_then_fails_the_query(tmp_path, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(assigned_source.time, "monotonic", lambda: now[0])
    r = reader(tmp_path, {A: Claim(1, 0), B: Claim(1, 0)}, {A: 5})
    first = SourceOffset.from_dict(r.latestOffset(INITIAL.to_dict(), ReadAllAvailable()))
    assert first.end == {A: 5, B: 0}
    assert r._probe.closed == 1  # the next call asks through a new client (fresh metadata)
    now[0] += assigned_source.LOG_END_GRACE_S
    with pytest.raises(LogEndsUnavailable, match="LEADER_NOT_AVAILABLE.*t-1"):
        r.latestOffset(first.to_dict(), ReadAllAvailable())


def test_tls_files_go_inline_and_isolation_keeps_spark_s_default(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")

    options = assigned_source_options({"bootstrap.servers": "x", "ssl.ca.location": str(ca)}, "f",
                                      SourceConfig(max_offsets_per_trigger=500))
    assert options["kafka.ssl.ca.pem"] == "-----BEGIN CERTIFICATE-----\n" and "kafka.ssl.ca.location" not in options
    assert options["maxOffsetsPerTrigger"] == "500"
    assert AssignedKafkaReader(options).client_config["isolation.level"] == "read_uncommitted"


def test_headers_are_a_column_only_when_the_pipeline_includes_them():
    without = assigned_source_options({"bootstrap.servers": "x"}, "f", SourceConfig())
    with_headers = assigned_source_options({"bootstrap.servers": "x"}, "f", SourceConfig(include_headers=True))
    assert AssignedKafkaSource(without).schema() == kafka_row_ddl(False)
    assert AssignedKafkaSource(with_headers).schema() == kafka_row_ddl(True)
    assert (AssignedKafkaReader(without).headers, AssignedKafkaReader(with_headers).headers) == (False, True)


# -- the range reader with a scripted consumer -------------------------------------------------------
class Msg:
    def __init__(self, offset, value=b"v", error=None, headers=None, partition=0):
        self._offset, self._value, self._error, self._headers = offset, value, error, headers
        self._partition = partition

    def topic(self):
        return "t"

    def partition(self):
        return self._partition

    def headers(self):
        return self._headers

    def error(self):
        return self._error

    def offset(self):
        return self._offset

    def key(self):
        return None

    def value(self):
        return self._value

    def timestamp(self):
        return (1, 1_700_000_000_000)


class Eof:
    def code(self):
        return KafkaError._PARTITION_EOF


class FakeConsumer:
    def __init__(self, polls, low=0):
        self.polls, self.low, self.closed = list(polls), low, False

    def assign(self, partitions):
        self.assigned = partitions
        self.positions = getattr(self, "positions", []) + [p.offset for p in partitions]

    def consume(self, n, timeout):
        self.asked = getattr(self, "asked", []) + [n]
        return self.polls.pop(0) if self.polls else []

    def get_watermark_offsets(self, tp, timeout, cached):
        return self.low, 100

    def unassign(self):
        self.assigned = None

    def close(self):
        self.closed = True


def read(polls, rng, low=0, **kwargs):
    consumer = FakeConsumer(polls, low)
    kept = RangeConsumers(lambda c: consumer)
    try:
        rows = [r["offset"] for b in read_range({}, rng, consumers=kept, **kwargs) for r in b.to_pylist()]
    except Exception:
        assert consumer.closed  # a consumer whose read failed is not kept
        raise
    assert consumer.assigned is None and not consumer.closed and kept.take({**FETCH_DEFAULTS, **READER_SETTINGS}) is consumer
    return rows


def test_records_at_or_past_the_end_are_not_yielded():
    assert read([[Msg(5), Msg(6)], [Msg(7), Msg(8)]], OffsetRange("t", 0, 5, 8)) == [5, 6, 7]


def test_headers_are_read_in_order_and_null_when_a_record_has_none():
    consumer = FakeConsumer([[Msg(0, headers=[("trace", b"1"), ("trace", b"2"), ("empty", None)]), Msg(1)]])
    batches = list(read_range({}, OffsetRange("t", 0, 0, 2), headers=True, consumers=RangeConsumers(lambda c: consumer)))
    assert batches[0].schema == KAFKA_ROW_WITH_HEADERS_ARROW
    assert batches[0].column("headers").to_pylist() == [
        [{"key": "trace", "value": b"1"}, {"key": "trace", "value": b"2"}, {"key": "empty", "value": None}], None]
    consumer = FakeConsumer([[Msg(0, headers=[("trace", b"1")])]])
    batch, = read_range({}, OffsetRange("t", 0, 0, 1), consumers=RangeConsumers(lambda c: consumer))
    assert "headers" not in batch.schema.names


def test_no_more_records_are_asked_for_than_the_range_holds():
    """librdkafka's consume(n, timeout) returns early only once n events arrived: asking for more
    than the range holds made every small range wait for the timeout (a second per partition)."""
    consumer = FakeConsumer([[Msg(5), Msg(6)], [Msg(7)]])
    list(read_range({}, OffsetRange("t", 0, 5, 8), consumers=RangeConsumers(lambda c: consumer), fetch_rows=10_000))
    assert consumer.asked == [3, 1]


def test_a_gap_the_log_still_covers_is_fine_a_gap_below_its_start_is_data_loss():
    assert read([[Msg(5), Msg(7)]], OffsetRange("t", 0, 5, 8), low=0) == [5, 7]  # marker or compaction
    with pytest.raises(KafkaDataLoss, match="offsets from 5 .*starts at 7"):
        read([[Msg(7)]], OffsetRange("t", 0, 5, 8), low=7)


def test_the_end_of_the_log_before_the_planned_end_is_data_loss():
    assert read([[Msg(5), Msg(8, error=Eof())]], OffsetRange("t", 0, 5, 8)) == [5]  # markers up to the end
    # another partition's end (a kept consumer's previous range) says nothing of this one
    assert read([[Msg(5), Msg(6, error=Eof(), partition=1), Msg(6), Msg(7)]], OffsetRange("t", 0, 5, 8)) == [5, 6, 7]
    with pytest.raises(KafkaDataLoss, match="the log ends at 6"):
        read([[Msg(5), Msg(6, error=Eof())]], OffsetRange("t", 0, 5, 8))


def test_a_read_without_progress_stalls_after_its_bound():
    now = [0.0]

    def clock():
        now[0] += 10.0
        return now[0]
    with pytest.raises(KafkaReadStalled, match="no progress at offset 5"):
        read([], OffsetRange("t", 0, 5, 8), stall_timeout_s=30.0, clock=clock)


def test_a_silent_consumer_is_replaced_and_the_new_one_goes_on_from_the_offset_reached():
    """librdkafka's consumer that knew a topic before it was recreated never fetches the new one."""
    now = [0.0]

    def clock():
        now[0] += 4.0
        return now[0]
    stale = FakeConsumer([[Msg(5)]])
    fresh = FakeConsumer([[Msg(6), Msg(7)]])
    made = iter([stale, fresh])
    kept = RangeConsumers(lambda c: next(made))
    rows = [r["offset"] for b in read_range({}, OffsetRange("t", 0, 5, 8), consumers=kept,
                                            replace_after_s=10.0, stall_timeout_s=60.0, clock=clock)
            for r in b.to_pylist()]
    assert rows == [5, 6, 7]
    assert (stale.positions, fresh.positions) == ([5], [6])
    assert stale.closed and fresh.assigned is None and not fresh.closed  # the new one is kept
    assert kept.take({**FETCH_DEFAULTS, **READER_SETTINGS}) is fresh


def test_the_consumer_prefetches_about_one_batch_unless_the_pipeline_says_so():
    configs = []

    def factory(config):
        configs.append(config)
        return FakeConsumer([[Msg(5)]])

    list(read_range({}, OffsetRange("t", 0, 5, 6), consumers=RangeConsumers(factory)))
    list(read_range({"queued.min.messages": 7}, OffsetRange("t", 0, 5, 6), consumers=RangeConsumers(factory)))
    assert [c["queued.min.messages"] for c in configs] == [FETCH_ROWS, 7]


def test_a_record_before_the_position_or_of_another_partition_fails_the_read():
    """Nothing of a kept consumer's previous range may reach this one (a duplicate in the table)."""
    with pytest.raises(RuntimeError, match="t-0@4 arrived while reading t-0 at 7"):
        read([[Msg(5), Msg(6), Msg(4)]], OffsetRange("t", 0, 5, 8))
    with pytest.raises(RuntimeError, match="t-1@7 arrived while reading t-0 at 5"):
        read([[Msg(7, partition=1)]], OffsetRange("t", 0, 5, 8))


def test_a_full_fetch_queue_is_looked_at_again_soon_but_not_in_a_spin():
    # 0 makes librdkafka's broker thread spin while the task decodes (as much CPU as the task);
    # its 1 s default idles a reader that drains the queue as fast as it fills
    assert 1 <= FETCH_DEFAULTS["fetch.queue.backoff.ms"] <= 50
