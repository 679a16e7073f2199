"""What the brokers say about partitions now: earliest and end offsets and the topic's ID
(ListOffsets and DescribeTopics through one confluent-kafka AdminClient).

Each partition gets its own answer: a partition whose leader is missing, whose topic is unknown,
or whose request timed out is reported with that condition while the others are described
(:class:`ProbeResult`). Offsets are next-offset-to-read: ``latest`` is the log-end offset.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from groupmgr.core import TopicPartition
from groupmgr.kafka_faults import classify_kafka
from pipelines.runtime.kafka_access import SilentLogger
from pipelines.runtime.partition_checks import PartitionLog, topic_fingerprint

PROBE_TIMEOUT_S = 10.0


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

    def topic_ids(self, topics: Iterable[str]) -> dict[str, int]:
        """The current topic ID fingerprint of each topic the brokers know (others left out)."""
        with self._lock:
            ids, _ = self._topic_ids(self._client(), set(topics))
        return ids

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
                ids[topic] = topic_fingerprint(str(future.result(timeout=self.timeout_s).topic_id))
            except Exception as exc:  # noqa: BLE001 - per topic: named, the others go on
                errors[topic] = _condition(exc)
        return ids, errors

    def _offsets(self, admin, partitions, spec, errors: dict,
                 committed_only: bool = False) -> dict[TopicPartition, int]:
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
            return {}
        found = {}
        for key, future in futures.items():
            tp = TopicPartition(key.topic, key.partition)
            try:
                found[tp] = future.result(timeout=self.timeout_s).offset
            except Exception as exc:  # noqa: BLE001 - per partition: named, the others go on
                errors[tp] = _condition(exc)
        return found


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
