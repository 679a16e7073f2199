"""Start-up check of a pipeline's Kafka access: authentication, TLS and ACLs, named within seconds.

Without it a wrong password or an untrusted certificate shows up as clients that retry forever
(librdkafka and kafka-python both treat a failed connection as transient) and a missing ACL as a
query that fails batch after batch. :func:`check_kafka_access` connects the way every client of
the pipeline does (the ``kafka`` section's settings, through confluent-kafka), and raises one
:class:`KafkaAccessError` naming the principal and what it lacks:

* authentication refused (wrong password, unknown user)   -> ``KAFKA_AUTHENTICATION_FAILED``
* TLS failed (broker certificate not trusted by the CA, the broker requires or refuses the
  client certificate)                                      -> ``KAFKA_TLS_FAILED``
* an ACL missing: DESCRIBE or READ on a topic, READ on the group -> ``KAFKA_NOT_AUTHORIZED``

What the member needs, and all it needs: READ (which implies DESCRIBE) on its topics and READ on
its group. Nothing needs DESCRIBE on the cluster. A cluster that cannot be reached within the
time given is not an access problem: the check returns ``False`` and the member's own clients
keep retrying (brokers come back; credentials do not fix themselves).
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from groupmgr.core import ExitCategory, ScgError
from pipelines.runtime.pipeline_spec import KafkaSpec

CHECK_TIMEOUT_S = 30.0
_ROUND_S = 2.0  # one metadata attempt; librdkafka reports connection errors meanwhile
_TLS_ALERT = re.compile(r"ssl/tls alert|alert (bad|unknown) certificate|certificate required|"
                        r"handshake failure", re.IGNORECASE)
_GROUP_NOT_READY = ("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS")


class KafkaAccessError(ScgError):
    """The pipeline's Kafka principal cannot do what the member needs (exit 1: someone must fix
    credentials, certificates or ACLs)."""

    condition = "KAFKA_ACCESS_DENIED"
    exit_category = ExitCategory.RUNTIME


class KafkaAuthenticationFailed(KafkaAccessError):
    """The brokers refused the SASL credentials."""

    condition = "KAFKA_AUTHENTICATION_FAILED"


class KafkaTlsFailed(KafkaAccessError):
    """The TLS handshake failed: the broker's certificate is not trusted, or the broker refused
    (or wanted) a client certificate."""

    condition = "KAFKA_TLS_FAILED"


class KafkaNotAuthorized(KafkaAccessError):
    """The principal lacks an ACL the member needs; ``operation`` on ``resource`` says which."""

    condition = "KAFKA_NOT_AUTHORIZED"

    def __init__(self, principal: str, operation: str, resource: str, hint: str):
        self.principal, self.operation, self.resource = principal, operation, resource
        super().__init__(f"{principal} lacks {operation} on {resource} ({hint})")


@dataclass
class _Connection:
    """One AdminClient and the connection errors librdkafka reported through ``error_cb``."""

    admin: object
    errors: list = field(default_factory=list)


def principal_of(kafka: KafkaSpec) -> str:
    """How the brokers will name this pipeline's principal, as far as the client can tell."""
    sec = kafka.security
    if sec.uses_sasl:
        return f"User:{sec.sasl_username}"
    if sec.ssl_certificate_location:
        return f"the principal of client certificate {sec.ssl_certificate_location}"
    return "User:ANONYMOUS"


def check_kafka_access(kafka: KafkaSpec, topics: Sequence[str], group_id: str,
                       timeout_s: float = CHECK_TIMEOUT_S,
                       admin_factory: Callable[[dict], object] | None = None) -> bool:
    """Check authentication, TLS and the ACLs on ``topics`` (those that exist) and ``group_id``.

    Returns True when everything was checked, False when no broker answered within ``timeout_s``
    (transient: nothing is concluded). Raises a :class:`KafkaAccessError` subclass otherwise.
    """
    connection = _connect(kafka, admin_factory)
    deadline = time.monotonic() + timeout_s
    metadata = _first_metadata(kafka, connection, deadline)
    if metadata is None:
        return False
    principal = principal_of(kafka)
    _check_topics(connection.admin, principal, [t for t in topics if t], deadline)
    _check_group(connection.admin, principal, group_id, deadline)
    return True


def _connect(kafka: KafkaSpec, admin_factory) -> _Connection:
    if admin_factory is None:
        from confluent_kafka.admin import AdminClient as admin_factory  # noqa: N813
    errors: list = []
    config = {**kafka.confluent_config(), "error_cb": errors.append, "log_level": 0,
              "logger": SilentLogger()}
    return _Connection(admin_factory(config), errors)


