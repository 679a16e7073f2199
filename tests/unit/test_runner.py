"""The runner's main loop and listener without Spark or Kafka (a scripted spark-kafka reader, a
fake member, a fake clock): a transient fault while starting or running the query is retried
with backoff forever and never ends the member; a permanent one ends it with its named condition;
unrecognised failures get a bounded number of restarts; assignments, revocations and stops reach
the query at batch boundaries (docs/DESIGN.md, invariants 4 and 9)."""
import threading
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from groupmgr.core import TopicPartition
from pipelines.runtime.member_errors import PermanentFault, QueryFailedRepeatedly
from pipelines.runtime.membership import ServerAssignmentWatch
from pipelines.runtime.owned_partitions import PartitionChecks
from pipelines.runtime.partition_checks import PartitionVerdict
from pipelines.runtime.progress import ProgressPrinter
from pipelines.runtime.query_supervisor import QueryState
from pipelines.runtime.runner import MAX_UNKNOWN_RESTARTS, PipelineRunner
from pipelines.runtime.start_offsets import NoStartingOffsetError
from tests.support.fake_clock import FakeClock
from sinks.txn_table import FencedWriterError
from tests.support.query_parts import (ClaimingTable, CommitRecorder, FailedQuery, RunningQuery, ScriptedQuery,
                                       every_partition_runs, owned_partitions, query_context)

TPS = (TopicPartition("t", 0), TopicPartition("t", 1))
CONFIG = SimpleNamespace(group=SimpleNamespace(id="g", assignors=("range",), rebalance_timeout_ms=1000),
                         trigger=SimpleNamespace(available_now=False))


class Member:
    """The group member as the runner uses it: polls, start and close are recorded."""

    def __init__(self):
        self.calls: list[str] = []
        self.polls = 0

    def start(self):
        self.calls.append("start")

    def close(self):
        self.calls.append("close")

    def poll(self):
        self.polls += 1

    def raise_if_failed(self):
        return None


class Harness:
    """A PipelineRunner over a scripted reader: ``starts`` scripts what each start of the query
    does (an exception to raise, or a query to install)."""

    def __init__(self, *starts, watch=None, warm_up_does=lambda: None, metrics=None, serve=None, tables=None):
        self.lines: list[str] = []
        self.clock, self.member, self.commits = FakeClock(), Member(), CommitRecorder()
        self.owned = owned_partitions(self.lines, self.clock, self.commits, checks=every_partition_runs,
                                      tables=tables)

        def reader_factory(member, report, lock):
            ctx = query_context(self.lines, self.clock, self.owned, lock=lock)
            self.reader = ScriptedQuery(ctx, *starts, warm_up_does=warm_up_does)
            return self.reader

        probe = SimpleNamespace(close=lambda: None, latest=lambda partitions: {})
        self.runner = PipelineRunner(CONFIG, lambda config, listener: self.member, reader_factory, probe,
                                     ProgressPrinter(self.lines.append), watch, self.clock, metrics, serve)

    def assign(self, generation, partitions) -> QueryState:
        """The member's ``on_assigned`` (which only records the assignment), then the main
        thread's next look, which makes the start; the state after that look."""
        self.runner.on_assigned(generation, partitions)
        return self.runner.check()

    def due(self) -> QueryState:
        """Let any backoff pass, then one look by the main thread."""
        self.clock.advance(60.0)
        return self.runner.check()


def fenced_epoch():
    return KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH))


def test_a_transient_fault_in_on_assigned_is_retried_by_the_main_thread_not_fatal():
    h = Harness(fenced_epoch(), fenced_epoch())
    h.runner.on_assigned(1, TPS)  # does not raise
    assert h.runner.check() is QueryState.RESTARTING and h.reader.query is None
    assert h.runner.check() is QueryState.RESTARTING and len(h.reader.starts) == 1  # backoff not over yet
    assert h.due() is QueryState.RESTARTING   # the second attempt fails too
    assert h.due() is QueryState.RUNNING      # the third starts the query
    assert h.runner.check() is QueryState.RUNNING and len(h.reader.started) == 1
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


def test_a_start_is_not_made_before_its_backoff_is_over():
    h = Harness(fenced_epoch())
    h.assign(1, TPS)
    h.clock.advance(h.runner.supervisor.retry_at - h.clock() - 0.01)
    assert h.runner.check() is QueryState.RESTARTING and h.reader.started == []
    h.clock.advance(0.02)
    assert h.runner.check() is QueryState.RUNNING


