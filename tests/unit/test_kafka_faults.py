"""Transient vs permanent Kafka errors, bounded backoff, failure streaks and the retry helper
(groupmgr/kafka_faults.py)."""
import kafka.errors as kafka_errors
import pytest
from confluent_kafka import KafkaError, KafkaException

from groupmgr.group_errors import (ClientError, CoordinatorNotAvailable, CoordinatorUnreachable, FencedInstanceId,
                                   GroupAuthorizationFailed, IllegalGeneration, NotCoordinator,
                                   TopicAuthorizationFailed, UnknownMemberId)
from groupmgr.kafka_faults import (Backoff, Fault, FaultKind, FaultStreak, call_with_retries, classify_kafka,
                                   classify_kafka_code)
from tests.support.fake_clock import FakeClock

TRANSIENT, PERMANENT = FaultKind.TRANSIENT, FaultKind.PERMANENT


def ck(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


@pytest.mark.parametrize("code, condition", [
    (KafkaError.NOT_LEADER_FOR_PARTITION, "NOT_LEADER_OR_FOLLOWER"),
    (KafkaError.FENCED_LEADER_EPOCH, "FENCED_LEADER_EPOCH"),
    (KafkaError.UNKNOWN_LEADER_EPOCH, "UNKNOWN_LEADER_EPOCH"),
    (KafkaError.LEADER_NOT_AVAILABLE, "LEADER_NOT_AVAILABLE"),
    (KafkaError.REQUEST_TIMED_OUT, "REQUEST_TIMED_OUT"),
    (KafkaError.COORDINATOR_NOT_AVAILABLE, "COORDINATOR_NOT_AVAILABLE"),
    (KafkaError.NOT_COORDINATOR, "NOT_COORDINATOR"),
    (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "COORDINATOR_LOAD_IN_PROGRESS"),
    (KafkaError.NETWORK_EXCEPTION, "NETWORK_EXCEPTION"),
    (KafkaError.NOT_ENOUGH_REPLICAS, "NOT_ENOUGH_REPLICAS"),
    (KafkaError.KAFKA_STORAGE_ERROR, "KAFKA_STORAGE_ERROR"),
    (KafkaError._TRANSPORT, "TRANSPORT"),
    (KafkaError._TIMED_OUT, "TIMED_OUT"),
    (KafkaError._ALL_BROKERS_DOWN, "ALL_BROKERS_DOWN"),
    (KafkaError._WAIT_COORD, "WAIT_COORD"),
])
def test_confluent_broker_moves_and_timeouts_are_transient(code, condition):
    fault = classify_kafka(ck(code))
    assert fault.kind is TRANSIENT and fault.condition == condition and fault.give_up_after_s is None


@pytest.mark.parametrize("code", [
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError._INVALID_ARG, KafkaError.UNSUPPORTED_VERSION,
    KafkaError.TOPIC_DELETION_DISABLED,
])
def test_confluent_errors_a_person_must_fix_are_permanent(code):
    fault = classify_kafka(ck(code))
    assert fault.kind is PERMANENT and fault.condition == KafkaError(code).name().lstrip("_")


def test_a_fatal_confluent_error_is_permanent_even_if_its_code_is_retriable():
    assert classify_kafka(KafkaException(KafkaError(KafkaError._TRANSPORT, fatal=True))).kind is PERMANENT


def test_librdkafka_retriable_flag_counts_for_unlisted_local_codes():
    assert classify_kafka(KafkaException(KafkaError(KafkaError._FATAL, retriable=True))).kind is TRANSIENT
    assert classify_kafka(ck(KafkaError._FATAL)).kind is PERMANENT


@pytest.mark.parametrize("code", [KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                                  KafkaError._UNKNOWN_PARTITION])
def test_an_unknown_topic_is_transient_for_a_while_only(code):
    fault = classify_kafka(ck(code))
    assert fault.kind is TRANSIENT and fault.give_up_after_s and fault.give_up_after_s > 0


def test_fault_detail_is_one_line_and_headline_names_the_condition():
    fault = classify_kafka(ck(KafkaError.FENCED_LEADER_EPOCH))
    assert "\n" not in fault.detail and fault.headline().startswith("[FENCED_LEADER_EPOCH] ")


@pytest.mark.parametrize("error, kind", [
    (kafka_errors.NotLeaderForPartitionError(), TRANSIENT),
    (kafka_errors.FencedLeaderEpochError(), TRANSIENT),
    (kafka_errors.KafkaConnectionError(), TRANSIENT),
    (kafka_errors.KafkaTimeoutError(), TRANSIENT),
    (kafka_errors.NodeNotReadyError(), TRANSIENT),
    (kafka_errors.TopicAuthorizationFailedError(), PERMANENT),
    (kafka_errors.SaslAuthenticationFailedError(), PERMANENT),
    (kafka_errors.UnsupportedVersionError(), PERMANENT),
])
def test_kafka_python_errors_follow_their_retriable_flag(error, kind):
    assert classify_kafka(error).kind is kind


def test_kafka_python_unknown_topic_gives_up_after_a_while():
    fault = classify_kafka(kafka_errors.UnknownTopicOrPartitionError())
    assert fault.kind is TRANSIENT and fault.give_up_after_s


@pytest.mark.parametrize("error, kind", [
    (CoordinatorNotAvailable("x"), TRANSIENT), (NotCoordinator("x"), TRANSIENT),
    (CoordinatorUnreachable("x"), TRANSIENT), (IllegalGeneration("x"), TRANSIENT),
    (UnknownMemberId("x"), TRANSIENT), (FencedInstanceId("x"), PERMANENT),
    (GroupAuthorizationFailed("x"), PERMANENT), (TopicAuthorizationFailed("x"), PERMANENT),
    (ClientError("x"), PERMANENT),
])
def test_group_errors_use_their_flags_and_a_newer_instance_is_permanent(error, kind):
    fault = classify_kafka(error)
    assert fault.kind is kind and fault.condition == error.condition


def test_connection_and_timeout_errors_are_transient_and_others_are_not_kafka_errors():
    assert classify_kafka(ConnectionRefusedError("refused")).kind is TRANSIENT
    assert classify_kafka(TimeoutError()).condition == "TIMED_OUT"
    assert classify_kafka(ValueError("bad")) is None
    assert classify_kafka(ZeroDivisionError()) is None


def test_broker_codes_unknown_to_kafka_are_permanent():
    assert classify_kafka_code(9999).kind is PERMANENT


# -- Backoff ----------------------------------------------------------------------------------
def test_backoff_doubles_from_initial_and_is_capped():
    backoff = Backoff(initial_s=0.5, max_s=4.0, jitter=0.0)
    assert [backoff.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_backoff_jitter_stays_within_bounds_and_never_passes_the_cap():
    backoff = Backoff(initial_s=1.0, max_s=8.0, jitter=0.2)
    assert backoff.delay(1, rand=0.0) == pytest.approx(0.8)
    assert backoff.delay(1, rand=0.999999) == pytest.approx(1.2, rel=1e-5)
    assert backoff.delay(4, rand=0.999999) == 8.0
    assert all(0.8 <= backoff.delay(1) <= 1.2 for _ in range(200))
    assert backoff.delay(10_000) == pytest.approx(8.0, rel=0.25)


def test_backoff_rejects_attempt_zero():
    with pytest.raises(ValueError):
        Backoff().delay(0)


# -- FaultStreak --------------------------------------------------------------------------------
def test_streak_counts_attempts_and_persistence_of_one_condition():
    clock = FakeClock()
    streak = FaultStreak(clock)
    slow = Fault(TRANSIENT, "UNKNOWN_TOPIC_OR_PARTITION", give_up_after_s=10)
    assert streak.failed(slow) == 1 and streak.persisted_s() == 0
    clock.advance(9)
    assert streak.failed(slow) == 2 and not streak.gave_up(slow)
    clock.advance(1)
    assert streak.gave_up(slow)
    other = Fault(TRANSIENT, "REQUEST_TIMED_OUT")
    assert streak.failed(other) == 3 and streak.persisted_s() == 0 and not streak.gave_up(other)
    streak.succeeded()
    assert streak.attempts == 0 and streak.persisted_s() == 0


def test_streak_never_gives_up_on_a_fault_without_a_limit():
    clock = FakeClock()
    streak = FaultStreak(clock)
    forever = Fault(TRANSIENT, "NOT_LEADER_OR_FOLLOWER")
    for _ in range(100):
        streak.failed(forever)
        clock.advance(3600)
    assert not streak.gave_up(forever)


# -- call_with_retries --------------------------------------------------------------------------
class Script:
    """An action that raises the given errors in turn, then returns "done"."""

    def __init__(self, *errors):
        self.errors, self.calls = list(errors), 0

    def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def retry(action, clock=None, deadline=1e9, stop_after=None):
    clock = clock or FakeClock()
    waits, retries = [], []

    def wait(delay):
        waits.append(delay)
        clock.advance(delay)
        return stop_after is not None and len(waits) >= stop_after

    result = call_with_retries(action, classify_kafka, backoff=Backoff(1.0, 8.0, jitter=0.0), deadline=deadline,
                               clock=clock, wait=wait, on_retry=lambda f, n, d: retries.append((f.condition, n, d)))
    return result, waits, retries


def test_transient_errors_are_retried_with_growing_waits_each_reported_once():
    action = Script(ck(KafkaError.FENCED_LEADER_EPOCH), ck(KafkaError._TRANSPORT), ck(KafkaError.NOT_COORDINATOR))
    result, waits, retries = retry(action)
    assert result == "done" and action.calls == 4 and waits == [1.0, 2.0, 4.0]
    assert retries == [("FENCED_LEADER_EPOCH", 1, 1.0), ("TRANSPORT", 2, 2.0), ("NOT_COORDINATOR", 3, 4.0)]


def test_a_permanent_error_is_raised_at_once():
    action = Script(ck(KafkaError._TRANSPORT), ck(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(KafkaException):
        retry(action)
    assert action.calls == 2


def test_an_unclassified_error_is_raised_at_once():
    action = Script(RuntimeError("bug"))
    with pytest.raises(RuntimeError):
        retry(action)
    assert action.calls == 1


def test_retries_stop_before_the_deadline_with_the_last_error():
    clock = FakeClock(0.0)
    action = Script(*[ck(KafkaError._TRANSPORT)] * 10)
    with pytest.raises(KafkaException):
        retry(action, clock=clock, deadline=5.0)
    assert action.calls == 3 and clock.now == 3.0  # waits 1 + 2; the next (4) would pass 5


def test_a_stop_request_during_the_wait_raises_the_last_error():
    action = Script(*[ck(KafkaError._TRANSPORT)] * 10)
    with pytest.raises(KafkaException):
        retry(action, stop_after=1)
    assert action.calls == 1


def test_the_waits_alone_never_pass_the_deadline_even_with_a_clock_that_stands_still():
    clock = FakeClock(0.0)
    action = Script(*[ck(KafkaError._TRANSPORT)] * 100)
    waits = []
    with pytest.raises(KafkaException):
        call_with_retries(action, classify_kafka, backoff=Backoff(1.0, 8.0, jitter=0.0), deadline=10.0,
                          clock=clock, wait=lambda d: waits.append(d) and False)
    assert waits == [1.0, 2.0, 4.0]
