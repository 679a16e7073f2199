"""scg describe reaches the brokers first (pipelines.cli.describe_pipeline._reach): a refusal keeps
its condition and gains the command's hint; --bootstrap means a PLAINTEXT kafka section."""
from __future__ import annotations

import pytest

from pipelines.cli import describe_pipeline
from pipelines.runtime import kafka_access
from pipelines.runtime.kafka_access import KafkaProtocolMismatch


class Refusing:
    def __init__(self, kafka, group, timeout_s):
        self.kafka = kafka

    def connect(self):
        raise KafkaProtocolMismatch("the listener at h:1 speaks TLS; the pipeline has no security")

    def close(self):
        pass


def test_a_refusal_keeps_its_condition_and_gains_the_hint(monkeypatch):
    monkeypatch.setattr(kafka_access, "KafkaAccess", Refusing)
    with pytest.raises(KafkaProtocolMismatch) as raised:
        describe_pipeline._reach(describe_pipeline._plaintext("h:1"), "g", "give --config FILE")
    assert raised.value.headline() == ("[KAFKA_PROTOCOL_MISMATCH] the listener at h:1 speaks TLS; the pipeline "
                                       "has no security; give --config FILE")


def test_bootstrap_alone_is_a_plaintext_kafka_section():
    kafka = describe_pipeline._plaintext("b1:9092, b2:9092")
    assert kafka.bootstrap_string == "b1:9092,b2:9092" and kafka.security.protocol == "PLAINTEXT"
    assert kafka_access.principal_of(kafka) == "User:ANONYMOUS"
