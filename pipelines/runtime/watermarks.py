"""Earliest and latest offsets of partitions, read from the brokers (ListOffsets).

Offsets follow Kafka's next-offset-to-read convention: ``latest`` is the log-end offset.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from groupmgr.core import TopicPartition


class Watermarks:
    """Earliest / latest offsets through one long-lived confluent-kafka AdminClient (its threads
    and connections are reused across calls). Thread safe as AdminClient is."""

    RETRIES = 10

    def __init__(self, admin_config: Mapping[str, str], timeout_s: float = 30.0):
        self.config = {**admin_config, "log_level": 3}
        self.timeout_s = timeout_s
        self.admin = self._new_admin()

    def _new_admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.config)

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list(partitions, OffsetSpec.earliest())

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list(partitions, OffsetSpec.latest())

    def _list(self, partitions, spec) -> dict[TopicPartition, int]:
        """One list_offsets round; partitions the client's cached metadata does not know yet
        (just added to a topic) make it refresh with a new client and retry, bounded."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition

        request = {CkTopicPartition(tp.topic, tp.partition): spec for tp in sorted(set(partitions))}
        for attempt in range(self.RETRIES):
            if not request:
                return {}
            try:
                futures = self.admin.list_offsets(request, request_timeout=self.timeout_s)
                return {TopicPartition(k.topic, k.partition): f.result(timeout=self.timeout_s).offset
                        for k, f in futures.items()}
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION or attempt == self.RETRIES - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))
                self.admin = self._new_admin()
        return {}


def watermarks(admin_config: Mapping[str, str], partitions: Iterable[TopicPartition],
               timeout_s: float = 30.0) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """(earliest, latest) offsets of ``partitions`` with a short-lived client."""
    client = Watermarks(admin_config, timeout_s)
    partitions = list(partitions)
    return client.earliest(partitions), client.latest(partitions)
