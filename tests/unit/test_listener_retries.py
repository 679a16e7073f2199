"""The listener dispatcher retries a callback's transient Kafka fault with backoff, never turns it
into a member failure, and keeps a permanent one fatal (groupmgr/listener.py)."""
import logging
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from groupmgr import listener as listener_module
from groupmgr.group_errors import ListenerError
from groupmgr.kafka_faults import Backoff
from groupmgr.listener import ListenerDispatcher


class Flaky:
    """on_assigned raises the given errors in turn, then succeeds."""

    def __init__(self, *errors):
        self.errors, self.calls = list(errors), 0

    def on_assigned(self, generation, partitions):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    monkeypatch.setattr(listener_module, "CALLBACK_BACKOFF", Backoff(initial_s=0.01, max_s=0.02))


def dispatch(listener, bound_s=5.0):
    dispatcher = ListenerDispatcher(listener, "g", bound_s, time.monotonic)
    try:
        dispatcher.call("on_assigned", (1, ()), lambda: None, lambda: None)
    finally:
        dispatcher.shutdown()


def test_a_transient_fault_is_retried_until_the_callback_succeeds(caplog):
    flaky = Flaky(KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH)),
                  KafkaException(KafkaError(KafkaError._TRANSPORT)))
    with caplog.at_level(logging.WARNING, logger="groupmgr.listener"):
        dispatch(flaky)
    assert flaky.calls == 3
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 2 and "[FENCED_LEADER_EPOCH]" in retries[0] and "[TRANSPORT]" in retries[1]


def test_a_transient_fault_outlasting_the_bound_is_logged_not_fatal(caplog):
    flaky = Flaky(*[KafkaException(KafkaError(KafkaError._TRANSPORT))] * 1000)
    with caplog.at_level(logging.WARNING, logger="groupmgr.listener"):
        dispatch(flaky, bound_s=1.0)
    assert 1 < flaky.calls < 1000
    assert any("persisted" in r.getMessage() and "[TRANSPORT]" in r.getMessage() for r in caplog.records)


def test_a_permanent_fault_is_fatal_at_once():
    flaky = Flaky(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    with pytest.raises(ListenerError) as info:
        dispatch(flaky)
    assert flaky.calls == 1 and isinstance(info.value.cause, KafkaException)


def test_an_unrecognised_exception_stays_fatal():
    flaky = Flaky(ZeroDivisionError())
    with pytest.raises(ListenerError):
        dispatch(flaky)
    assert flaky.calls == 1
