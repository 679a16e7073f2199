"""Start-up check of a pipeline's Kafka access: reachability, the security protocol, TLS, SASL,
ACLs and the group's session timeout, named within seconds.

Without it a wrong password or an untrusted certificate shows up as clients that retry forever
(librdkafka and kafka-python both treat a failed connection as transient), a missing ACL as a
query that fails batch after batch, and a plaintext client at a TLS listener as a member that
waits to join forever. :class:`KafkaAccess` connects the way every client of the pipeline does
(the ``kafka`` section's settings, through confluent-kafka and, for the group, kafka-python) and
raises one :class:`KafkaAccessError` (or the group's own condition) naming what is wrong; each of
its steps is one line of ``scg check``. :func:`check_kafka_access` runs them all for ``scg run``.

* a pipeline without TLS (PLAINTEXT, SASL_PLAINTEXT) at a TLS listener: every connection closed
  at its first request, and a TLS handshake at the same address is answered as TLS
                                                             -> ``KAFKA_PROTOCOL_MISMATCH``
* the SASL mechanism is not offered                          -> ``KAFKA_SASL_MECHANISM_REFUSED``
* authentication refused (wrong password, unknown user)      -> ``KAFKA_AUTHENTICATION_FAILED``
* TLS failed (broker certificate not trusted by the CA, the broker requires or refuses the
  client certificate)                                        -> ``KAFKA_TLS_FAILED``
* an ACL missing: DESCRIBE or READ on a topic, READ on the group -> ``KAFKA_NOT_AUTHORIZED``
* ``topic_pattern`` matches no topic the principal can see   -> ``KAFKA_NO_VISIBLE_TOPIC``
* the coordinator refuses the session timeout                -> ``INVALID_SESSION_TIMEOUT``

What the member needs, and all it needs: READ (which implies DESCRIBE) on its topics and READ on
its group. Nothing needs DESCRIBE on the cluster. Anything transient is not an access problem:
nothing is concluded (the check is *inconclusive*, :class:`Inconclusive`) and the member starts,
its own clients retrying (brokers come back; credentials do not fix themselves). Transient are: no
broker reached (connections refused, timed out, names not resolved), connections closed before the
first answer by a listener that does not answer TLS either (a restarting broker behind a load
balancer, connection quotas), and a request that times out or loses its connection (classified by
:func:`groupmgr.kafka_faults.classify_kafka`). Only the mismatch above is named from closed
connections: a SASL_PLAINTEXT listener reached without security, or any listener reached with TLS,
is not named (inconclusive, or the member's own clients report it).
"""
from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Sequence

from pipelines.runtime.kafka_refusals import (  # noqa: F401 - the conditions, importable from here
    KafkaAccessError, KafkaAuthenticationFailed, KafkaNotAuthorized, KafkaNoVisibleTopic,
    KafkaProtocolMismatch, KafkaSaslMechanismRefused, KafkaTlsFailed, Report, closed_in_first_request,
    first_request_listener, protocol_mismatch, refusal)
from pipelines.runtime.client_creation import make_client
from pipelines.runtime.pipeline_spec import KafkaSpec

CHECK_TIMEOUT_S = 30.0
_ROUND_S = 2.0  # one metadata attempt; librdkafka reports connection errors meanwhile
# A listener that closed this many connections at their first request in each of this many rounds
# in a row, never answering, is asked whether it speaks TLS (:func:`speaks_tls`), once.
MISMATCH_CLOSES, MISMATCH_ROUNDS = 3, 2
TLS_PROBE_TIMEOUT_S = 3.0
_GROUP_NOT_READY = ("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS")
_NO_TLS = ("PLAINTEXT", "SASL_PLAINTEXT")


