"""The scg-kafka reader mode (reader_modes.FollowingQuery) without Spark or Kafka: it gives a
partition up only after every batch that writes it has ended — ``release`` takes it out of the
batch gate and the assignment file at once, then returns only once a batch ended or one that
began after that writes none of it; it tells its planner how many cores the application has now;
and a stopping member leaves once its batch ended. The query thread is played by the test
through the batch writer's BatchGate. An available-now member ends once what it owns is read to
the log ends it had when claimed."""
import dataclasses
import threading
from types import SimpleNamespace

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime import reader_modes
from pipelines.runtime.assigned_offsets import Claim
from pipelines.runtime.assigned_source import AssignmentFile
from pipelines.runtime.batch_writer import BatchGate, BatchReport
from pipelines.runtime.progress import ProgressPrinter
from pipelines.runtime.reader_modes import Backfill, FollowingQuery
from pipelines.runtime.runner import PipelineRunner
from tests.support.fake_clock import FakeClock
from tests.support.query_parts import RunningQuery, query_context
from tests.support.waiting import wait_until

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
WAIT_S = 10.0
CONFIG = SimpleNamespace(group=SimpleNamespace(id="g", assignors=("cooperative-sticky",)),
                         trigger=SimpleNamespace(available_now=False))


class Context:
    """A SparkContext whose cores the test changes (an exception: it cannot answer)."""

    def __init__(self, cores):
        self.cores = cores

    @property
    def defaultParallelism(self):
        if isinstance(self.cores, Exception):
            raise self.cores
        return self.cores


def following(tmp_path, cores=1, gate: BatchGate | None = None, lock=None, lines=None) -> FollowingQuery:
    """A following query that runs over A and B (a stand-in for Spark's query)."""
    lines = [] if lines is None else lines
    ctx = query_context(lines, FakeClock(), spark=SimpleNamespace(sparkContext=Context(cores)), lock=lock)
    reader = FollowingQuery(ctx, assignment_dir=str(tmp_path))
    reader.query, reader.writer = RunningQuery(), SimpleNamespace(gate=gate or BatchGate(), failure=None)
    reader.task_slots = reader.application_cores()
    ctx.owned.assign((A, B))
    reader.claims = {A: Claim(1, 0), B: Claim(2, 0)}
    reader.publish()
    return reader


def in_background(call) -> threading.Event:
    """Run ``call`` on a thread of its own; the event is set once it returned."""
    returned = threading.Event()
    threading.Thread(target=lambda: (call(), returned.set()), daemon=True).start()
    return returned


def wait_for_file_without(reader, tp) -> None:
    wait_until(lambda: tp not in reader.assignment_file.read().claims, WAIT_S,
               f"{tp} gone from the assignment file", poll_s=0.01)


def test_a_release_returns_only_after_the_batches_that_read_the_partition(tmp_path):
    reader = following(tmp_path)
    gate = reader.gate
    gate.enter([A, B])                        # a batch over both is writing when the revoke comes
    returned = in_background(lambda: reader.revoked([A]))
    wait_for_file_without(reader, A)          # the next plan leaves A out at once...
    assert set(reader.assignment_file.read().claims) == {B}
    assert not returned.wait(0.3)             # ...but A is not given up while that batch runs
    gate.exit()                               # its end is the boundary: the next batch is planned without A
    assert returned.wait(WAIT_S)
    assert reader.partitions == (B,) and not reader.query.stopped


def test_a_release_between_batches_waits_only_until_the_one_being_planned_begins(tmp_path):
    """No batch is writing when the revoke comes, but one may be being planned with A: A is
    given up once that batch begins, since it writes without A (the gate allowed only B before
    the file changed), not once it ends."""
    reader = following(tmp_path)
    gate = reader.gate
    returned = in_background(lambda: reader.revoked([A]))
    wait_for_file_without(reader, A)
    assert not returned.wait(0.3)             # a batch planned with A may be about to begin
    assert gate.enter([A, B]) == {B}          # planned before the file changed: it writes only B
    assert returned.wait(WAIT_S)              # and A is given up while it writes
    gate.exit()
    assert reader.partitions == (B,) and not reader.query.stopped


