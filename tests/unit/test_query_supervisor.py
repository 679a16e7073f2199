"""The query's state machine (query_supervisor.QuerySupervisor), pure: a fake clock and a
restart policy over named faults."""
import pytest

from groupmgr.kafka_faults import Backoff, Fault, FaultKind
from pipelines.runtime.failure_rules import RestartPolicy
from pipelines.runtime.query_supervisor import QueryState, QuerySupervisor
from tests.support.fake_clock import FakeClock

TRANSIENT = Fault(FaultKind.TRANSIENT, "BROKER_DOWN", "broker restarting")
PERMANENT = Fault(FaultKind.PERMANENT, "TOPIC_AUTHORIZATION_FAILED", "denied")


class Failure(Exception):
    def __init__(self, fault: Fault):
        super().__init__(fault.detail)
        self.fault = fault


def supervisor(clock=None, retries=None, stable_after_s=60.0) -> QuerySupervisor:
    clock = clock or FakeClock()
    policy = RestartPolicy(Backoff(1.0, 30.0), 2, clock, lambda exc: exc.fault, rand=lambda: 0.5)
    return QuerySupervisor(policy, clock, (lambda what, v: retries.append((what, v))) if retries is not None
                           else (lambda what, v: None), stable_after_s=stable_after_s)


def test_an_assignment_makes_a_start_due_now_and_an_empty_one_does_not():
    s = supervisor()
    s.assigned(True)
    assert s.state is QueryState.STARTING and s.start_due()
    s.assigned(False)
    assert s.state is QueryState.IDLE and not s.start_due()


def test_a_failed_start_is_due_again_only_after_its_backoff():
    clock, retries = FakeClock(), []
    s = supervisor(clock, retries)
    s.assigned(True)
    s.start_failed(Failure(TRANSIENT))
    assert s.state is QueryState.RESTARTING and not s.start_due()
    assert retries[0][0] == "query start failed" and retries[0][1].delay_s == 1.0
    clock.advance(0.99)
    assert not s.start_due()
    clock.advance(0.01)
    assert s.start_due()
    s.start_failed(Failure(TRANSIENT))
    assert retries[1][0] == "query restart failed" and retries[1][1].delay_s == 2.0


def test_a_permanent_fault_fails_with_the_error_it_makes():
    s = supervisor()
    s.assigned(True)
    s.start_failed(Failure(PERMANENT))
    assert s.state is QueryState.FAILED and not s.start_due()
    with pytest.raises(Exception) as info:
        s.raise_if_failed()
    assert info.value.condition == "TOPIC_AUTHORIZATION_FAILED"
    s.assigned(True)  # a later assignment does not revive a failed member
    assert s.state is QueryState.FAILED


def test_a_committed_batch_or_a_stable_query_ends_the_streak():
    clock, retries = FakeClock(), []
    s = supervisor(clock, retries, stable_after_s=60.0)
    s.assigned(True)
    s.start_failed(Failure(TRANSIENT))
    s.started(running=True)
    s.judge_streak(query_running=True)
    s.query_failed(Failure(TRANSIENT))
    assert retries[-1][1].attempt == 2          # the streak went on
    s.started(running=True)
    s.batch_committed()
    s.judge_streak(query_running=True)
    s.query_failed(Failure(TRANSIENT))
    assert retries[-1][1].attempt == 1          # a committed batch ended it
    s.started(running=True)
    clock.advance(59.9)
    s.judge_streak(query_running=True)
    s.query_failed(Failure(TRANSIENT))
    assert retries[-1][1].attempt == 2          # not yet stable
    s.started(running=True)
    clock.advance(60.0)
    s.judge_streak(query_running=True)
    s.query_failed(Failure(TRANSIENT))
    assert retries[-1][1].attempt == 1          # ran long enough


def test_revocation_cancels_a_pending_start_and_closing_prevents_every_start():
    s = supervisor()
    s.assigned(True)
    s.dropped(query_running=False)
    assert s.state is QueryState.IDLE and not s.pending
    s.close()
    s.assigned(True)
    s.may_run_again()
    assert not s.pending and s.closing


def test_a_query_that_ended_is_fenced_or_finished():
    s = supervisor()
    s.query_ended(refused=True)
    assert s.state is QueryState.FENCED
    s.query_ended(refused=False)
    assert s.state is QueryState.FINISHED


def test_unrecognised_failures_fail_after_the_limit():
    s = supervisor()
    unknown = Failure(Fault(FaultKind.UNKNOWN, "UNCLASSIFIED_FAILURE", "bug"))
    for _ in range(2):
        assert not s.query_failed(unknown).give_up
    assert s.query_failed(unknown).give_up and s.state is QueryState.FAILED


def test_the_first_start_is_due_at_once_and_counts_nothing_yet():
    clock = FakeClock(now=0.0)
    s = supervisor(clock)
    assert s.state is QueryState.IDLE and s.retry_at == 0.0 and not s.closing and s.committed_batches == 0
    s.assigned(True)
    assert s.start_due()            # at time 0: no wait before the first start
    s.started(running=False)
    assert s.state is QueryState.IDLE  # every owned partition stopped: nothing runs
    s.may_run_again()
    assert s.state is QueryState.STARTING and s.start_due()


def test_committed_batches_are_counted_one_by_one():
    s = supervisor()
    s.batch_committed()
    s.batch_committed()
    assert s.committed_batches == 2


def test_a_revocation_leaves_a_running_query_running_and_an_absent_one_idle():
    s = supervisor()
    s.assigned(True)
    s.started(running=True)
    s.dropped(query_running=True)
    assert s.state is QueryState.RUNNING
    s.dropped(query_running=False)
    assert s.state is QueryState.IDLE
    s.query_ended(refused=True)
    s.dropped(query_running=False)
    assert s.state is QueryState.FENCED  # a fenced member waits for its next assignment


def test_closing_stops_a_pending_start_but_not_a_running_query():
    s = supervisor()
    s.assigned(True)
    s.started(running=True)
    s.close()
    assert s.state is QueryState.RUNNING and s.closing
    other = supervisor()
    other.assigned(True)
    other.close()
    assert other.state is QueryState.IDLE


def test_a_failed_query_is_named_as_such_in_the_retry():
    retries = []
    s = supervisor(retries=retries)
    s.assigned(True)
    s.started(running=True)
    s.query_failed(Failure(TRANSIENT))
    assert retries[-1][0] == "query failed" and s.state is QueryState.RESTARTING
