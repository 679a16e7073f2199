"""A stand-in group member for runner tests that are not about the group: it "assigns" a fixed
set of partitions once started and records offset commits instead of sending them."""
from __future__ import annotations

import threading


class StaticMember:
    def __init__(self, listener, partitions, generation=1):
        self.listener, self.partitions, self.generation = listener, tuple(partitions), generation
        self.commits: list[tuple[dict, str]] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        self.listener.on_assigned(self.generation, self.partitions)

    def raise_if_failed(self) -> None:
        return None

    def poll(self) -> None:
        """The application is alive: a fixed assignment has no poll timer to restart."""

    def committed(self, partitions):
        return {tp: None for tp in partitions}

    def commit_offsets(self, offsets, metadata=""):
        with self._lock:
            self.commits.append((dict(offsets), metadata))

    def close(self) -> None:
        self.listener.on_revoked(self.partitions)
