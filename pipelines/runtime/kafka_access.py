"""Start-up check of a pipeline's Kafka access: reachability, the security protocol, TLS, SASL,
ACLs and the group's session timeout, named within seconds.

Without it a wrong password or an untrusted certificate shows up as clients that retry forever
(librdkafka and kafka-python both treat a failed connection as transient), a missing ACL as a
query that fails batch after batch, and a plaintext client at a TLS listener as a member that
waits to join forever. :class:`KafkaAccess` connects the way every client of the pipeline does
(the ``kafka`` section's settings, through confluent-kafka and, for the group, kafka-python) and
raises one :class:`KafkaAccessError` (or the group's own condition) naming what is wrong; each of
its steps is one line of ``scg check``. :func:`check_kafka_access` runs them all for ``scg run``.

* the listener closes every connection at its first request (a TLS or SASL listener, a
  plaintext client)                                          -> ``KAFKA_PROTOCOL_MISMATCH``
* the SASL mechanism is not offered                          -> ``KAFKA_SASL_MECHANISM_REFUSED``
* authentication refused (wrong password, unknown user)      -> ``KAFKA_AUTHENTICATION_FAILED``
* TLS failed (broker certificate not trusted by the CA, the broker requires or refuses the
  client certificate)                                        -> ``KAFKA_TLS_FAILED``
* an ACL missing: DESCRIBE or READ on a topic, READ on the group -> ``KAFKA_NOT_AUTHORIZED``
* ``topic_pattern`` matches no topic the principal can see   -> ``KAFKA_NO_VISIBLE_TOPIC``
* the coordinator refuses the session timeout                -> ``INVALID_SESSION_TIMEOUT``

What the member needs, and all it needs: READ (which implies DESCRIBE) on its topics and READ on
its group. Nothing needs DESCRIBE on the cluster. A cluster where no broker could be reached
(connections refused, timed out, names not resolved) within the time given is not an access
problem: nothing is concluded and the member's own clients keep retrying (brokers come back;
credentials do not fix themselves). A broker that accepts connections but closes them before the
first answer is: a restarting broker refuses connections instead.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pipelines.runtime.kafka_refusals import (  # noqa: F401 - the conditions, importable from here
    KafkaAccessError, KafkaAuthenticationFailed, KafkaNotAuthorized, KafkaNoVisibleTopic,
    KafkaProtocolMismatch, KafkaSaslMechanismRefused, KafkaTlsFailed, Report, closed_in_first_request,
    protocol_mismatch, refusal)
from pipelines.runtime.client_creation import make_client
from pipelines.runtime.pipeline_spec import KafkaSpec

CHECK_TIMEOUT_S = 30.0
_ROUND_S = 2.0  # one metadata attempt; librdkafka reports connection errors meanwhile
# A listener that closed this many connections at their first request in each of this many
# rounds in a row, never answering, speaks another protocol (a down broker refuses connections).
MISMATCH_CLOSES, MISMATCH_ROUNDS = 3, 2
_GROUP_NOT_READY = ("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS")


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
                       rebalance_timeout_ms: int | None = None) -> bool:
    """Check the connection, authentication, TLS, the ACLs on ``topics`` (those that exist) or on
    the topics ``topic_pattern`` matches now, on ``group_id``, and (when given) that the
    coordinator accepts ``session_timeout_ms``.

    Returns True when everything was checked, False when no broker could be reached within
    ``timeout_s`` (transient: nothing is concluded). Raises a :class:`KafkaAccessError` subclass,
    or :class:`~groupmgr.group_errors.InvalidSessionTimeout`, otherwise.
    """
    access = KafkaAccess(kafka, group_id, timeout_s, admin_factory)
    try:
        if not access.connect():
            return False
        access.check_topics(access.topics_to_check(topics, topic_pattern))
        access.check_group()
        if session_timeout_ms is not None:
            access.check_session_timeout(session_timeout_ms, rebalance_timeout_ms or session_timeout_ms)
        return True
    finally:
        access.close()


class KafkaAccess:
    """One principal's connection to the pipeline's cluster, checked step by step; every step is
    bounded by the deadline ``timeout_s`` after construction. Not thread-safe."""

    def __init__(self, kafka: KafkaSpec, group_id: str, timeout_s: float = CHECK_TIMEOUT_S,
                 admin_factory: Callable[[dict], object] | None = None):
        if admin_factory is None:
            from confluent_kafka.admin import AdminClient as admin_factory  # noqa: N813
        self.kafka, self.group_id, self.principal = kafka, group_id, principal_of(kafka)
        self.deadline = time.monotonic() + timeout_s
        self.reports: list[Report] = []
        config = {**kafka.confluent_config(), "error_cb": self._error, "logger": CollectingLogger(self.reports)}
        self.admin = make_client(admin_factory, config)  # librdkafka's refusal: KAFKA_CLIENT_REFUSED
        self.metadata = None
        self._group_client = None

    def _error(self, error) -> None:
        self.reports.append(Report(error.name(), error.str()))

    def _remaining(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def connect(self) -> bool:
        """Cluster metadata as this principal: True once a broker answered, False when none could
        be reached by the deadline. Raises the refusal the brokers' answers show (protocol,
        mechanism, authentication, TLS)."""
        from confluent_kafka import KafkaException

        mismatched_rounds = 0
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
            if mismatched_rounds >= MISMATCH_ROUNDS:
                raise protocol_mismatch(self.kafka, closed_in_first_request(self.reports))
        return False

    def topics_to_check(self, topics: Sequence[str], topic_pattern: str | None) -> list[str]:
        """``topics``, or the topics ``topic_pattern`` matches now among those the principal may
        see (the member's own rule); raises :class:`KafkaNoVisibleTopic` when it matches none."""
        if not topic_pattern:
            return [t for t in topics if t]
        from groupmgr.member_config import subscribed_topics

        client = self._group()
        visible = client.topic_names(client.deadline(self._remaining()))
        matched = list(subscribed_topics((), topic_pattern, visible))
        if not matched:
            raise KafkaNoVisibleTopic(
                f"{self.principal} sees no topic matching topic_pattern {topic_pattern!r} "
                f"({len(visible)} topic(s) visible to it): it lacks DESCRIBE on every matching topic, "
                "or none exists yet; grant READ on the topics (a PREFIXED ACL suits a naming scheme), "
                "or create one")
        return matched

    def check_topics(self, topics: Sequence[str]) -> None:
        """DESCRIBE and READ on each of ``topics`` that exists (a topic the principal may not
        describe looks, to it, like one that does not exist: it is named)."""
        from confluent_kafka import TopicCollection

        readable = []
        for topic in topics:
            described = self.admin.list_topics(topic, timeout=self._remaining()).topics.get(topic)
            error = described.error if described is not None else None
            if error is not None and error.name() == "TOPIC_AUTHORIZATION_FAILED":
                raise KafkaNotAuthorized(self.principal, "DESCRIBE", f"topic {topic}",
                                         "grant READ on the topic; READ includes DESCRIBE")
            if error is None:
                readable.append(topic)
        if not readable:
            return
        futures = self.admin.describe_topics(TopicCollection(readable), include_authorized_operations=True,
                                             request_timeout=self._remaining())
        for topic, future in futures.items():
            operations = future.result().authorized_operations
            if operations is not None and "READ" not in {op.name for op in operations}:
                raise KafkaNotAuthorized(self.principal, "READ", f"topic {topic}",
                                         "the member and Spark's Kafka source read it")

    def check_group(self) -> None:
        """READ (which includes DESCRIBE) on the group."""
        group_id = self.group_id
        from confluent_kafka import KafkaException

        while True:
            future = self.admin.describe_consumer_groups([group_id], include_authorized_operations=True,
                                                         request_timeout=self._remaining())[group_id]
            try:
                operations = future.result().authorized_operations
                break
            except KafkaException as exc:
                name = exc.args[0].name()
                if name == "GROUP_AUTHORIZATION_FAILED":
                    raise KafkaNotAuthorized(self.principal, "READ", f"group {group_id}",
                                             "members join, heartbeat and commit offsets in it") from None
                if name not in _GROUP_NOT_READY or time.monotonic() >= self.deadline:
                    return  # the member's own join reports anything else, with retries
                time.sleep(0.2)  # the group coordinator is loading; asked again, bounded by the deadline
        if operations is not None and "READ" not in {op.name for op in operations}:
            raise KafkaNotAuthorized(self.principal, "READ", f"group {group_id}",
                                     "members join, heartbeat and commit offsets in it")

    def check_session_timeout(self, session_timeout_ms: int, rebalance_timeout_ms: int) -> None:
        """Raise ``INVALID_SESSION_TIMEOUT`` when the group's coordinator refuses the session
        timeout (asked without joining, :mod:`groupmgr.join_probe`). A coordinator that cannot be
        reached is left to the member's join, which retries."""
        from groupmgr.group_errors import GroupError
        from groupmgr.join_probe import check_session_timeout

        try:
            check_session_timeout(self._group(), self.group_id, session_timeout_ms,
                                  rebalance_timeout_ms, self._remaining())
        except GroupError as exc:
            if not exc.retriable:
                raise

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
