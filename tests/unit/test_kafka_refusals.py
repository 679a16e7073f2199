"""librdkafka's reports of a failed connection -> named conditions (pipelines.runtime.kafka_refusals).

The texts are librdkafka's own, as a secured Kafka 4.x broker makes it report them."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipelines.runtime.kafka_refusals import (KafkaAuthenticationFailed, KafkaProtocolMismatch,
                                              KafkaSaslMechanismRefused, KafkaTlsFailed, Report,
                                              closed_in_first_request, first_request_listener,
                                              protocol_mismatch, refusal,
                                              strip_broker)


def kafka(protocol="SASL_SSL", mechanism="SCRAM-SHA-256", certificate=None):
    security = SimpleNamespace(protocol=protocol, uses_sasl=protocol.startswith("SASL"),
                               sasl_mechanism=mechanism, sasl_username="orders-ingest",
                               ssl_ca_location="/etc/kafka/ca.pem", ssl_certificate_location=certificate)
    return SimpleNamespace(security=security, bootstrap_string="broker1:9093")


UNSUPPORTED = ("sasl_ssl://broker1:9093/bootstrap: SASL SCRAM-SHA-256 mechanism handshake failed: Broker: "
               "Unsupported SASL mechanism: broker's supported mechanisms: SCRAM-SHA-512 "
               "(after 301ms in state AUTH_HANDSHAKE)")
BAD_CREDENTIALS = ("sasl_ssl://broker1:9093/bootstrap: SASL authentication error: Authentication failed during "
                   "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256 "
                   "(after 310ms in state AUTH_REQ)")
CLOSED_AT_APIVERSION = ("[thrd:broker1:9093/bootstrap]: broker1:9093/bootstrap: Disconnected: connection closed "
                        "by peer: receive 0 after POLLIN (after 4ms in state APIVERSION_QUERY)")
REFUSED = ("[thrd:broker1:9093/bootstrap]: broker1:9093/bootstrap: Connect to ipv4#10.0.0.1:9093 failed: "
           "Connection refused (after 0ms in state CONNECT)")


def test_a_mechanism_the_listener_does_not_offer_is_named_apart_from_bad_credentials():
    refused = refusal(kafka(), [Report("_AUTHENTICATION", UNSUPPORTED)])
    assert isinstance(refused, KafkaSaslMechanismRefused)
    assert "SCRAM-SHA-256" in str(refused) and "they offer: SCRAM-SHA-512" in str(refused)


def test_refused_credentials_say_the_broker_cannot_tell_password_user_or_mechanism_apart():
    refused = refusal(kafka(), [Report("_AUTHENTICATION", BAD_CREDENTIALS)])
    assert type(refused) is KafkaAuthenticationFailed
    assert "orders-ingest" in str(refused)
    assert "a mechanism the user has no credentials for" in str(refused)


@pytest.mark.parametrize("name, text, says", [
    ("_SSL", "ssl://broker1:9093/bootstrap: SSL handshake failed: certificate verify failed", "not signed by the CA"),
    ("_TRANSPORT", "ssl://broker1:9093/bootstrap: SSL handshake failed: ssl/tls alert certificate required",
     "requires a client certificate"),
    ("FAIL", "ssl://broker1:9093/bootstrap: SSL handshake failed: tlsv13 alert certificate required",
     "requires a client certificate"),
])
def test_tls_failures_are_named_with_their_reason(name, text, says):
    refused = refusal(kafka("SSL"), [Report(name, text)])
    assert isinstance(refused, KafkaTlsFailed) and says in str(refused)


def test_connection_refused_or_closed_at_the_first_request_is_no_refusal_by_itself():
    """A broker that is down, or closing connections, is not concluded from one round."""
    assert refusal(kafka("PLAINTEXT"), [Report("FAIL", REFUSED), Report("FAIL", CLOSED_AT_APIVERSION),
                                        Report("_ALL_BROKERS_DOWN", "1/1 brokers are down")]) is None


def test_only_closes_before_the_first_answer_count_as_a_protocol_mismatch():
    reports = [Report("FAIL", CLOSED_AT_APIVERSION), Report("FAIL", REFUSED),
               Report("FAIL", "broker1:9093/1: Disconnected (after 120034ms in state UP)"),
               Report("FAIL", "broker1:9093/1: Disconnected: connection closed by peer (after 3ms in state "
                              "AUTH_HANDSHAKE)")]
    assert closed_in_first_request(reports) == 2
    assert closed_in_first_request([Report("FAIL", REFUSED)] * 5) == 0


@pytest.mark.parametrize("protocol, says", [("PLAINTEXT", "the pipeline has no security"),
                                            ("SASL_PLAINTEXT", "set kafka.security.protocol to SASL_SSL")])
def test_a_protocol_mismatch_names_the_tls_listener_and_the_pipelines_protocol(protocol, says):
    mismatch = protocol_mismatch(kafka(protocol), 7, "broker1:9093")
    assert isinstance(mismatch, KafkaProtocolMismatch) and mismatch.exit_category == 1
    assert "the listener at broker1:9093 speaks TLS" in str(mismatch) and says in str(mismatch)


def test_the_listener_that_closed_at_the_first_request_is_found_in_the_reports():
    assert first_request_listener([Report("FAIL", REFUSED), Report("FAIL", CLOSED_AT_APIVERSION)]) == ("broker1", 9093)
    ipv6 = "[thrd:x]: sasl_plaintext://[::1]:9092/1: Disconnected (after 3ms in state APIVERSION_QUERY)"
    assert first_request_listener([Report("FAIL", ipv6)]) == ("::1", 9092)
    assert first_request_listener([Report("FAIL", REFUSED)]) is None


def test_librdkafka_prefixes_and_state_suffix_are_stripped():
    assert strip_broker(CLOSED_AT_APIVERSION) == "Disconnected: connection closed by peer: receive 0 after POLLIN"
    assert strip_broker(UNSUPPORTED).startswith("SASL SCRAM-SHA-256 mechanism handshake failed")
