"""BrokerProbe's topic IDs: an unanswered describe is never a changed topic ID (pure unit: a
scripted AdminClient; confluent-kafka's own error and Uuid types)."""
from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, Uuid

from groupmgr.core import TopicPartition
from pipelines.runtime.broker_probe import NO_TOPIC_ID, BrokerProbe, TopicIdsUnconfirmed
from pipelines.runtime.failure_rules import TRANSIENT, classify_failure
from pipelines.runtime.partition_checks import topic_fingerprint

T_ID = Uuid(7, 11)


class ScriptedAdmin:
    """Answers describe_topics from a script: one {topic: Uuid or KafkaError code} per call."""

    def __init__(self, answers: list[dict]):
        self.answers, self.asked = list(answers), []

    def describe_topics(self, collection, request_timeout):
        answer = self.answers.pop(0)
        topics = list(collection.topic_names)
        self.asked.append(sorted(topics))
        futures = {}
        for topic in topics:
            future, value = Future(), answer[topic]
            if isinstance(value, Uuid):
                future.set_result(SimpleNamespace(topic_id=value))
            else:
                future.set_exception(KafkaException(KafkaError(value)))
            futures[topic] = future
        return futures


class FakeClock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _probe(admin: ScriptedAdmin) -> BrokerProbe:
    return BrokerProbe({"bootstrap.servers": "unused:9092"}, admin_factory=lambda config: admin)


def test_a_describe_that_timed_out_is_asked_again_not_read_as_a_new_topic_id():
    admin = ScriptedAdmin([{"a": KafkaError._TIMED_OUT, "b": T_ID}, {"a": T_ID}])
    clock = FakeClock()
    ids = _probe(admin).current_topic_ids(["a", "b"], sleep=clock.sleep, clock=lambda: clock.now)
    assert ids == {"a": topic_fingerprint(str(T_ID)), "b": topic_fingerprint(str(T_ID))}
    assert admin.asked == [["a", "b"], ["a"]]  # only the unanswered topic again
    assert len(clock.slept) == 1


def test_a_topic_the_brokers_say_does_not_exist_is_none_at_once():
    admin = ScriptedAdmin([{"a": KafkaError.UNKNOWN_TOPIC_OR_PART}])
    assert _probe(admin).current_topic_ids(["a"], sleep=pytest.fail) == {"a": None}


def test_the_all_zero_topic_id_is_a_condition_not_an_id():
    admin = ScriptedAdmin([{"a": Uuid(0, 0)}])
    probe = _probe(admin)
    ids, errors = probe._topic_ids(probe._client(), {"a"})
    assert ids == {} and errors == {"a": NO_TOPIC_ID}
    admin.answers = [{"a": Uuid(0, 0)}]
    a0 = TopicPartition("a", 0)
    assert probe.describe([a0]).errors == {a0: NO_TOPIC_ID}  # the partition checks see no ID


def test_a_topic_unanswered_past_the_patience_is_a_named_transient_error():
    admin = ScriptedAdmin([{"a": KafkaError._TIMED_OUT}] * 50)
    clock = FakeClock()
    with pytest.raises(TopicIdsUnconfirmed) as raised:
        _probe(admin).current_topic_ids(["a"], patience_s=5, sleep=clock.sleep, clock=lambda: clock.now)
    assert "a (TIMED_OUT)" in str(raised.value)
    assert clock.now <= 5 and len(admin.asked) > 2
    fault = classify_failure(raised.value)
    assert (fault.kind, fault.condition) == (TRANSIENT, "TOPIC_IDS_UNCONFIRMED")


def test_a_client_that_did_not_answer_is_replaced_one_that_answered_an_error_is_kept():
    """A describe that timed out in the client (seen: one member's librdkafka client timing out
    for minutes after a broker restart while the others' were answered) is asked again through a
    new client; a topic the brokers answered as unknown is not a failed client."""
    admin = ScriptedAdmin([{"a": KafkaError._TIMED_OUT}, {"a": T_ID}, {"a": KafkaError.UNKNOWN_TOPIC_OR_PART},
                           {"a": T_ID}])
    created = []
    probe = BrokerProbe({"bootstrap.servers": "unused:9092"},
                        admin_factory=lambda config: created.append(config) or admin)
    clock = FakeClock()
    assert probe.current_topic_ids(["a"], sleep=clock.sleep, clock=lambda: clock.now) == \
        {"a": topic_fingerprint(str(T_ID))}
    assert len(created) == 2               # the one that timed out, and its replacement
    assert probe.current_topic_ids(["a"]) == {"a": None}   # the brokers say the topic is gone
    probe.current_topic_ids(["a"])
    assert len(created) == 2
