"""The runner's failure handling without Spark or Kafka: a transient fault while starting or
running the query is retried with backoff forever and never ends the member; a permanent one ends
it with its named condition; unrecognised failures get a bounded number of restarts
(pipelines/runtime/runner.py, docs/DESIGN.md invariant 9)."""
import threading
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from groupmgr.core import TopicPartition
from pipelines.runtime.batch_writer import BatchGate
from pipelines.runtime.progress import ProgressPrinter
from pipelines.runtime.runner import MAX_UNKNOWN_RESTARTS, PermanentFault, PipelineRunner, QueryFailedRepeatedly
from pipelines.runtime.start_offsets import NoStartingOffsetError

TPS = (TopicPartition("t", 0), TopicPartition("t", 1))


class FailedQuery:
    """A stopped query that failed with ``error``."""

    isActive = False

    def __init__(self, error):
        self.error = error

    def exception(self):
        return self.error

    def stop(self):
        pass


class RunningQuery(FailedQuery):
    isActive = True

    def __init__(self):
        super().__init__(None)


class Harness:
    """A PipelineRunner without Spark, tables or a member: ``starts`` scripts what each start of
    the query does (an exception to raise, or a query object to install)."""

    def __init__(self, *starts):
        self.lines: list[str] = []
        self.starts = list(starts)
        self.runner = PipelineRunner.__new__(PipelineRunner)
        self.runner.progress = ProgressPrinter(self.lines.append)
        self.runner._init_lifecycle()
        self.runner._start_query = self._start

    def _start(self):
        outcome = self.starts.pop(0) if self.starts else RunningQuery()
        if isinstance(outcome, BaseException):
            raise outcome
        self.runner._query, self.runner._writer = outcome, SimpleNamespace(gate=BatchGate())
        self.runner._query_partitions = self.runner._owned

    def assign(self, generation, partitions):
        """The member's ``on_assigned`` (which only records the assignment), then the main
        thread's next look, which makes the start; that look's answer."""
        self.runner.on_assigned(generation, partitions)
        return self.runner._check_query()

    def due(self):
        """Let the backoff pass, then one look by the main thread."""
        self.runner._retry_at = 0.0
        return self.runner._check_query()


def fenced_epoch():
    return KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH))


def test_a_transient_fault_in_on_assigned_is_retried_by_the_main_thread_not_fatal():
    h = Harness(fenced_epoch(), fenced_epoch())
    h.runner.on_assigned(1, TPS)  # does not raise
    assert h.runner._query is None and h.runner._check_query() == "idle"  # backoff not over yet
    assert h.due() == "idle"       # the second attempt fails too
    assert h.due() == "restarted"  # the third starts the query
    assert h.runner._check_query() == "active"
    retries = [line for line in h.lines if "[FENCED_LEADER_EPOCH]" in line]
    assert len(retries) == 2 and "retry 1, transient" in retries[0] and "retry 2, transient" in retries[1]


def test_backoff_grows_between_start_attempts():
    h = Harness(fenced_epoch(), fenced_epoch(), fenced_epoch())
    h.assign(1, TPS)
    waits = []
    for _ in range(2):
        waits.append(float(h.lines[-1].rsplit(" in ", 1)[1].rstrip("s")))
        h.due()
    waits.append(float(h.lines[-1].rsplit(" in ", 1)[1].rstrip("s")))
    assert waits[0] < waits[1] < waits[2]


def test_transient_query_failures_restart_it_forever():
    h = Harness(*[FailedQuery(Exception("org.apache.kafka.common.errors.NotLeaderOrFollowerException: x"))] * 60)
    h.assign(1, TPS)
    for _ in range(60):
        assert h.runner._check_query() == "restarting"
        assert h.due() == "restarted"
    assert sum("[NOT_LEADER_OR_FOLLOWER]" in line for line in h.lines) == 60
    assert "retry 60, transient" in h.lines[-1]


def test_a_committed_batch_ends_the_failure_streak():
    h = Harness(fenced_epoch(), fenced_epoch())
    h.runner.on_assigned(1, TPS)
    h.due()
    h.due()
    h.runner._batch_done = True
    h.runner._query = FailedQuery(fenced_epoch())
    assert h.runner._check_query() == "restarting"
    assert "retry 1, transient" in h.lines[-1]