def test_transient_query_failures_restart_it_forever():
    h = Harness(*[FailedQuery(Exception("org.apache.kafka.common.errors.NotLeaderOrFollowerException: x"))] * 60)
    h.assign(1, TPS)
    for _ in range(60):
        assert h.runner.check() is QueryState.RESTARTING
        assert h.due() is QueryState.RUNNING
    assert sum("[NOT_LEADER_OR_FOLLOWER]" in line for line in h.lines) == 60
    assert "retry 60, transient" in h.lines[-1]


def test_a_committed_batch_ends_the_failure_streak():
    h = Harness(fenced_epoch(), fenced_epoch(), FailedQuery(fenced_epoch()))
    h.runner.on_assigned(1, TPS)
    h.due()
    h.due()
    h.due()  # the third start runs a query that then fails
    h.runner.supervisor.batch_committed()  # as the query thread does after a commit
    assert h.runner.check() is QueryState.RESTARTING
    assert "retry 1, transient" in h.lines[-1]


def test_without_a_committed_batch_the_streak_goes_on():
    h = Harness(fenced_epoch(), fenced_epoch(), FailedQuery(fenced_epoch()))
    h.runner.on_assigned(1, TPS)
    h.due()
    h.due()
    h.due()
    assert h.runner.check() is QueryState.RESTARTING
    assert "retry 3, transient" in h.lines[-1]


