"""What librdkafka's reports about a failed connection mean, as named conditions (pure: no I/O).

A client that cannot get an answer reports why through ``error_cb`` (an error name and text) and
its log (``FAIL`` lines). :func:`refusal` reads both and says which of these it was, or None when
nothing was concluded (no broker could be reached: transient, a broker restarts):

* the brokers refused the SASL mechanism the pipeline names   -> ``KAFKA_SASL_MECHANISM_REFUSED``
* the brokers refused the SASL user or password               -> ``KAFKA_AUTHENTICATION_FAILED``
* the TLS handshake failed (certificates)                     -> ``KAFKA_TLS_FAILED``

:func:`closed_in_first_request` counts the connections a broker accepted and then closed before
answering the first request, and :func:`first_request_listener` says where. A TLS listener does
that to a client that speaks plaintext Kafka to it, but so do a restarting broker behind an L4
proxy or load balancer and a broker enforcing connection quotas: closes alone conclude nothing.
The caller asks the listener whether it speaks TLS before it names a ``KAFKA_PROTOCOL_MISMATCH``
(:func:`protocol_mismatch`, for a pipeline without TLS at a TLS listener).

Messages name the user, mechanism, files and listener, never a password or key.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from groupmgr.core import ExitCategory, ScgError
from pipelines.runtime.pipeline_spec import KafkaSpec

TLS_ALERT = re.compile(r"ssl/tls alert|alert (bad|unknown) certificate|certificate required|"
                       r"handshake failure", re.IGNORECASE)
_UNSUPPORTED_MECHANISM = re.compile(r"unsupported sasl mechanism(?:: broker's supported mechanisms: "
                                    r"(?P<offered>[\w\-, ]+))?", re.IGNORECASE)
# librdkafka's states before a connection has its first answer: ApiVersions, then SASL.
_FIRST_REQUEST_CLOSE = re.compile(r"disconnected\b.*\bin state (APIVERSION_QUERY|AUTH_\w+)", re.IGNORECASE)
# librdkafka's broker name at the start of a report: [proto://]host:port/id (IPv6 in brackets).
_BROKER = re.compile(r"^(?:\w+://)?(?P<host>\[[^\]]+\]|[^\s/:\[\]]+):(?P<port>\d+)/")


class KafkaAccessError(ScgError):
    """The pipeline's Kafka principal cannot do what the member needs (exit 1: someone must fix
    credentials, certificates, the security settings or ACLs)."""

    condition = "KAFKA_ACCESS_DENIED"
    exit_category = ExitCategory.RUNTIME


class KafkaAuthenticationFailed(KafkaAccessError):
    """The brokers refused the SASL credentials."""

    condition = "KAFKA_AUTHENTICATION_FAILED"


class KafkaSaslMechanismRefused(KafkaAccessError):
    """The brokers' listener does not offer the SASL mechanism the pipeline names (the
    credentials were never tried)."""

    condition = "KAFKA_SASL_MECHANISM_REFUSED"


class KafkaTlsFailed(KafkaAccessError):
    """The TLS handshake failed: the broker's certificate is not trusted, or the broker refused
    (or wanted) a client certificate."""

    condition = "KAFKA_TLS_FAILED"


class KafkaProtocolMismatch(KafkaAccessError):
    """A pipeline without TLS (PLAINTEXT or SASL_PLAINTEXT) at a listener that speaks TLS: the
    brokers closed each connection before answering its first request, and the listener answered
    a TLS handshake. (A SASL_PLAINTEXT listener reached without security is not named this way.)"""

    condition = "KAFKA_PROTOCOL_MISMATCH"


class KafkaNotAuthorized(KafkaAccessError):
    """The principal lacks an ACL the member needs; ``operation`` on ``resource`` says which."""

    condition = "KAFKA_NOT_AUTHORIZED"

    def __init__(self, principal: str, operation: str, resource: str, hint: str):
        self.principal, self.operation, self.resource = principal, operation, resource
        super().__init__(f"{principal} lacks {operation} on {resource} ({hint})")


class KafkaNoVisibleTopic(KafkaAccessError):
    """``topic_pattern`` matches no topic the principal can see: it may DESCRIBE none of the
    matching topics, or none exists."""

    condition = "KAFKA_NO_VISIBLE_TOPIC"


@dataclass(frozen=True)
class Report:
    """One thing librdkafka reported: an ``error_cb`` error (``name`` as librdkafka spells it,
    ``_AUTHENTICATION``) or a log line (``name`` is the facility, ``FAIL``)."""

    name: str
    text: str


def refusal(kafka: KafkaSpec, reports: Iterable[Report]) -> KafkaAccessError | None:
    """The named refusal the reports show (authentication, mechanism, TLS), or None."""
    for report in reports:
        if report.name == "_AUTHENTICATION":
            return _sasl_refusal(kafka, report.text)
        if report.name == "_SSL" or (report.name in ("_TRANSPORT", "FAIL") and TLS_ALERT.search(report.text)):
            return KafkaTlsFailed(_tls_reason(kafka, report.text))
    return None


def closed_in_first_request(reports: Iterable[Report]) -> int:
    """How many connections were closed by the broker before their first answer."""
    return sum(1 for r in reports if _FIRST_REQUEST_CLOSE.search(r.text))


def first_request_listener(reports: Iterable[Report]) -> tuple[str, int] | None:
    """The host and port of the first connection closed before its first answer, or None."""
    for report in reports:
        if _FIRST_REQUEST_CLOSE.search(report.text):
            found = _BROKER.search(re.sub(r"^\[thrd:[^\]]*\]:\s*", "", report.text))
            if found:
                return found.group("host").strip("[]"), int(found.group("port"))
    return None


def protocol_mismatch(kafka: KafkaSpec, closes: int, listener: str) -> KafkaProtocolMismatch:
    """The refusal of a pipeline without TLS at ``listener`` (host:port), which closed ``closes``
    connections at their first request and answered a TLS handshake."""
    if kafka.security.protocol == "SASL_PLAINTEXT":
        fix = "the pipeline's protocol is SASL_PLAINTEXT (no TLS): set kafka.security.protocol to SASL_SSL"
    else:
        fix = "the pipeline has no security: set kafka.security (protocol SSL or SASL_SSL)"
    return KafkaProtocolMismatch(
        f"the listener at {listener} speaks TLS; {fix} (it closed {closes} connection(s) during the "
        "first request, never answering)")


def _sasl_refusal(kafka: KafkaSpec, text: str) -> KafkaAccessError:
    sec = kafka.security
    detail = strip_broker(text)
    unsupported = _UNSUPPORTED_MECHANISM.search(text)
    if unsupported:
        offered = (unsupported.group("offered") or "").strip() or "not said"
        return KafkaSaslMechanismRefused(
            f"the brokers do not offer SASL mechanism {sec.sasl_mechanism} (they offer: {offered}); "
            f"set kafka.security.sasl_mechanism to one they offer: {detail}")
    return KafkaAuthenticationFailed(
        f"the brokers refused {sec.sasl_mechanism} authentication as {sec.sasl_username!r} "
        f"(wrong password, unknown user, or a mechanism the user has no credentials for): {detail}")


def _tls_reason(kafka: KafkaSpec, text: str) -> str:
    sec = kafka.security
    detail = strip_broker(text)
    if "certificate verify failed" in text or "could not be verified" in text:
        return (f"the broker's certificate is not signed by the CA in ssl_ca_location "
                f"({sec.ssl_ca_location or 'not set: the system CAs'}): {detail}")
    if TLS_ALERT.search(text):
        if not sec.ssl_certificate_location:
            return ("the broker refused the TLS handshake: it requires a client certificate "
                    f"(set ssl_certificate_location and ssl_key_location): {detail}")
        return (f"the broker refused client certificate {sec.ssl_certificate_location} "
                f"(not signed by a CA the broker trusts, or expired): {detail}")
    return f"TLS handshake failed: {detail}"


def strip_broker(text: str) -> str:
    """librdkafka's text without its ``[thrd:...]: `` and ``proto://host:port/id: `` prefixes and
    its ``(after N ms in state S)`` suffix."""
    text = re.sub(r"^\[thrd:[^\]]*\]:\s*", "", text)
    text = re.sub(r"^\S+://\S+?: ", "", text)
    text = re.sub(r"^\S+:\d+/\S+?: ", "", text)
    return re.sub(r"\s*\(after \d+ms in state \w+\)\s*$", "", text).strip()
