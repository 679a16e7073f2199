"""A stand-in group member for runner tests that are not about the group: it "assigns" a fixed
set of partitions once started and records offset commits instead of sending them. The group's
committed offsets (``group_offsets``, what a member judges its group's backlog by) come from
``group_offsets`` when given (e.g. a real, never started GroupMember's), else there are none."""
from __future__ import annotations

import threading


class StaticMember:
    def __init__(self, listener, partitions, generation=1, group_offsets=None):
        self.listener, self.partitions, self.generation = listener, tuple(partitions), generation
        self._group_offsets = group_offsets
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

    def group_offsets(self, timeout_s=None):
        return {} if self._group_offsets is None else self._group_offsets(timeout_s)

    def commit_offsets(self, offsets, metadata=""):
        with self._lock:
            self.commits.append((dict(offsets), metadata))

    def close(self) -> None:
        self.listener.on_revoked(self.partitions)
