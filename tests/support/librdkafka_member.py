"""A librdkafka consumer (confluent-kafka) in one group with our members, for interop tests."""
from __future__ import annotations

import threading

from confluent_kafka import Consumer

from groupmgr.assignors import TopicPartition as TP


class LibrdkafkaMember:
    """A consumer of ``topic`` in ``group`` with librdkafka's ``strategy`` (e.g. ``range``,
    ``cooperative-sticky``), polled on its own thread until :meth:`close`. ``assignment()`` is what
    librdkafka reported after its last poll (it applies eager and incremental assignments itself);
    ``revokes`` holds the partitions of each ``on_revoke`` call."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str, name: str = "ck") -> None:
        self.lock = threading.Lock()
        self.current: set[TP] = set()
        self.revokes: list[set[TP]] = []
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                                  "partition.assignment.strategy": strategy,
                                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                                  "enable.auto.commit": False})
        self.consumer.subscribe([topic], on_revoke=self._revoke)
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _revoke(self, consumer, partitions) -> None:
        with self.lock:
            self.revokes.append({TP(p.topic, p.partition) for p in partitions})

    def _poll(self) -> None:
        try:
            while not self.stop.is_set():
                self.consumer.poll(0.1)
                current = {TP(p.topic, p.partition) for p in self.consumer.assignment()}
                with self.lock:
                    self.current = current
        finally:
            self.consumer.close()

    def assignment(self) -> set[TP]:
        with self.lock:
            return set(self.current)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(20)
