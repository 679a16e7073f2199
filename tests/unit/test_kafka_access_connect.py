"""KafkaAccess.connect decides from what librdkafka reported in each metadata round: a listener
that closes every connection at its first request for MISMATCH_ROUNDS rounds in a row is a
KAFKA_PROTOCOL_MISMATCH only when it answers a TLS handshake and the pipeline has no TLS; refused
connections, closes followed by an answer, or closes from a listener that does not speak TLS are
not. The later steps (topics, pattern, session timeout) turn transient faults into an inconclusive
check, never an exception."""
from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipelines.runtime import kafka_access
from pipelines.runtime.kafka_access import KafkaAccess, KafkaProtocolMismatch

CLOSED = "broker1:9092/bootstrap: Disconnected: connection closed by peer (after 2ms in state APIVERSION_QUERY)"
REFUSED = "broker1:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT)"


class ScriptedAdmin:
    """An AdminClient whose metadata rounds follow a script: each entry is the log lines librdkafka
    writes during that round, or "answer" for a round that gets metadata."""

    def __init__(self, config, rounds):
        self.logger, self.rounds = config["logger"], list(rounds)
        self.asked = 0

    def list_topics(self, timeout=None):
        self.asked += 1
        step = self.rounds.pop(0) if self.rounds else []
        if step == "answer":
            return SimpleNamespace(topics={})
        for line in step:
            self.logger.log(6, "%s [%s] %s", "FAIL", "rdkafka#producer-1", line)
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    def poll(self, timeout):
        return 0


def spec(protocol="PLAINTEXT"):
    security = SimpleNamespace(protocol=protocol, uses_sasl=protocol.startswith("SASL"), sasl_mechanism=None,
                               sasl_username=None, ssl_ca_location=None, ssl_certificate_location=None)
    return SimpleNamespace(security=security, bootstrap_string="broker1:9092",
                           confluent_config=lambda: {"bootstrap.servers": "broker1:9092"})


def connect(rounds, timeout_s=5.0, tls=True, protocol="PLAINTEXT", probed=None):
    made = []

    def probe(host, port):
        if probed is not None:
            probed.append((host, port))
        return tls
    access = KafkaAccess(spec(protocol), "g", timeout_s,
                         lambda config: made.append(ScriptedAdmin(config, rounds)) or made[0], tls_probe=probe)
    return access.connect(), made[0]


MISMATCHED = [[CLOSED] * kafka_access.MISMATCH_CLOSES] * kafka_access.MISMATCH_ROUNDS


def test_closes_at_the_first_request_from_a_tls_listener_are_a_protocol_mismatch():
    probed = []
    with pytest.raises(KafkaProtocolMismatch) as raised:
        connect(MISMATCHED + ["answer"], probed=probed)
    assert "the listener at broker1:9092 speaks TLS; the pipeline has no security" in str(raised.value)
    assert probed == [("broker1", 9092)]


def test_closes_from_a_listener_that_does_not_speak_tls_conclude_nothing(monkeypatch):
    """A restarting broker behind a proxy, or a connection quota: asked once, then as a down broker."""
    clock = iter(range(0, 1000, 1))
    monkeypatch.setattr(kafka_access.time, "monotonic", lambda: float(next(clock)))
    probed = []
    answered, admin = connect(MISMATCHED * 20, timeout_s=20, tls=False, probed=probed)
    assert answered is False and admin.asked > kafka_access.MISMATCH_ROUNDS and len(probed) == 1


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_a_pipeline_with_tls_is_never_named_a_mismatch_from_closes(monkeypatch, protocol):
    clock = iter(range(0, 1000, 1))
    monkeypatch.setattr(kafka_access.time, "monotonic", lambda: float(next(clock)))
    probed = []
    answered, _ = connect(MISMATCHED * 20, timeout_s=20, protocol=protocol, probed=probed)
    assert answered is False and probed == []


def test_a_sasl_plaintext_pipeline_at_a_tls_listener_is_told_to_use_sasl_ssl():
    with pytest.raises(KafkaProtocolMismatch) as raised:
        connect(MISMATCHED, protocol="SASL_PLAINTEXT")
    assert "SASL_SSL" in str(raised.value)


def test_a_listener_that_answers_after_closing_is_reached():
    answered, admin = connect([[CLOSED] * kafka_access.MISMATCH_CLOSES, "answer"])
    assert answered is True and admin.asked == 2


def test_a_round_of_refused_connections_starts_the_count_again():
    rounds = [[CLOSED] * 3, [REFUSED] * 3, [CLOSED] * 3, "answer"]
    answered, admin = connect(rounds)
    assert answered is True and admin.asked == 4


def test_refused_connections_until_the_deadline_conclude_nothing(monkeypatch):
    clock = iter(range(0, 1000, 2))
    monkeypatch.setattr(kafka_access.time, "monotonic", lambda: float(next(clock)))
    answered, admin = connect([[REFUSED] * 5] * 100, timeout_s=10)
    assert answered is False and admin.asked >= 2


# -- after connecting: transient faults make the check inconclusive --------------------------------

