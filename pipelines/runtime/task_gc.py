"""Python's cyclic garbage collector around the tasks an executor's Python worker runs.

A Spark Python worker is reused for many tasks (``spark.python.worker.reuse``), and PySpark's
daemon runs a full collection after each one. Two costs follow, both for nothing:

* inside a task, the collector's passes over each block's short-lived objects (messages,
  timestamp pairs, decoded values: freed by reference counting, never in a cycle) took about a
  third of a reading task's CPU;
* after a task, the full collection walks every long-lived object of the process (the modules
  of PySpark, pyarrow, confluent-kafka, delta-rs and this project: about 100,000): 20-50 ms of
  CPU per task whatever the task read, most of a small micro-batch's executor time.

:func:`task_gc` removes both. Garbage in reference cycles is still collected: what a task
leaves is collected by the daemon after it, and the objects frozen once are those that were
left after a full collection.
"""
from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

_frozen_in: int | None = None  # the process (pid) whose long-lived objects were frozen


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while the block runs, and restore it after as it was
    (also when the block raises). Garbage in a reference cycle is collected once the collector
    runs again."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def task_gc() -> Iterator[None]:
    """Run one task's body: the collector is paused inside (:func:`cyclic_gc_paused`), and when
    the first such block of a process ends (also by raising), a full collection runs and every
    object left is frozen (``gc.freeze``): later collections skip them. Objects frozen are
    still freed when their last reference goes; only a cycle among them stays."""
    with cyclic_gc_paused():
        try:
            yield
        finally:
            freeze_long_lived_objects()


def freeze_long_lived_objects() -> None:
    """Collect and freeze what is left, once per process (a forked child freezes its own)."""
    global _frozen_in
    if _frozen_in == os.getpid():
        return
    gc.collect()
    gc.freeze()
    _frozen_in = os.getpid()
