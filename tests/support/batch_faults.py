"""Faults injected into a micro-batch through :class:`pipelines.runtime.batch_writer.BatchHooks`."""
from __future__ import annotations


class FailSecondTableOnce:
    """``files_written`` hook: the second table a batch writes (the output table, after the dead
    letters were committed) fails once, as a driver that stopped between the two commits would."""

    def __init__(self):
        self.calls = 0

    def __call__(self, batch_id, ranges, written):
        self.calls += 1
        if self.calls == 2:
            raise OSError("injected: output commit lost")