class AnsweringAdmin:
    """An AdminClient that answers metadata; ``topic_errors`` maps a topic to what list_topics(topic)
    raises, ``describe_errors`` to what its describe_topics future raises."""

    def __init__(self, config, topic_errors=None, describe_errors=None):
        self.topic_errors, self.describe_errors = topic_errors or {}, describe_errors or {}
        self.described = []

    def list_topics(self, topic=None, timeout=None):
        if topic in self.topic_errors:
            raise KafkaException(KafkaError(self.topic_errors[topic]))
        return SimpleNamespace(topics={} if topic is None else {topic: SimpleNamespace(error=None)})

    def describe_topics(self, collection, include_authorized_operations=True, request_timeout=None):
        futures = {}
        for topic in collection.topic_names:
            self.described.append(topic)
            future = Future()
            if topic in self.describe_errors:
                future.set_exception(KafkaException(KafkaError(self.describe_errors[topic])))
            else:
                future.set_result(SimpleNamespace(authorized_operations=None))
            futures[topic] = future
        return futures

    def describe_consumer_groups(self, groups, include_authorized_operations=True, request_timeout=None):
        future = Future()
        future.set_result(SimpleNamespace(authorized_operations=None, state="EMPTY"))
        return {groups[0]: future}

    def poll(self, timeout):
        return 0


class GroupClient:
    """CoordinatorClient's part the access check uses: topic_names fails with ``error``; a JoinGroup
    is answered ``answer`` (or fails with ``join_error``)."""

    def __init__(self, error=None, answer=None, join_error=None):
        self.error, self.answer, self.join_error = error, answer, join_error

    def deadline(self, seconds):
        return seconds

    def topic_names(self, deadline):
        if self.error is not None:
            raise self.error
        return ["orders"]

    def send_once(self, request, handle, timeout_s=None):
        if self.join_error is not None:
            raise self.join_error
        return handle(SimpleNamespace(error_code=self.answer))

    def close(self):
        pass


def check(monkeypatch, admin, client=None, **kwargs):
    if client is not None:
        monkeypatch.setattr(KafkaAccess, "_group", lambda self: client)
    reasons = []
    result = kafka_access.check_kafka_access(spec(), kwargs.pop("topics", ["orders"]), "g", 5.0,
                                             lambda config: admin, inconclusive=reasons.append, **kwargs)
    return result, reasons


def test_a_coordinator_unreachable_while_listing_the_patterns_topics_is_inconclusive(monkeypatch):
    from groupmgr.group_errors import CoordinatorUnreachable

    result, reasons = check(monkeypatch, AnsweringAdmin({}), GroupClient(CoordinatorUnreachable("slow broker")),
                            topics=[], topic_pattern="ord.*")
    assert result is False and "COORDINATOR_UNREACHABLE" in reasons[0]


def test_a_permanent_error_while_listing_the_patterns_topics_still_ends_the_check(monkeypatch):
    from groupmgr.group_errors import AuthenticationFailed

    with pytest.raises(AuthenticationFailed):
        check(monkeypatch, AnsweringAdmin({}), GroupClient(AuthenticationFailed("bad")), topics=[],
              topic_pattern="ord.*")


@pytest.mark.parametrize("code", [KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN])
def test_a_transient_fault_describing_a_topic_is_inconclusive(monkeypatch, code):
    result, reasons = check(monkeypatch, AnsweringAdmin({}, topic_errors={"orders": code}))
    assert result is False and "topic orders not described" in reasons[0]
    result, reasons = check(monkeypatch, AnsweringAdmin({}, describe_errors={"orders": code}))
    assert result is False and "topic orders not described" in reasons[0]


@pytest.mark.parametrize("code", [KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC])
def test_a_topic_deleted_between_the_two_requests_is_skipped(monkeypatch, code):
    admin = AnsweringAdmin({}, describe_errors={"orders": code})
    access = KafkaAccess(spec(), "g", 5.0, lambda config: admin)
    assert access.check_topics(["orders", "payments"]) == ["payments"]
    admin = AnsweringAdmin({}, topic_errors={"orders": code})
    access = KafkaAccess(spec(), "g", 5.0, lambda config: admin)
    assert access.check_topics(["orders", "payments"]) == ["payments"] and admin.described == ["payments"]


def test_a_session_timeout_the_coordinator_did_not_answer_is_inconclusive(monkeypatch):
    from groupmgr.group_errors import CoordinatorUnreachable, InconsistentGroupProtocol, NotCoordinator

    result, reasons = check(monkeypatch, AnsweringAdmin({}), GroupClient(join_error=CoordinatorUnreachable("x")),
                            session_timeout_ms=45000)
    assert result is False and "session timeout not checked" in reasons[0]
    result, reasons = check(monkeypatch, AnsweringAdmin({}), GroupClient(answer=NotCoordinator.error_code),
                            session_timeout_ms=45000)
    assert result is False and "NOT_COORDINATOR" in reasons[0]
    result, reasons = check(monkeypatch, AnsweringAdmin({}),
                            GroupClient(answer=InconsistentGroupProtocol.error_code), session_timeout_ms=45000)
    assert result is True and reasons == []


def test_a_refused_session_timeout_ends_the_check(monkeypatch):
    from groupmgr.group_errors import InvalidSessionTimeout

    with pytest.raises(InvalidSessionTimeout):
        check(monkeypatch, AnsweringAdmin({}), GroupClient(answer=InvalidSessionTimeout.error_code),
              session_timeout_ms=45000)
