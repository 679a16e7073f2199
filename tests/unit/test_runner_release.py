"""An scg-kafka member gives a partition up only after every batch that writes it has ended
(docs/DESIGN.md, issue 12 item 2): ``on_revoked`` takes it out of the batch gate and the
assignment file at once, then returns only once a batch ended or one that began after that
writes none of it. Without Spark or Kafka: the query thread is played by the test through the
runner's BatchGate."""
import threading
from types import SimpleNamespace

from groupmgr.core import TopicPartition
from pipelines.runtime import runner as runner_module
from pipelines.runtime.assigned_offsets import Claim
from pipelines.runtime.assigned_source import AssignmentFile
from pipelines.runtime.batch_writer import BatchGate
from pipelines.runtime.progress import ProgressPrinter
from pipelines.runtime.runner import PipelineRunner

A, B = TopicPartition("t", 0), TopicPartition("t", 1)
WAIT_S = 10.0


class RunningQuery:
    isActive = True
    stopped = False

    def stop(self):
        self.stopped = True


def following_runner(tmp_path) -> PipelineRunner:
    runner = PipelineRunner.__new__(PipelineRunner)
    runner.progress = ProgressPrinter(lambda _line: None)
    runner._init_lifecycle(follow=True)
    runner._assignment_dir = str(tmp_path)
    runner._query, runner._writer = RunningQuery(), SimpleNamespace(gate=BatchGate())
    runner._owned = (A, B)
    runner._claims = {A: Claim(1, 0), B: Claim(2, 0)}
    runner._publish_claims()
    return runner


def in_background(call) -> threading.Event:
    """Run ``call`` on a thread of its own; the event is set once it returned."""
    returned = threading.Event()
    threading.Thread(target=lambda: (call(), returned.set()), daemon=True).start()
    return returned


def revoke_in_background(runner, partitions):
    return in_background(lambda: runner.on_revoked(partitions))


def wait_for_file_without(runner, tp) -> None:
    file = AssignmentFile(runner._assignment_path())
    deadline = threading.Event()
    for _ in range(int(WAIT_S / 0.01)):
        if tp not in file.read().claims:
            return
        deadline.wait(0.01)
    raise AssertionError(f"{tp} is still in the assignment file")


def test_on_revoked_returns_only_after_the_batches_that_read_the_partition(tmp_path):
    runner = following_runner(tmp_path)
    gate = runner._gate
    gate.enter([A, B])                        # a batch over both is writing when the revoke comes
    returned = revoke_in_background(runner, [A])
    wait_for_file_without(runner, A)          # the next plan leaves A out at once...
    assert set(AssignmentFile(runner._assignment_path()).read().claims) == {B}
    assert not returned.wait(0.3)             # ...but A is not given up while that batch runs
    gate.exit()                               # its end is the boundary: the next batch is planned without A
    assert returned.wait(WAIT_S)
    assert runner._owned == (B,) and not runner._query.stopped


def test_on_revoked_between_batches_waits_only_until_the_one_being_planned_begins(tmp_path):
    """No batch is writing when the revoke comes, but one may be being planned with A: A is
    given up once that batch begins, since it writes without A (the gate allowed only B before
    the file changed), not once it ends."""
    runner = following_runner(tmp_path)
    gate = runner._gate
    returned = revoke_in_background(runner, [A])
    wait_for_file_without(runner, A)
    assert not returned.wait(0.3)             # a batch planned with A may be about to begin
    assert gate.enter([A, B]) == {B}          # planned before the file changed: it writes only B
    assert returned.wait(WAIT_S)              # and A is given up while it writes
    gate.exit()
    assert runner._owned == (B,) and not runner._query.stopped


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

    runner = following_runner(tmp_path)
    runner._writer = SimpleNamespace(gate=RecordingGate())
    returned = revoke_in_background(runner, [A])
    wait_for_file_without(runner, A)
    assert runner._gate.enter([A, B]) == {B}
    assert returned.wait(WAIT_S)
    assert order == ["allow", "mark"]