class Inconclusive(Exception):
    """A step of the access check met a transient fault (a timeout, a lost connection, a
    coordinator not reachable): nothing is concluded; ``reason`` is one line."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def speaks_tls(host: str, port: int, timeout_s: float = TLS_PROBE_TIMEOUT_S) -> bool:
    """True when the server at ``host:port`` answers a TLS ClientHello as TLS: the handshake
    completes, or the server sends a TLS alert. False when the connection is refused, closed or
    reset, times out, or is answered with anything else. The server's certificate is not verified
    (only the protocol is asked); one connection, closed before returning."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            with context.wrap_socket(raw, server_hostname=host):
                return True
    except ssl.SSLError as exc:
        return "ALERT" in (exc.reason or "").upper()  # a TLS alert record: TLS spoken, hello refused
    except OSError:
        return False


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
                       admin_factory: Callable[[dict], object] | None = None, *,
                       topic_pattern: str | None = None, session_timeout_ms: int | None = None,
                       rebalance_timeout_ms: int | None = None,
                       inconclusive: Callable[[str], None] | None = None) -> bool:
    """Check the connection, authentication, TLS, the ACLs on ``topics`` (those that exist) or on
    the topics ``topic_pattern`` matches now, on ``group_id``, and (when given) that the
    coordinator accepts ``session_timeout_ms``.

    Returns True when everything was checked, False when the check was inconclusive (no broker
    reached within ``timeout_s``, or a transient fault in a later step): ``inconclusive`` gets the
    reason, one line. Raises a :class:`KafkaAccessError` subclass, or
    :class:`~groupmgr.group_errors.InvalidSessionTimeout`, otherwise.
    """
    access = KafkaAccess(kafka, group_id, timeout_s, admin_factory)
    try:
        if not access.connect():
            raise Inconclusive(f"no broker at {kafka.bootstrap_string} could be reached within {timeout_s:g} s")
        access.check_topics(access.topics_to_check(topics, topic_pattern))
        access.check_group()
        if session_timeout_ms is not None:
            from groupmgr.join_probe import Answer

            answer = access.check_session_timeout(session_timeout_ms, rebalance_timeout_ms or session_timeout_ms)
            if answer.answer is Answer.UNKNOWN:
                raise Inconclusive(f"session timeout not checked: {answer.detail}")
        return True
    except Inconclusive as exc:
        if inconclusive is not None:
            inconclusive(exc.reason)
        return False
    finally:
        access.close()