def test_the_boundary_is_marked_after_the_gate_stopped_allowing_the_partition(tmp_path):
    """Marked before, a batch that entered in between (still allowed to write A) could end and
    release A while the next batch, planned from the old file, also began before the gate
    changed and wrote A after the release."""
    order = []

    class RecordingGate(BatchGate):
        def allow(self, partitions):
            order.append("allow")
            super().allow(partitions)

        def mark(self):
            order.append("mark")
            return super().mark()

    reader = following(tmp_path, gate=RecordingGate())
    order.clear()
    returned = in_background(lambda: reader.release([A]))
    wait_for_file_without(reader, A)
    assert reader.gate.enter([A, B]) == {B}
    assert returned.wait(WAIT_S)
    assert order == ["allow", "mark"]


def test_the_batch_writer_allows_a_new_claim_before_the_planner_can_see_it(tmp_path):
    """A batch planned over a claim must be allowed to write it: the gate is told before the
    assignment file is written (else the batch would leave the new partition out and the source
    would move past its records)."""
    reader = following(tmp_path)
    gate, seen = reader.gate, []

    class CheckingFile(AssignmentFile):
        def write(self, assignment):
            seen.append(gate.enter(assignment.claims))  # a batch planned from this very file
            gate.exit()
            super().write(assignment)

    reader.assignment_file = CheckingFile(reader.assignment_file.path)
    reader.claim_alone(C, 0)
    assert seen == [{A, B, C}]


def test_a_batch_that_never_reaches_the_boundary_is_stopped_after_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(reader_modes, "GRACEFUL_STOP_S", 0.0)
    reader = following(tmp_path)
    reader.gate.enter([A])
    query = reader.query
    assert in_background(lambda: reader.release([A])).wait(WAIT_S)
    assert query.stopped                      # cancelled: the next owner's claim fences its commit


def test_new_cores_reach_the_planner_with_the_claims(tmp_path, monkeypatch):
    monkeypatch.setattr(reader_modes, "TASK_SLOTS_CHECK_S", 0.0)
    lines = []
    reader = following(tmp_path, cores=2, lines=lines)
    assert reader.assignment_file.read().task_slots == 2
    reader.ctx.spark.sparkContext.cores = 16        # executors registered
    reader.tick()
    assert reader.assignment_file.read().task_slots == 16
    assert reader.assignment_file.read().claims == {A: Claim(1, 0), B: Claim(2, 0)}
    assert lines[-1].endswith("the application has 16 cores now (2 before): a batch runs in up to 16 tasks")
    reader.ctx.spark.sparkContext.cores = 4         # dynamic allocation removed some
    reader.tick()
    assert reader.assignment_file.read().task_slots == 4


def test_spark_is_asked_at_most_once_per_interval(tmp_path):
    reader = following(tmp_path, cores=2)
    reader.tick()                                   # the first check
    reader.ctx.spark.sparkContext.cores = 8
    reader.tick()                                   # the clock has not moved
    assert reader.assignment_file.read().task_slots == 2
    reader.ctx.clock.advance(reader_modes.TASK_SLOTS_CHECK_S)
    reader.tick()
    assert reader.assignment_file.read().task_slots == 8


def test_a_listener_holding_the_lock_only_delays_the_change(tmp_path, monkeypatch):
    monkeypatch.setattr(reader_modes, "TASK_SLOTS_CHECK_S", 0.0)
    lock = threading.RLock()
    reader = following(tmp_path, cores=2, lock=lock)
    reader.ctx.spark.sparkContext.cores = 8
    held, release = threading.Event(), threading.Event()

    def listener():
        with lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=listener, daemon=True)
    thread.start()
    assert held.wait(10)
    reader.tick()                                   # does not wait for the lock
    assert reader.assignment_file.read().task_slots == 2
    release.set()
    thread.join(10)
    reader.tick()
    assert reader.assignment_file.read().task_slots == 8


def test_a_context_that_cannot_answer_keeps_the_last_count(tmp_path, monkeypatch):
    monkeypatch.setattr(reader_modes, "TASK_SLOTS_CHECK_S", 0.0)
    reader = following(tmp_path, cores=3)
    reader.ctx.spark.sparkContext.cores = RuntimeError("py4j gateway gone")
    reader.tick()
    assert reader.assignment_file.read().task_slots == 3 and reader.task_slots == 3


class LeavingMember:
    """Plays GroupMember.close for the runner: on_revoked with what it owns, then LeaveGroup,
    noting whether the query had been stopped by then."""

    def __init__(self, query) -> None:
        self.query, self.listener = query, None
        self.query_stopped_when_left = None

    def close(self) -> None:
        self.listener.on_revoked(list(self.listener.owned.partitions))
        self.query_stopped_when_left = self.query.stopped