def test_a_permanent_fault_ends_the_member_with_its_condition():
    h = Harness(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    h.runner.on_assigned(1, TPS)  # never raises on the member's thread
    with pytest.raises(PermanentFault) as info:
        h.runner._check_query()
    assert info.value.condition == "TOPIC_AUTHORIZATION_FAILED"
    assert info.value.headline().startswith("[TOPIC_AUTHORIZATION_FAILED] query start failed")


def test_a_project_error_ends_the_member_as_itself():
    h = Harness(NoStartingOffsetError([TPS[0]]))
    h.runner.on_assigned(1, TPS)
    with pytest.raises(NoStartingOffsetError):
        h.runner._check_query()


def test_a_permanent_query_failure_ends_the_member():
    h = Harness(FailedQuery(Exception("org.apache.kafka.common.errors.TopicAuthorizationException: denied")))
    h.assign(1, TPS)
    with pytest.raises(PermanentFault) as info:
        h.runner._check_query()
    assert info.value.condition == "TOPIC_AUTHORIZATION"


def test_unrecognised_query_failures_end_the_member_after_the_limit():
    h = Harness(*[FailedQuery(RuntimeError("bug"))] * (MAX_UNKNOWN_RESTARTS + 1))
    h.assign(1, TPS)
    for n in range(1, MAX_UNKNOWN_RESTARTS + 1):
        assert h.runner._check_query() == "restarting"
        assert f"restarting from the table's offsets ({n}/{MAX_UNKNOWN_RESTARTS})" in h.lines[-1]
        h.due()
    with pytest.raises(QueryFailedRepeatedly):
        h.runner._check_query()


def test_revoking_cancels_a_pending_start():
    h = Harness(fenced_epoch())
    h.assign(1, TPS)
    h.runner.on_revoked(TPS)
    assert h.due() == "idle" and h.starts == []
    assert h.runner._query is None


@pytest.mark.parametrize("policy", ["warn", "fail"])
def test_a_group_the_broker_runs_is_named_once_and_fails_only_when_asked(policy):
    from groupmgr.server_assignment import GroupRunByBroker

    harness = Harness()
    runner = harness.runner
    runner.config = SimpleNamespace(group=SimpleNamespace(id="g", assignors=("sticky",), on_server_assignment=policy))
    answers = iter(["CLASSIC", "CONSUMER", "CONSUMER", RuntimeError("describe failed"), "CLASSIC"])

    def lookup():
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    runner._group_type = lookup
    for _ in range(5):
        runner._check_server_assignment()
    named = [line for line in harness.lines if "[GROUP_RUN_BY_BROKER]" in line]
    assert len(named) == 1 and "sticky" in named[0]
    assert sum("is a classic group again" in line for line in harness.lines) == 1
    assert isinstance(runner._fatal, GroupRunByBroker) if policy == "fail" else runner._fatal is None


class CommitRecorder:
    """The member's offset commits (stopped partitions publish their condition there)."""

    def __init__(self):
        self.commits = []

    def commit_offsets(self, offsets, metadata=""):
        self.commits.append((dict(offsets), metadata))


def test_a_stopped_partition_is_rechecked_and_resumes_by_itself_while_the_others_run():
    from pipelines.runtime.partition_checks import PartitionVerdict
    from pipelines.runtime.runner import PartitionChecks

    h = Harness()
    runner, member = h.runner, CommitRecorder()
    runner.member = member
    h.assign(1, TPS)
    assert runner._check_query() == "active"
    stopped = PartitionVerdict(TPS[1], None, "LEADER_NOT_AVAILABLE", "no leader for t-1")
    runner._note_stopped([stopped], PartitionChecks([stopped], recorded_offsets={TPS[1]: 10}))
    assert member.commits == [({TPS[1]: 10}, "scg:stopped:LEADER_NOT_AVAILABLE: no leader for t-1")]
    assert sum("t-1 stopped: [LEADER_NOT_AVAILABLE]" in line for line in h.lines) == 1
    answers = [PartitionChecks([stopped]), PartitionChecks([PartitionVerdict(TPS[1], 10)])]
    runner._check_partitions = lambda partitions: answers.pop(0)

    def due():
        runner._stopped = {tp: s.__class__(s.verdict, s.since, 0.0, s.checks) for tp, s in runner._stopped.items()}
        return runner._check_query()

    assert due() == "active" and runner._stopped[TPS[1]].checks == 2  # still stopped: the query runs on
    assert sum("stopped: [LEADER_NOT_AVAILABLE]" in line for line in h.lines) == 1  # said once
    assert due() == "restarted"  # t-1 can run again: the query restarts over every owned partition
    runner._note_stopped([], PartitionChecks([]))
    assert not runner._stopped and any("t-1 resumes (was stopped: LEADER_NOT_AVAILABLE)" in line for line in h.lines)


class CountingQuery(RunningQuery):
    """A running query that counts stops; ``busy`` is its isTriggerActive answer."""

    def __init__(self, busy=False):
        super().__init__()
        self.stops, self.busy = 0, busy

    @property
    def status(self):
        return {"isTriggerActive": self.busy}

    def stop(self):
        self.stops += 1


def test_an_unchanged_assignment_keeps_the_running_query():
    query = CountingQuery()
    h = Harness(query)
    h.assign(1, TPS)
    h.runner.on_assigned(2, tuple(reversed(TPS)))  # a cooperative rebalance that moved nothing here
    assert h.runner._query is query and query.stops == 0 and h.runner._generation == 2
    assert "unchanged: the query keeps running" in h.lines[-1]


def test_a_cooperative_revoke_drops_only_the_partitions_that_leave():
    first, second = CountingQuery(), CountingQuery()
    h = Harness(first, second)
    h.assign(1, TPS)
    h.runner.on_revoked((TPS[1],))
    assert first.stops == 1 and h.runner._owned == (TPS[0],)
    h.assign(2, (TPS[0],))  # the query stopped with the revoke: it starts again
    assert h.runner._query is second and h.runner._owned == (TPS[0],)


def test_a_changed_assignment_restarts_at_a_batch_boundary():
    query = CountingQuery(busy=True)
    h = Harness(query)
    h.assign(1, TPS[:1])
    gate = h.runner._gate
    assert gate.enter() is not None  # the query thread is writing a micro-batch
    h.runner.on_assigned(2, TPS)  # gained a partition: the member thread goes on at once
    assert query.stops == 0 and h.runner._pending_start and h.runner._owned == TPS
    restart = threading.Thread(target=h.runner._check_query)  # the main thread's next look
    restart.start()
    restart.join(0.3)
    assert restart.is_alive() and query.stops == 0  # it waits for the batch to end
    gate.exit()
    restart.join(10)
    assert not restart.is_alive() and query.stops == 1 and h.runner._query is not query
    assert gate.enter() is None  # a batch Spark starts before the stop lands writes nothing


def test_an_assignment_without_the_running_querys_partitions_stops_it_before_returning():
    """The member revokes before it assigns, so this is a safety net: a query must never read a
    partition the member no longer owns once the listener returned."""
    query = CountingQuery()
    h = Harness(query)
    h.assign(1, TPS)
    h.runner.on_assigned(2, TPS[:1])
    assert query.stops == 1 and h.runner._query is None and h.runner._pending_start


class PollCounter:
    def __init__(self):
        self.polls = 0

    def poll(self):
        self.polls += 1


def test_back_to_back_batches_still_poll_once_per_committed_batch():
    """A backlog runs micro-batches with no idle moment between them: each committed batch is a
    poll, and a batch that never ends is none (so the poll timer can expire)."""
    h = Harness(CountingQuery(busy=True))
    h.runner.member = PollCounter()
    h.assign(1, TPS)
    h.runner._gate.enter(TPS)  # a batch is writing
    h.runner._poll_between_batches()
    assert h.runner.member.polls == 0  # a batch is writing and no batch was committed yet
    for committed in (1, 2):
        h.runner._batches_reported += 1  # as _on_batch does on the query thread
        h.runner._poll_between_batches()
        h.runner._poll_between_batches()
        assert h.runner.member.polls == committed
    h.runner._gate.exit()
    h.runner._poll_between_batches()
    assert h.runner.member.polls == 3  # idle between batches: poll


def test_a_trigger_that_only_plans_is_not_a_batch_in_flight():
    """Spark marks a trigger active while the scg-kafka planner waits for an assignment (most
    of the interval): an idle member still polls, or its poll timer would expire."""
    h = Harness(CountingQuery(busy=True))  # isTriggerActive all along
    h.runner.member = PollCounter()
    h.assign(1, TPS)
    h.runner._poll_between_batches()
    h.runner._poll_between_batches()
    assert h.runner.member.polls == 2


def test_an_assignment_while_the_member_stops_starts_no_query():
    h = Harness(CountingQuery())
    h.runner._closing = True  # run() is ending; the member has not left the group yet
    h.runner.on_assigned(1, TPS)
    assert h.runner._query is None and not h.runner._pending_start and len(h.starts) == 1


def test_who_runs_the_group_is_asked_by_the_main_thread_once_per_assignment():
    """The describe behind GROUP_RUN_BY_BROKER is a network round trip: the listener thread only
    marks it due, so it never delays a query start; the main thread asks once per assignment."""
    harness = Harness()
    runner, asked = harness.runner, []
    runner._group_type = lambda: asked.append("describe") or "CLASSIC"
    runner.on_assigned(1, TPS)
    runner.on_assigned(2, TPS)  # unchanged: the query keeps running, the question is due again
    assert asked == []
    runner._check_server_assignment_when_due()
    runner._check_server_assignment_when_due()
    assert asked == ["describe"]


class Member:
    def __init__(self):
        self.calls: list[str] = []

    def start(self):
        self.calls.append("start")

    def close(self):
        self.calls.append("close")


def test_a_member_stopped_while_warming_up_never_joins_its_group():
    """A SIGTERM during start-up (a cancelled deploy) must not cost the group two rebalances: one
    for a join, one for the leave right after it."""
    harness, stop, member = Harness(), threading.Event(), Member()
    runner = harness.runner
    runner.member, runner.probe = member, SimpleNamespace(close=lambda: None)
    runner.config = SimpleNamespace(group=SimpleNamespace(id="g", assignors=("range",)))
    runner._warm_up = stop.set            # the signal arrives while the member warms up
    runner.run(stop)
    assert member.calls == ["close"]
    assert not any("joining consumer group" in line for line in harness.lines)
