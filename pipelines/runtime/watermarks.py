"""Earliest and latest offsets of partitions, read from the brokers (ListOffsets).

Offsets follow Kafka's next-offset-to-read convention: ``latest`` is the log-end offset.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from groupmgr.core import TopicPartition


class Watermarks:
    """Earliest / latest offsets through a confluent-kafka AdminClient made for each call and
    destroyed before the call returns (a client kept between calls would outlive its broker in
    long-lived objects and log "Connection refused" after it stops; ListOffsets runs once per
    query start, so the extra connection is cheap). Thread safe: calls share nothing mutable."""

    RETRIES = 10

    def __init__(self, admin_config: Mapping[str, str], timeout_s: float = 30.0):
        self.config = {**admin_config, "log_level": 3}
        self.timeout_s = timeout_s

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
        """One list_offsets round; partitions the client's metadata does not know yet (just added
        to a topic) make it retry with a new client, bounded. Each attempt's client is destroyed
        before the next starts and before this returns (also when it raises)."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition

        request = {CkTopicPartition(tp.topic, tp.partition): spec for tp in sorted(set(partitions))}
        for attempt in range(self.RETRIES):
            if not request:
                return {}
            admin = self._new_admin()
            try:
                futures = admin.list_offsets(request, request_timeout=self.timeout_s)
                return {TopicPartition(k.topic, k.partition): f.result(timeout=self.timeout_s).offset
                        for k, f in futures.items()}
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION or attempt == self.RETRIES - 1:
                    raise
            finally:
                admin = None  # the last reference: rd_kafka_destroy runs now, even while an error propagates
            time.sleep(0.2 * (attempt + 1))
        return {}


def watermarks(admin_config: Mapping[str, str], partitions: Iterable[TopicPartition],
               timeout_s: float = 30.0) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """(earliest, latest) offsets of ``partitions`` (each with a client closed before it returns)."""
    client = Watermarks(admin_config, timeout_s)
    partitions = list(partitions)
    return client.earliest(partitions), client.latest(partitions)