def test_a_permanent_fault_ends_the_member_with_its_condition():
    h = Harness(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    h.runner.on_assigned(1, TPS)  # never raises on the member's thread
    with pytest.raises(PermanentFault) as info:
        h.runner.check()
    assert info.value.condition == "TOPIC_AUTHORIZATION_FAILED"
    assert info.value.headline().startswith("[TOPIC_AUTHORIZATION_FAILED] query start failed")
    assert h.runner.supervisor.state is QueryState.FAILED


def test_a_project_error_ends_the_member_as_itself():
    h = Harness(NoStartingOffsetError([TPS[0]]))
    h.runner.on_assigned(1, TPS)
    with pytest.raises(NoStartingOffsetError):
        h.runner.check()


def test_a_permanent_query_failure_ends_the_member():
    h = Harness(FailedQuery(Exception("org.apache.kafka.common.errors.TopicAuthorizationException: denied")))
    h.assign(1, TPS)
    with pytest.raises(PermanentFault) as info:
        h.runner.check()
    assert info.value.condition == "TOPIC_AUTHORIZATION"


def test_the_batch_writers_own_error_judges_a_failed_query_not_sparks_text():
    """Spark passes a failed batch's exception on as text; the runner classifies the object the
    batch writer raised (a gap in the table's offsets is permanent, whatever the text says)."""
    from sinks.txn_table import OffsetGapError
    from groupmgr.core import OffsetRange

    query = FailedQuery(Exception("StreamingQueryException: An exception was raised by the Python Proxy"))
    h = Harness(query)
    h.assign(1, TPS)
    h.reader.writer.failure = OffsetGapError("/t", OffsetRange("t", 0, 5, 9), 3)
    with pytest.raises(OffsetGapError):
        h.runner.check()


def test_unrecognised_query_failures_end_the_member_after_the_limit():
    h = Harness(*[FailedQuery(RuntimeError("bug"))] * (MAX_UNKNOWN_RESTARTS + 1))
    h.assign(1, TPS)
    for n in range(1, MAX_UNKNOWN_RESTARTS + 1):
        assert h.runner.check() is QueryState.RESTARTING
        assert f"restarting from the table's offsets ({n}/{MAX_UNKNOWN_RESTARTS})" in h.lines[-1]
        h.due()
    with pytest.raises(QueryFailedRepeatedly):
        h.runner.check()


def test_a_query_that_ended_after_a_refused_batch_waits_for_the_group():
    h = Harness(FailedQuery(RuntimeError("refused")))
    h.assign(1, TPS)
    h.reader.refused_batch = 3  # as the batch writer's refusal does on the query thread
    assert h.runner.check() is QueryState.FENCED
    assert h.due() is QueryState.FENCED and len(h.reader.started) == 1  # no restart until an assignment


def test_a_refused_batch_seen_after_the_next_assignment_starts_over_it_at_once():
    """The query stops on a refused batch, and the group's next assignment reaches the listener
    before the main thread sees the query stopped: no further rebalance is coming, so the member
    starts over its partitions at once instead of waiting for one."""
    h = Harness(RunningQuery())
    assert h.assign(1, TPS) is QueryState.RUNNING
    h.reader.query.isActive, h.reader.query.error = False, RuntimeError("refused")
    h.reader.refused_batch = 3
    h.runner.on_assigned(2, TPS)
    assert h.runner.check() is QueryState.RUNNING and len(h.reader.started) == 2
    assert any("the group has assigned this member partitions since" in line for line in h.lines)


def test_a_query_that_read_everything_before_an_assignment_starts_over_the_new_one():
    h = Harness(RunningQuery())
    h.assign(1, TPS[:1])
    h.reader.query.isActive = False  # finished (no error)
    h.runner.on_assigned(2, TPS)
    assert h.runner.check() is QueryState.RUNNING and len(h.reader.started) == 2


def _claiming_tables():
    return SimpleNamespace(table=ClaimingTable("out"), dead_table=ClaimingTable("dead"), routed=())


def test_a_batch_refused_for_a_claim_this_member_has_since_renewed_starts_over_at_once():
    """A stale writer resumes: its batch of the old claim is refused, but the group has already
    given the partitions back to it and it has claimed them again. No rebalance will come: it
    starts over them at once instead of waiting for one."""
    tables = _claiming_tables()
    h = Harness(FailedQuery(RuntimeError("refused")), tables=tables)
    h.assign(1, TPS)
    h.owned.claim(TPS)                                   # epoch 1: the claim the batch was written under
    tables.dead_table.claim(TPS)                         # epoch 2: another member's, which refuses it
    h.owned.claim(TPS)                                   # epoch 3: this member's again, in a newer generation
    h.reader.writer.failure = FencedWriterError("dead", TPS[0], ours=1, recorded=2)
    h.reader.refused_batch = 3
    assert h.runner.check() is QueryState.RUNNING and len(h.reader.started) == 2
    assert any("claimed its partitions again since" in line for line in h.lines)


def test_a_batch_refused_by_a_claim_newer_than_this_member_s_waits_for_the_group():
    tables = _claiming_tables()
    h = Harness(FailedQuery(RuntimeError("refused")), tables=tables)
    h.assign(1, TPS)
    h.owned.claim(TPS)                                   # epoch 1: this member's
    tables.table.claim(TPS)                              # epoch 2: another member's, newer
    h.reader.writer.failure = FencedWriterError("out", TPS[1], ours=1, recorded=2)
    h.reader.refused_batch = 3
    assert h.runner.check() is QueryState.FENCED
    assert h.due() is QueryState.FENCED and len(h.reader.started) == 1


def test_a_query_that_finished_is_finished():
    h = Harness(FailedQuery(None))
    h.assign(1, TPS)
    assert h.runner.check() is QueryState.FINISHED


def test_revoking_cancels_a_pending_start():
    h = Harness(fenced_epoch())
    h.assign(1, TPS)
    h.runner.on_revoked(TPS)
    assert h.due() is QueryState.IDLE and h.reader.starts == []
    assert h.reader.query is None


def test_a_stopped_partition_is_rechecked_and_resumes_by_itself_while_the_others_run():
    h = Harness()
    assert h.assign(1, TPS) is QueryState.RUNNING
    stopped = PartitionVerdict(TPS[1], None, "LEADER_NOT_AVAILABLE", "no leader for t-1")
    h.owned.note_stopped(PartitionChecks([stopped], recorded_offsets={TPS[1]: 10}))
    assert h.commits.commits == [({TPS[1]: 10}, "scg:stopped:LEADER_NOT_AVAILABLE: no leader for t-1")]
    assert sum("t-1 stopped: [LEADER_NOT_AVAILABLE]" in line for line in h.lines) == 1
    answers = [PartitionChecks([stopped]), PartitionChecks([PartitionVerdict(TPS[1], 10)])]
    h.owned.check = lambda partitions: answers.pop(0)
    assert h.runner.check() is QueryState.RUNNING and h.owned.stopped[TPS[1]].checks == 1  # not due yet
    assert h.due() is QueryState.RUNNING and h.owned.stopped[TPS[1]].checks == 2  # still stopped: runs on
    assert sum("stopped: [LEADER_NOT_AVAILABLE]" in line for line in h.lines) == 1  # said once
    assert h.due() is QueryState.RUNNING and len(h.reader.started) == 2  # t-1 runs again: a new start
    h.owned.note_stopped(PartitionChecks([]))
    assert not h.owned.stopped and any("t-1 resumes (was stopped: LEADER_NOT_AVAILABLE)" in line for line in h.lines)


def test_an_unchanged_assignment_keeps_the_running_query():
    query = RunningQuery()
    h = Harness(query)
    h.assign(1, TPS)
    h.runner.on_assigned(2, tuple(reversed(TPS)))  # a cooperative rebalance that moved nothing here
    assert h.runner.check() is QueryState.RUNNING
    assert h.reader.query is query and query.stops == 0 and len(h.reader.started) == 1
    assert "unchanged: the query keeps running" in h.lines[-1]


def test_a_cooperative_revoke_drops_only_the_partitions_that_leave():
    first, second = RunningQuery(), RunningQuery()
    h = Harness(first, second)
    h.assign(1, TPS)
    h.runner.on_revoked((TPS[1],))
    assert first.stops == 1 and h.owned.partitions == (TPS[0],)
    h.assign(2, (TPS[0],))  # the query stopped with the revoke: it starts again
    assert h.reader.query is second and h.owned.partitions == (TPS[0],)


def test_a_changed_assignment_restarts_at_a_batch_boundary():
    query = RunningQuery(busy=True)
    h = Harness(query)
    h.assign(1, TPS[:1])
    gate = h.reader.gate
    assert gate.enter() is not None  # the query thread is writing a micro-batch
    h.runner.on_assigned(2, TPS)  # gained a partition: the member thread goes on at once
    assert query.stops == 0 and h.runner.supervisor.pending and h.owned.partitions == TPS
    restart = threading.Thread(target=h.runner.check)  # the main thread's next look
    restart.start()
    restart.join(0.3)
    assert restart.is_alive() and query.stops == 0  # it waits for the batch to end
    gate.exit()
    restart.join(10)
    assert not restart.is_alive() and query.stops == 1 and h.reader.query is not query
    assert gate.enter() is None  # a batch Spark starts before the stop lands writes nothing


def test_an_assignment_without_the_running_querys_partitions_stops_it_before_returning():
    """The member revokes before it assigns, so this is a safety net: a query must never read a
    partition the member no longer owns once the listener returned."""
    query = RunningQuery()
    h = Harness(query)
    h.assign(1, TPS)
    h.runner.on_assigned(2, TPS[:1])
    assert query.stops == 1 and h.reader.query is None and h.runner.supervisor.pending


def test_back_to_back_batches_still_poll_once_per_committed_batch():
    """A backlog runs micro-batches with no idle moment between them: each committed batch is a
    poll, and a batch that never ends is none (so the poll timer can expire)."""
    h = Harness(RunningQuery(busy=True))
    h.assign(1, TPS)
    h.reader.gate.enter(TPS)  # a batch is writing
    h.runner.poll_between_batches()
    assert h.member.polls == 0  # a batch is writing and no batch was committed yet
    for committed in (1, 2):
        h.runner.supervisor.batch_committed()  # as the query thread does after a commit
        h.runner.poll_between_batches()
        h.runner.poll_between_batches()
        assert h.member.polls == committed
    h.reader.gate.exit()
    h.runner.poll_between_batches()
    assert h.member.polls == 3  # idle between batches: poll


def test_a_trigger_that_only_plans_is_not_a_batch_in_flight():
    """Spark marks a trigger active while the scg-kafka planner waits for an assignment (most
    of the interval): an idle member still polls, or its poll timer would expire."""
    h = Harness(RunningQuery(busy=True))  # isTriggerActive all along
    h.assign(1, TPS)
    h.runner.poll_between_batches()
    h.runner.poll_between_batches()
    assert h.member.polls == 2


def test_an_assignment_while_the_member_stops_starts_no_query():
    h = Harness(RunningQuery())
    h.runner.supervisor.close()  # run() is ending; the member has not left the group yet
    assert h.assign(1, TPS) is QueryState.IDLE
    assert h.reader.query is None and not h.runner.supervisor.pending and len(h.reader.starts) == 1


def test_who_runs_the_group_is_asked_by_the_main_thread_once_per_assignment():
    """The describe behind GROUP_RUN_BY_BROKER is a network round trip: the listener thread only
    marks it due, so it never delays a query start; the main thread asks once per assignment."""
    asked = []
    watch = ServerAssignmentWatch(CONFIG.group, lambda: asked.append("describe") or "CLASSIC", lambda line: None)
    h = Harness(watch=watch)
    h.runner.on_assigned(1, TPS)
    h.runner.on_assigned(2, TPS)  # unchanged: the query keeps running, the question is due again
    assert asked == []
    assert watch.check_when_due() is None and watch.check_when_due() is None
    assert asked == ["describe"]


def test_a_member_stopped_while_warming_up_never_joins_its_group():
    """A SIGTERM during start-up (a cancelled deploy) must not cost the group two rebalances: one
    for a join, one for the leave right after it."""
    stop = threading.Event()
    h = Harness(warm_up_does=stop.set)  # the signal arrives while the member warms up
    h.runner.run(stop)
    assert h.member.calls == ["close"]
    assert not any("joining consumer group" in line for line in h.lines)


def test_the_main_loop_sees_a_stop_without_waiting_out_its_poll(monkeypatch):
    """A SIGTERM sets run()'s stop event; the loop must close the batch gate before Spark starts
    another batch, not after its poll interval."""
    from pipelines.runtime import runner as runner_module

    monkeypatch.setattr(runner_module, "POLL_S", 600.0)
    h, stop, returned = Harness(), threading.Event(), threading.Event()
    thread = threading.Thread(target=lambda: (h.runner.run(stop), returned.set()), daemon=True)
    thread.start()
    assert not returned.wait(0.2)
    stop.set()
    assert returned.wait(10)
    assert h.member.calls == ["start", "close"]


def test_every_assignment_counts_as_a_rebalance_and_restarts_count_by_condition():
    from prometheus_client import generate_latest

    from pipelines.runtime.metrics import MemberMetrics

    metrics = MemberMetrics("p", "g", "m")
    h = Harness(fenced_epoch(), metrics=metrics)
    h.assign(1, TPS)
    h.due()
    h.runner.on_assigned(2, TPS)  # unchanged: the query keeps running, still a rebalance
    text = generate_latest(metrics.registry).decode()
    assert 'scg_rebalances_total{group="g",member="m",pipeline="p"} 2.0' in text
    assert 'scg_member_generation{group="g",member="m",pipeline="p"} 2.0' in text
    assert 'scg_query_restarts_total{group="g",member="m",pipeline="p",reason="FENCED_LEADER_EPOCH"} 1.0' in text


def test_a_metrics_port_in_use_ends_the_member_before_it_joins():
    import socket

    from pipelines.runtime.metrics import MemberMetrics, MetricsPortInUse, MetricsServer

    metrics = MemberMetrics("p", "g", "m")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        h = Harness(metrics=metrics, serve=lambda healthy, ready: MetricsServer(metrics.registry, healthy, ready,
                                                                                "127.0.0.1", port))
        with pytest.raises(MetricsPortInUse):
            h.runner.run(threading.Event())
    assert h.member.calls == ["close"] and h.reader.started == []


def test_a_scrape_answers_at_once_while_a_rebalance_holds_the_runner():
    """A listener stuck stopping the query (a batch that does not end) holds the runner's lock:
    the metrics and both probes still answer, with the last known values."""
    import urllib.request

    from pipelines.runtime.member_probes import MemberProbes
    from pipelines.runtime.metrics import MemberMetrics, MetricsServer

    stopping, release = threading.Event(), threading.Event()

    class StuckQuery(RunningQuery):
        def stop(self):
            stopping.set()
            release.wait(30)

    metrics = MemberMetrics("p", "g", "m")
    h = Harness(StuckQuery(), metrics=metrics)
    h.assign(1, TPS)
    probes = MemberProbes(h.runner.supervisor, h.member, h.owned, lambda: True, lambda: h.reader.query is not None)
    server = MetricsServer(metrics.registry, probes.healthy, probes.ready, "127.0.0.1", 0).start()
    revoking = threading.Thread(target=h.runner.on_revoked, args=(TPS,), daemon=True)
    try:
        revoking.start()
        assert stopping.wait(10)  # the listener now holds the runner's lock inside the stop
        for path in ("/metrics", "/healthz", "/readyz"):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as answer:
                assert answer.status == 200
    finally:
        release.set()
        revoking.join(10)
        server.stop()