class KafkaAccess:
    """One principal's connection to the pipeline's cluster, checked step by step; every step is
    bounded by the deadline ``timeout_s`` after construction. Not thread-safe."""

    def __init__(self, kafka: KafkaSpec, group_id: str, timeout_s: float = CHECK_TIMEOUT_S,
                 admin_factory: Callable[[dict], object] | None = None,
                 tls_probe: Callable[[str, int], bool] = speaks_tls):
        if admin_factory is None:
            from confluent_kafka.admin import AdminClient as admin_factory  # noqa: N813
        self.kafka, self.group_id, self.principal = kafka, group_id, principal_of(kafka)
        self.deadline = time.monotonic() + timeout_s
        self.reports: list[Report] = []
        config = {**kafka.confluent_config(), "error_cb": self._error, "logger": CollectingLogger(self.reports)}
        self.admin = make_client(admin_factory, config)  # librdkafka's refusal: KAFKA_CLIENT_REFUSED
        self.metadata = None
        self.group_existed: bool | None = None  # known after check_group: did the group exist?
        self._tls_probe = tls_probe
        self._group_client = None

    def _error(self, error) -> None:
        self.reports.append(Report(error.name(), error.str()))

    def _remaining(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def connect(self) -> bool:
        """Cluster metadata as this principal: True once a broker answered, False when none could
        be reached by the deadline. Raises the refusal the brokers' answers show (mechanism,
        authentication, TLS), or ``KAFKA_PROTOCOL_MISMATCH`` when a pipeline without TLS meets a
        listener that closed every connection at its first request for ``MISMATCH_ROUNDS`` rounds
        and answers a TLS handshake (:func:`speaks_tls`, asked once)."""
        from confluent_kafka import KafkaException

        mismatched_rounds, probed = 0, False
        while time.monotonic() < self.deadline:
            seen = len(self.reports)
            try:
                self.metadata = self.admin.list_topics(timeout=min(_ROUND_S, self._remaining()))
                return True
            except KafkaException:
                self.admin.poll(0)  # delivers the connection errors to error_cb
            this_round = self.reports[seen:]
            refused = refusal(self.kafka, this_round)
            if refused is not None:
                raise refused
            closes = closed_in_first_request(this_round)
            mismatched_rounds = mismatched_rounds + 1 if closes >= MISMATCH_CLOSES else 0
            if mismatched_rounds >= MISMATCH_ROUNDS and not probed:
                probed = True
                mismatch = self._tls_mismatch()
                if mismatch is not None:
                    raise mismatch
        return False

    def _tls_mismatch(self) -> KafkaProtocolMismatch | None:
        """The mismatch, when the pipeline has no TLS and the closing listener speaks TLS."""
        if self.kafka.security.protocol not in _NO_TLS:
            return None
        host, port = first_request_listener(self.reports) or _first_bootstrap(self.kafka.bootstrap_string)
        if not self._tls_probe(host, port):
            return None  # closed, refused or silent: a broker restarting, a proxy, a quota
        return protocol_mismatch(self.kafka, closed_in_first_request(self.reports), f"{host}:{port}")

    def topics_to_check(self, topics: Sequence[str], topic_pattern: str | None) -> list[str]:
        """``topics``, or the topics ``topic_pattern`` matches now among those the principal may
        see (the member's own rule); raises :class:`KafkaNoVisibleTopic` when it matches none."""
        if not topic_pattern:
            return [t for t in topics if t]
        from groupmgr.member_config import subscribed_topics

        from groupmgr.group_errors import GroupError

        try:
            client = self._group()
            visible = client.topic_names(client.deadline(self._remaining()))
        except GroupError as exc:
            if not exc.retriable:
                raise
            raise Inconclusive(f"topic_pattern's matches not listed: {exc.headline()}") from None
        matched = list(subscribed_topics((), topic_pattern, visible))
        if not matched:
            raise KafkaNoVisibleTopic(
                f"{self.principal} sees no topic matching topic_pattern {topic_pattern!r} "
                f"({len(visible)} topic(s) visible to it): it lacks DESCRIBE on every matching topic, "
                "or none exists yet; grant READ on the topics (a PREFIXED ACL suits a naming scheme), "
                "or create one")
        return matched

    def check_topics(self, topics: Sequence[str]) -> list[str]:
        """DESCRIBE and READ on each of ``topics`` that exists (a topic the principal may not
        describe looks, to it, like one that does not exist: it is named); returns the topics
        checked. A topic unknown to the brokers (never created, or deleted meanwhile) is skipped;
        a transient fault raises :class:`Inconclusive`."""
        from confluent_kafka import KafkaException, TopicCollection

        readable = []
        for topic in topics:
            try:
                described = self.admin.list_topics(topic, timeout=self._remaining()).topics.get(topic)
            except KafkaException as exc:
                if _unknown_topic(exc):
                    continue
                raise _inconclusive(f"topic {topic} not described", exc) from None
            error = described.error if described is not None else None
            if error is not None and error.name() == "TOPIC_AUTHORIZATION_FAILED":
                raise KafkaNotAuthorized(self.principal, "DESCRIBE", f"topic {topic}",
                                         "grant READ on the topic; READ includes DESCRIBE")
            if error is None:
                readable.append(topic)
        if not readable:
            return []
        futures = self.admin.describe_topics(TopicCollection(readable), include_authorized_operations=True,
                                             request_timeout=self._remaining())
        checked = []
        for topic, future in futures.items():
            try:
                operations = future.result().authorized_operations
            except KafkaException as exc:
                if _unknown_topic(exc):
                    continue
                if _error_name(exc) == "TOPIC_AUTHORIZATION_FAILED":
                    raise KafkaNotAuthorized(self.principal, "DESCRIBE", f"topic {topic}",
                                             "grant READ on the topic; READ includes DESCRIBE") from None
                raise _inconclusive(f"topic {topic} not described", exc) from None
            if operations is not None and "READ" not in {op.name for op in operations}:
                raise KafkaNotAuthorized(self.principal, "READ", f"topic {topic}",
                                         "the member and Spark's Kafka source read it")
            checked.append(topic)
        return checked

    def check_group(self) -> None:
        """READ (which includes DESCRIBE) on the group."""
        group_id = self.group_id
        from confluent_kafka import KafkaException

        while True:
            future = self.admin.describe_consumer_groups([group_id], include_authorized_operations=True,
                                                         request_timeout=self._remaining())[group_id]
            try:
                described = future.result()
                operations = described.authorized_operations
                self.group_existed = _name(described.state) not in ("DEAD", "UNKNOWN")
                break
            except KafkaException as exc:
                name = exc.args[0].name()
                if name == "GROUP_ID_NOT_FOUND":
                    self.group_existed = False
                if name == "GROUP_AUTHORIZATION_FAILED":
                    raise KafkaNotAuthorized(self.principal, "READ", f"group {group_id}",
                                             "members join, heartbeat and commit offsets in it") from None
                if name not in _GROUP_NOT_READY or time.monotonic() >= self.deadline:
                    return  # the member's own join reports anything else, with retries
                time.sleep(0.2)  # the group coordinator is loading; asked again, bounded by the deadline
        if operations is not None and "READ" not in {op.name for op in operations}:
            raise KafkaNotAuthorized(self.principal, "READ", f"group {group_id}",
                                     "members join, heartbeat and commit offsets in it")

    def check_session_timeout(self, session_timeout_ms: int, rebalance_timeout_ms: int):
        """The coordinator's :class:`~groupmgr.join_probe.SessionTimeoutAnswer` (asked with a
        JoinGroup that joins nothing, :mod:`groupmgr.join_probe`): ``ACCEPTED`` or ``UNKNOWN`` (no
        answer, a coordinator that cannot be reached or another answer: left to the member's join,
        which retries). Raises ``INVALID_SESSION_TIMEOUT`` when it refuses the session timeout."""
        from groupmgr.group_errors import GroupError, InvalidSessionTimeout
        from groupmgr.join_probe import Answer, SessionTimeoutAnswer, check_session_timeout

        try:
            client = self._group()
        except GroupError as exc:
            if not exc.retriable:
                raise
            return SessionTimeoutAnswer(Answer.UNKNOWN, f"the coordinator did not answer: {exc.headline()}")
        answer = check_session_timeout(client, self.group_id, session_timeout_ms, rebalance_timeout_ms,
                                       self._remaining())
        if answer.answer is Answer.REFUSED:
            raise InvalidSessionTimeout(answer.detail)
        return answer

    def _group(self):
        """The group protocol's client (kafka-python, as the member connects), started once."""
        if self._group_client is None:
            from groupmgr.coordinator_client import ACCEPTED_CLIENT_SETTINGS, CoordinatorClient, KafkaTransport

            kwargs = {k: v for k, v in self.kafka.kafka_python_kwargs(ACCEPTED_CLIENT_SETTINGS).items()
                      if k != "bootstrap_servers"}
            transport = KafkaTransport(self.kafka.bootstrap_string, "scg-access-check", kwargs)
            self._group_client = CoordinatorClient(transport, self.group_id,
                                                   request_timeout_ms=int(self._remaining() * 1000))
            transport.start(self._remaining())
        return self._group_client

    def close(self) -> None:
        if self._group_client is not None:
            self._group_client.close()


def _first_bootstrap(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    return host.strip("[]"), int(port)


def _error_name(exc) -> str:
    error = exc.args[0] if exc.args else None
    return error.name() if hasattr(error, "name") else ""


def _unknown_topic(exc) -> bool:
    return _error_name(exc) in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "UNKNOWN_TOPIC_ID")


def _inconclusive(what: str, exc: BaseException) -> Inconclusive:
    """A transient fault as :class:`Inconclusive`; anything else too (the member's own clients
    report it, with their retries), named as classify_kafka names it."""
    from groupmgr.kafka_faults import classify_kafka

    fault = classify_kafka(exc)
    return Inconclusive(f"{what}: {fault.headline() if fault is not None else exc}")


def _name(value) -> str:
    return str(getattr(value, "name", value) or "").upper()


class CollectingLogger:
    """librdkafka's log lines kept as :class:`Report` values (facility, text) for the diagnosis;
    nothing is printed."""

    def __init__(self, into: list[Report]):
        self.into = into

    def log(self, level, fmt, *args):  # noqa: D401 - logging.Logger-compatible sink
        if len(args) >= 3:
            self.into.append(Report(str(args[0]), str(args[2])))


class SilentLogger:
    """librdkafka's log lines go nowhere: the errors it reports are turned into named errors."""

    def log(self, *args, **kwargs):  # noqa: D401 - logging.Logger-compatible sink
        pass