def _first_metadata(kafka: KafkaSpec, connection: _Connection, deadline: float):
    """Cluster metadata, or None at the deadline; raises on an authentication or TLS failure."""
    from confluent_kafka import KafkaException

    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            return connection.admin.list_topics(timeout=min(_ROUND_S, remaining))
        except KafkaException:
            connection.admin.poll(0)  # delivers the connection errors to error_cb
            _raise_for_connection_errors(kafka, connection.errors)


def _raise_for_connection_errors(kafka: KafkaSpec, errors: list) -> None:
    sec = kafka.security
    for error in errors:
        name, text = error.name(), error.str()
        if name == "_AUTHENTICATION":
            raise KafkaAuthenticationFailed(
                f"the brokers refused {sec.sasl_mechanism} authentication as {sec.sasl_username!r} "
                f"(wrong password or unknown user): {_strip_broker(text)}")
        if name == "_SSL" or (name == "_TRANSPORT" and _TLS_ALERT.search(text)):
            raise KafkaTlsFailed(_tls_reason(kafka, text))


def _tls_reason(kafka: KafkaSpec, text: str) -> str:
    sec = kafka.security
    detail = _strip_broker(text)
    if "certificate verify failed" in text or "could not be verified" in text:
        return (f"the broker's certificate is not signed by the CA in ssl_ca_location "
                f"({sec.ssl_ca_location or 'not set: the system CAs'}): {detail}")
    if _TLS_ALERT.search(text):
        if not sec.ssl_certificate_location:
            return ("the broker refused the TLS handshake: it requires a client certificate "
                    f"(set ssl_certificate_location and ssl_key_location): {detail}")
        return (f"the broker refused client certificate {sec.ssl_certificate_location} "
                f"(not signed by a CA the broker trusts, or expired): {detail}")
    return f"TLS handshake failed: {detail}"


def _strip_broker(text: str) -> str:
    """librdkafka's text without its ``proto://host:port/id: `` prefix and ``(after N ms ...)``."""
    text = re.sub(r"^\S+://\S+?: ", "", text)
    return re.sub(r"\s*\(after \d+ms in state \w+\)\s*$", "", text).strip()


def _check_topics(admin, principal: str, topics: list[str], deadline: float) -> None:
    from confluent_kafka import TopicCollection

    readable = []
    for topic in topics:
        described = admin.list_topics(topic, timeout=max(0.1, deadline - time.monotonic())).topics.get(topic)
        error = described.error if described is not None else None
        if error is not None and error.name() == "TOPIC_AUTHORIZATION_FAILED":
            raise KafkaNotAuthorized(principal, "DESCRIBE", f"topic {topic}",
                                     "grant READ on the topic; READ includes DESCRIBE")
        if error is None:
            readable.append(topic)
    if not readable:
        return
    futures = admin.describe_topics(TopicCollection(readable), include_authorized_operations=True,
                                    request_timeout=max(0.1, deadline - time.monotonic()))
    for topic, future in futures.items():
        operations = future.result().authorized_operations
        if operations is not None and "READ" not in {op.name for op in operations}:
            raise KafkaNotAuthorized(principal, "READ", f"topic {topic}",
                                     "the member and Spark's Kafka source read it")


def _check_group(admin, principal: str, group_id: str, deadline: float) -> None:
    from confluent_kafka import KafkaException

    while True:
        remaining = max(0.1, deadline - time.monotonic())
        future = admin.describe_consumer_groups([group_id], include_authorized_operations=True,
                                                request_timeout=remaining)[group_id]
        try:
            operations = future.result().authorized_operations
            break
        except KafkaException as exc:
            name = exc.args[0].name()
            if name == "GROUP_AUTHORIZATION_FAILED":
                raise KafkaNotAuthorized(principal, "READ", f"group {group_id}",
                                         "members join, heartbeat and commit offsets in it") from None
            if name not in _GROUP_NOT_READY or time.monotonic() >= deadline:
                return  # the member's own join reports anything else, with retries
            time.sleep(0.2)  # the group coordinator is loading; asked again, bounded by the deadline
    if operations is not None and "READ" not in {op.name for op in operations}:
        raise KafkaNotAuthorized(principal, "READ", f"group {group_id}",
                                 "members join, heartbeat and commit offsets in it")


class SilentLogger:
    """librdkafka's log lines go nowhere: the errors it reports are turned into named errors."""

    def log(self, *args, **kwargs):  # noqa: D401 - logging.Logger-compatible sink
        pass