def leaving_runner(tmp_path) -> tuple[PipelineRunner, FollowingQuery, LeavingMember]:
    made = {}

    def member_factory(config, listener):
        made["member"] = LeavingMember(None)
        made["member"].listener = listener
        return made["member"]

    def reader_factory(member, report, lock):
        made["reader"] = following(tmp_path, lock=lock)
        member.query = made["reader"].query
        return made["reader"]

    probe = SimpleNamespace(close=lambda: None)
    runner = PipelineRunner(CONFIG, member_factory, reader_factory, probe, ProgressPrinter(lambda line: None))
    return runner, made["reader"], made["member"]


def leave(runner: PipelineRunner) -> threading.Event:
    """run() with a stop already set and nothing to warm up: the member leaves at once."""
    stop = threading.Event()
    stop.set()
    return in_background(lambda: runner.run(stop))


def test_a_stopping_member_leaves_once_its_batch_ended_and_stops_the_query_after(tmp_path, monkeypatch):
    monkeypatch.setattr(FollowingQuery, "warm_up", lambda self, stop: None)
    monkeypatch.setattr(FollowingQuery, "begin", lambda self: None)
    runner, reader, member = leaving_runner(tmp_path)
    query, gate = reader.query, reader.gate
    gate.enter([A, B])                        # a batch is writing when the member stops
    returned = leave(runner)
    assert not returned.wait(0.3)             # it is not cut short...
    assert member.query_stopped_when_left is None
    gate.exit()
    assert returned.wait(WAIT_S)              # ...the member leaves once it ended, the query still running
    assert member.query_stopped_when_left is False and query.stopped
    assert gate.enter([A]) is None            # and no later batch of that query writes


def test_a_batch_writing_past_the_grace_period_is_cancelled_before_the_member_leaves(tmp_path, monkeypatch):
    monkeypatch.setattr(reader_modes, "GRACEFUL_STOP_S", 0.2)
    monkeypatch.setattr(FollowingQuery, "warm_up", lambda self, stop: None)
    monkeypatch.setattr(FollowingQuery, "begin", lambda self: None)
    runner, reader, member = leaving_runner(tmp_path)
    reader.gate.enter([A, B])                 # and never ends
    assert leave(runner).wait(WAIT_S)
    assert member.query_stopped_when_left is True


def test_a_rebalance_during_the_leave_releases_at_once(tmp_path):
    """A cooperative round under way when the member stops: its on_assigned / on_fenced after the
    gate closed give the partitions up at once (no batch of the query writes any more), so the
    member still leaves promptly."""
    runner, reader, _ = leaving_runner(tmp_path)
    runner.supervisor.close()
    assert reader.gate.close(0.0)
    assert in_background(lambda: runner.on_fenced(RuntimeError("generation gone"))).wait(WAIT_S)
    assert reader.claims == {}


def _report(*ranges):
    return BatchReport(1, tuple(ranges), 0, 0, 0, None, 0.0, 0.0, True)


def test_a_backfill_is_read_once_each_claim_reached_its_log_end_at_the_claim():
    backfill, reported = Backfill(), []
    backfill.claimed({A: (5, 10), B: (7, 7)})
    assert not backfill.reached(A) and backfill.reached(B) and not backfill.reached(C)
    report = backfill.reporting(reported.append)
    report(_report(OffsetRange("t", 0, 5, 9)))
    assert not backfill.reached(A) and len(reported) == 1
    report(_report(OffsetRange("t", 0, 9, 12)))
    assert backfill.reached(A)


def test_an_available_now_member_ends_once_what_it_owns_is_read():
    lines, clock = [], FakeClock()
    ctx = query_context(lines, clock)
    ctx = dataclasses.replace(ctx, config=SimpleNamespace(trigger=SimpleNamespace(available_now=True)))
    mode = FollowingQuery(ctx, assignment_dir=None)
    try:
        assert not mode.backfilled()                   # no assignment yet
        mode.assigned(())
        assert mode.backfilled()                       # nothing to read
        ctx.owned.assign([A])
        assert not mode.backfilled()                   # owned, not claimed yet
        mode.claims[A] = Claim(1, 5)
        mode.backfill.claimed({A: (5, 10)})
        assert not mode.backfilled()
        mode.backfill.reporting(lambda report: None)(_report(OffsetRange("t", 0, 5, 10)))
        assert mode.backfilled()
    finally:
        mode.close()
    assert FollowingQuery(query_context(lines, clock)).backfill is None  # not available-now: no backfill
