"""KafkaAccess.connect decides from what librdkafka reported in each metadata round: a listener
that closes every connection at its first request is a KAFKA_PROTOCOL_MISMATCH after
MISMATCH_ROUNDS rounds in a row; refused connections, or closes followed by an answer, are not."""
from __future__ import annotations

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


def spec():
    security = SimpleNamespace(protocol="PLAINTEXT", uses_sasl=False, sasl_mechanism=None, sasl_username=None,
                               ssl_ca_location=None, ssl_certificate_location=None)
    return SimpleNamespace(security=security, bootstrap_string="broker1:9092",
                           confluent_config=lambda: {"bootstrap.servers": "broker1:9092"})


def connect(rounds, timeout_s=5.0):
    made = []
    access = KafkaAccess(spec(), "g", timeout_s, lambda config: made.append(ScriptedAdmin(config, rounds)) or made[0])
    return access.connect(), made[0]


def test_closes_at_the_first_request_in_rounds_in_a_row_are_a_protocol_mismatch():
    with pytest.raises(KafkaProtocolMismatch) as raised:
        connect([[CLOSED] * kafka_access.MISMATCH_CLOSES] * kafka_access.MISMATCH_ROUNDS + ["answer"])
    assert "the pipeline has no security" in str(raised.value)


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
