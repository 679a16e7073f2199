"""Where a newly assigned partition starts reading.

Precedence (DESIGN data flow): the Delta table's recorded version (the next offset the table
needs) > the group's committed Kafka offset > the starting policy (earliest | latest | error).
All offsets follow Kafka's next-offset-to-read convention.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from groupmgr.assignors.api import TopicPartition


class NoStartingOffsetError(RuntimeError):
    """starting_offsets is ``error`` and neither Delta nor the group has an offset."""

    condition = "NO_STARTING_OFFSET"

    def __init__(self, partitions: list[TopicPartition]):
        self.partitions = partitions
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
        super().__init__(f"no recorded offset for {names} and source.starting_offsets is 'error'; "
                         "set it to earliest or latest to start these partitions")


@dataclass(frozen=True)
class StartDecision:
    offset: int
    origin: str   # "delta" | "kafka" | "earliest" | "latest"


def choose_start_offsets(partitions: Iterable[TopicPartition],
                         delta: Mapping[TopicPartition, int | None],
                         committed: Mapping[TopicPartition, int | None],
                         policy: str,
                         earliest: Mapping[TopicPartition, int],
                         latest: Mapping[TopicPartition, int]) -> dict[TopicPartition, StartDecision]:
    """Pure: pick each partition's start offset by the precedence above.

    A recorded offset below the partition's earliest available offset (retention deleted the
    records) is kept as is: the sink then reports the gap, governed by fail_on_data_loss.
    """
    chosen: dict[TopicPartition, StartDecision] = {}
    missing: list[TopicPartition] = []
    for tp in sorted(set(partitions)):
        if delta.get(tp) is not None:
            chosen[tp] = StartDecision(int(delta[tp]), "delta")
        elif committed.get(tp) is not None and committed[tp] >= 0:
            chosen[tp] = StartDecision(int(committed[tp]), "kafka")
        elif policy == "earliest":
            chosen[tp] = StartDecision(earliest[tp], "earliest")
        elif policy == "latest":
            chosen[tp] = StartDecision(latest[tp], "latest")
        else:
            missing.append(tp)
    if missing:
        raise NoStartingOffsetError(missing)
    return chosen


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