def test_the_batch_writer_allows_a_new_claim_before_the_planner_can_see_it(tmp_path, monkeypatch):
    """A batch planned over a claim must be allowed to write it: the runner tells the gate before
    it writes the assignment file (else the batch would leave the new partition out and the
    source would move past its records)."""
    runner = following_runner(tmp_path)
    gate, seen = runner._gate, []

    class CheckingFile(AssignmentFile):
        def write(self, assignment):
            seen.append(gate.enter(assignment.claims))  # a batch planned from this very file
            gate.exit()
            super().write(assignment)

    monkeypatch.setattr(runner_module, "AssignmentFile", CheckingFile)
    C = TopicPartition("t", 2)
    runner._claims[C] = Claim(3, 0)
    runner._publish_claims()
    assert seen == [{A, B, C}]


def test_a_batch_that_never_reaches_the_boundary_is_stopped_after_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "GRACEFUL_STOP_S", 0.5)
    runner = following_runner(tmp_path)
    runner._gate.enter([A])
    query = runner._query
    assert revoke_in_background(runner, [A]).wait(WAIT_S)
    assert query.stopped                      # cancelled: the next owner's claim fences its commit


def test_the_main_loop_sees_a_stop_without_waiting_out_its_poll(tmp_path, monkeypatch):
    """A SIGTERM sets run()'s stop event; the loop must close the batch gate before Spark starts
    another batch, not after its poll interval."""
    monkeypatch.setattr(runner_module, "POLL_S", 600.0)
    runner = following_runner(tmp_path)
    stop = threading.Event()
    returned = in_background(lambda: runner._wait_for_wake(stop))
    assert not returned.wait(0.2)
    stop.set()
    assert returned.wait(WAIT_S)
    runner._wake.set()  # and an assignment ends the wait too
    assert runner._wait_for_wake(threading.Event()) is None


class LeavingMember:
    """Plays GroupMember.close for the runner: on_revoked with what it owns, then LeaveGroup,
    noting whether the query had been stopped by then."""

    def __init__(self, runner, query) -> None:
        self.runner, self.query = runner, query
        self.query_stopped_when_left = None

    def close(self) -> None:
        self.runner.on_revoked(list(self.runner._owned))
        self.query_stopped_when_left = self.query.stopped


def test_a_stopping_member_leaves_once_its_batch_ended_and_stops_the_query_after(tmp_path):
    runner = following_runner(tmp_path)
    query, gate = runner._query, runner._gate
    runner.member = LeavingMember(runner, query)
    gate.enter([A, B])                        # a batch is writing when the member stops
    returned = in_background(runner._leave)
    assert not returned.wait(0.3)             # it is not cut short...
    assert runner.member.query_stopped_when_left is None
    gate.exit()
    assert returned.wait(WAIT_S)              # ...the member leaves once it ended, the query still running
    assert runner.member.query_stopped_when_left is False and query.stopped
    assert gate.enter([A]) is None            # and no later batch of that query writes


def test_a_batch_writing_past_the_grace_period_is_cancelled_before_the_member_leaves(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "GRACEFUL_STOP_S", 0.2)
    runner = following_runner(tmp_path)
    query, gate = runner._query, runner._gate
    runner.member = LeavingMember(runner, query)
    gate.enter([A, B])                        # and never ends
    assert in_background(runner._leave).wait(WAIT_S)
    assert runner.member.query_stopped_when_left is True


def test_a_rebalance_during_the_leave_releases_at_once(tmp_path):
    """A cooperative round under way when the member stops: its on_assigned / on_fenced after the
    gate closed give the partitions up at once (no batch of the query writes any more), so the
    member still leaves promptly."""
    runner = following_runner(tmp_path)
    runner._closing = True
    assert runner._gate.close(0.0)
    assert in_background(lambda: runner.on_fenced(RuntimeError("generation gone"))).wait(WAIT_S)
    assert runner._claims == {}
