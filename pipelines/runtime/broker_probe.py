"""What the brokers say about partitions now: earliest and end offsets and the topic's ID
(ListOffsets and DescribeTopics through one confluent-kafka AdminClient), a consumer group's
members (DescribeGroups), and how far given committed offsets are behind the log ends. Committed
offsets come from the member's own OffsetFetch (``GroupMember.group_offsets``), not from
``list_consumer_group_offsets``: confluent-kafka reads a commit's metadata, which librdkafka
copies without a terminating NUL, as a C string (past the end of its buffer).

Each partition gets its own answer: a partition whose leader is missing, whose topic is unknown,
whose request timed out, or that was answered with no offset (a negative one, while a broker
restarts) is reported with that condition while the others are described (:class:`ProbeResult`).
Offsets are next-offset-to-read: ``latest`` is the log-end offset.

A topic ID is only ever one the brokers answered: a describe that failed (a broker restarting, a
timeout) or answered the all-zero ID is a condition, never an ID that could read as a recreated
topic. :meth:`BrokerProbe.current_topic_ids` asks again with backoff before it gives up.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from groupmgr.core import ScgError, TopicPartition
from groupmgr.kafka_faults import Backoff, classify_kafka
from pipelines.runtime.kafka_access import SilentLogger
from pipelines.runtime.partition_checks import PartitionLog, topic_fingerprint

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 10.0
TOPIC_IDS_PATIENCE_S = 30.0   # how long current_topic_ids asks again before it gives up
TOPIC_IDS_BACKOFF = Backoff(initial_s=0.2, max_s=2.0)
GROUP_PATIENCE_S = 10.0       # how long group_members asks again while the brokers answer a transient error
# what the brokers answer for a topic that does not exist (librdkafka's names of codes 3, -188, 100)
TOPIC_GONE = frozenset({"UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC", "UNKNOWN_TOPIC_ID"})
NO_TOPIC_ID = "TOPIC_ID_UNKNOWN"  # a describe answered the all-zero topic ID
# an offset lookup answered with no offset (librdkafka's -1001, seen while a broker restarts)
NO_OFFSET = "OFFSET_INVALID"
# conditions of the client itself, not of a topic or partition: the next call starts a new client
CLIENT_FAILURES = frozenset({"TIMED_OUT", "TIMED_OUT_QUEUE", "CONNECTION_FAILED", "TRANSPORT", "ALL_BROKERS_DOWN",
                             NO_OFFSET})


class TopicIdsUnconfirmed(ScgError):
    """The brokers did not describe a topic for :data:`TOPIC_IDS_PATIENCE_S` (each condition
    named). Transient: the batch fails and the query restarts."""

    condition = "TOPIC_IDS_UNCONFIRMED"
    retriable = True


@dataclass(frozen=True)
class ProbeResult:
    """Per partition: its log, or the condition that stopped the brokers from describing it."""

    logs: Mapping[TopicPartition, PartitionLog] = field(default_factory=dict)
    errors: Mapping[TopicPartition, str] = field(default_factory=dict)


class BrokerProbe:
    """Describes partitions through one AdminClient, made at first use and kept until
    :meth:`close` (a new TLS/SASL connection per call would cost a handshake per micro-batch);
    librdkafka's own log lines are dropped: failures come back as named conditions. Thread safe
    (calls are serialised)."""

    def __init__(self, admin_config: Mapping[str, str], timeout_s: float = PROBE_TIMEOUT_S, admin_factory=None):
        self.config = dict(admin_config)
        self.timeout_s = timeout_s
        self._admin_factory = admin_factory
        self._admin = None
        self._lock = threading.Lock()

    def describe(self, partitions: Iterable[TopicPartition]) -> ProbeResult:
        """Earliest, end offset and topic ID of each partition, or its condition."""
        from confluent_kafka.admin import OffsetSpec

        partitions = sorted(set(partitions))
        if not partitions:
            return ProbeResult()
        with self._lock:
            admin = self._client()
            ids, errors = self._topic_ids(admin, {tp.topic for tp in partitions})
            asked = [tp for tp in partitions if tp.topic in ids]
            earliest = self._offsets(admin, asked, OffsetSpec.earliest(), errors)
            latest = self._offsets(admin, asked, OffsetSpec.latest(), errors)
        logs = {tp: PartitionLog(earliest[tp], latest[tp], ids[tp.topic])
                for tp in asked if tp in earliest and tp in latest}
        return ProbeResult(logs, {tp: errors.get(tp) or errors.get(tp.topic) or "PARTITION_UNAVAILABLE"
                                  for tp in partitions if tp not in logs})

    def current_topic_ids(self, topics: Iterable[str], patience_s: float = TOPIC_IDS_PATIENCE_S,
                          sleep: Callable[[float], None] = time.sleep,
                          clock: Callable[[], float] = time.monotonic) -> dict[str, int | None]:
        """The topic ID fingerprint of each topic now; None for a topic the brokers say does not
        exist (:data:`TOPIC_GONE`). A topic whose describe failed otherwise is asked again with
        :data:`TOPIC_IDS_BACKOFF` for up to ``patience_s``, then :class:`TopicIdsUnconfirmed`."""
        wanted, found, deadline, attempt = set(topics), {}, clock() + patience_s, 0
        while True:
            with self._lock:
                ids, errors = self._topic_ids(self._client(), wanted - found.keys())
            found.update(ids)
            found.update({t: None for t, condition in errors.items() if condition in TOPIC_GONE})
            unanswered = {t: errors[t] for t in sorted(wanted - found.keys())}
            if not unanswered:
                return found
            attempt += 1
            delay = TOPIC_IDS_BACKOFF.delay(attempt)
            if clock() + delay > deadline:
                named = ", ".join(f"{t} ({condition})" for t, condition in unanswered.items())
                raise TopicIdsUnconfirmed(f"the brokers did not describe topic(s) {named} "
                                          f"for {patience_s:.0f}s")
            sleep(delay)

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log-end offsets of the partitions the brokers answered for."""
        return self.log_ends(partitions)[0]

    def log_ends(self, partitions: Iterable[TopicPartition], committed_only: bool = False
                 ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, str]]:
        """Log-end offsets of the partitions the brokers answered for (with ``committed_only``
        the last stable offsets: what a ``read_committed`` consumer can read), and the condition
        of each one they did not."""
        from confluent_kafka.admin import OffsetSpec

        partitions, errors = sorted(set(partitions)), {}
        with self._lock:
            found = self._offsets(self._client(), partitions, OffsetSpec.latest(), errors, committed_only)
        return found, {tp: errors.get(tp, "PARTITION_UNAVAILABLE") for tp in partitions if tp not in found}

    def offsets_at(self, partitions: Iterable[TopicPartition], timestamp_ms: int
                   ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, str]]:
        """ListOffsets by time: per partition the first offset whose record time is at or after
        ``timestamp_ms`` (-1 when no record is: the time is past the log end), and the condition
        of each partition the brokers did not answer for."""
        from confluent_kafka.admin import OffsetSpec

        partitions, errors = sorted(set(partitions)), {}
        with self._lock:
            found = self._offsets(self._client(), partitions, OffsetSpec.for_timestamp(timestamp_ms), errors,
                                  lowest=-1)
        return found, {tp: errors.get(tp, "PARTITION_UNAVAILABLE") for tp in partitions if tp not in found}

    def group_members(self, group_id: str, patience_s: float = GROUP_PATIENCE_S,
                      sleep: Callable[[float], object] = time.sleep,
                      clock: Callable[[], float] = time.monotonic) -> tuple[str | None, ...] | None:
        """The members consumer group ``group_id`` has now, as their ``group.instance.id`` (None
        for a dynamic member; DescribeGroups; none for a group that is empty or does not exist),
        or None when the brokers did not say: a permanent error (no Describe permission on the
        group), or a transient one (a coordinator still loading the group) that lasted
        ``patience_s``, asked again with :data:`TOPIC_IDS_BACKOFF` (a ``sleep`` that returns true,
        such as a set Event's ``wait``, ends the asking)."""
        from confluent_kafka import KafkaException

        deadline, attempt = clock() + patience_s, 0
        while True:
            with self._lock:
                admin = self._client()
                try:
                    futures = admin.describe_consumer_groups([group_id], request_timeout=self.timeout_s)
                    members = futures[group_id].result(self.timeout_s).members
                    return tuple(m.group_instance_id for m in members)
                except (KafkaException, TimeoutError) as exc:  # concurrent.futures' TimeoutError is the builtin
                    fault, condition = classify_kafka(exc), _condition(exc)
                    self._replace_client_after([condition])
            if condition == "GROUP_ID_NOT_FOUND":  # DescribeGroups v6+ (KIP-1043) for a group that does not exist
                return ()
            attempt += 1
            delay = TOPIC_IDS_BACKOFF.delay(attempt)
            if fault is None or not fault.transient or clock() + delay > deadline or sleep(delay):
                log.debug("describing group %s: %s", group_id, condition)
                return None

    def backlog(self, committed: Mapping[TopicPartition, int]) -> int:
        """How many records the ``committed`` offsets (next offsets to read, e.g. a group's) are
        behind the log ends (ListOffsets); a partition whose log end the brokers did not answer
        counts 0."""
        ends = self.log_ends(committed)[0]
        return sum(max(0, ends[tp] - offset) for tp, offset in committed.items() if tp in ends)

    def close(self) -> None:
        """Drop the client (librdkafka closes its connections now)."""
        with self._lock:
            self._admin = None

    # -- internals ------------------------------------------------------------------------------
    def _client(self):
        if self._admin is None:
            factory = self._admin_factory
            if factory is None:
                from confluent_kafka.admin import AdminClient as factory  # noqa: N813
            self._admin = factory({**self.config, "log_level": 0, "logger": SilentLogger()})
        return self._admin

    def _topic_ids(self, admin, topics: set[str]) -> tuple[dict[str, int], dict]:
        from confluent_kafka import TopicCollection

        ids, errors = {}, {}
        if not topics:
            return ids, errors
        futures = admin.describe_topics(TopicCollection(sorted(topics)), request_timeout=self.timeout_s)
        for topic, future in futures.items():
            try:
                topic_id = future.result(timeout=self.timeout_s).topic_id
            except Exception as exc:  # noqa: BLE001 - per topic: named, the others go on
                errors[topic] = _condition(exc)
                continue
            if topic_id is None or (topic_id.get_most_significant_bits() == 0
                                    and topic_id.get_least_significant_bits() == 0):
                errors[topic] = NO_TOPIC_ID
            else:
                ids[topic] = topic_fingerprint(str(topic_id))
        self._replace_client_after(errors.values())
        return ids, errors

    def _offsets(self, admin, partitions, spec, errors: dict, committed_only: bool = False,
                 lowest: int = 0) -> dict[TopicPartition, int]:
        """Per partition the offset the brokers answered, or its condition in ``errors``; an
        answer below ``lowest`` is no answer (:data:`NO_OFFSET`)."""
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as CkTopicPartition

        if not partitions:
            return {}
        request = {CkTopicPartition(tp.topic, tp.partition): spec for tp in partitions}
        isolation = IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
        try:
            futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - the whole request failed: every partition says why
            errors.update({tp: _condition(exc) for tp in partitions})
            self._replace_client_after(errors.values())
            return {}
        found = {}
        for key, future in futures.items():
            tp = TopicPartition(key.topic, key.partition)
            try:
                offset = future.result(timeout=self.timeout_s).offset
            except Exception as exc:  # noqa: BLE001 - per partition: named, the others go on
                errors[tp] = _condition(exc)
                continue
            if offset < lowest:
                errors[tp] = NO_OFFSET
            else:
                found[tp] = offset
        self._replace_client_after(errors.values())
        return found

    def _replace_client_after(self, conditions: Iterable[str]) -> None:
        """Lock held: after a request the client itself failed (:data:`CLIENT_FAILURES`: it did
        not answer in time, or librdkafka reported a local error such as ``_TRANSPORT``), the
        next call starts a new client: fresh connections and metadata. In the chaos test one
        member's client went on timing out for minutes after a broker restart while the other
        members' were answered."""
        if any(c in CLIENT_FAILURES for c in conditions):
            self._admin = None


def log_end_offsets(admin_config: Mapping[str, str],
                    partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """One-shot :meth:`BrokerProbe.latest` for tools (describe, the demo): the log-end offsets of
    the partitions the brokers answered for, through a client closed before this returns."""
    probe = BrokerProbe(admin_config)
    try:
        return probe.latest(partitions)
    finally:
        probe.close()


def _condition(exc: BaseException) -> str:
    fault = classify_kafka(exc)
    return fault.condition if fault is not None else type(exc).__name__.upper()
