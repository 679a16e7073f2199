"""task_gc: the collector is off inside a task and as it was after; after a process's first task
its long-lived objects are collected once and frozen, and garbage cycles are never frozen."""
import gc
import os
import weakref

import pytest

from pipelines.runtime import task_gc as task_gc_module
from pipelines.runtime.task_gc import cyclic_gc_paused, task_gc


@pytest.fixture(autouse=True)
def _restore_gc(monkeypatch):
    was = gc.isenabled()
    monkeypatch.setattr(task_gc_module, "_frozen_in", None)
    yield
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


class Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_inside_and_restored_after(enabled):
    (gc.enable if enabled else gc.disable)()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled
    with task_gc():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled


def test_the_collector_is_restored_when_the_block_raises():
    gc.enable()
    with pytest.raises(RuntimeError), cyclic_gc_paused():
        raise RuntimeError("a task failed")
    assert gc.isenabled()
    with pytest.raises(RuntimeError), task_gc():
        raise RuntimeError("a task failed")
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0  # a failed first task freezes too


def test_the_first_task_freezes_what_is_left_but_not_its_garbage_cycles():
    gc.unfreeze()
    kept = Node()
    with task_gc():
        garbage = weakref.ref(Node())
        assert garbage() is not None  # paused: nothing collects the cycle inside the task
    assert garbage() is None  # collected before the freeze, never frozen
    assert gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())  # frozen: later collections skip it
    assert task_gc_module._frozen_in == os.getpid()


def test_later_tasks_freeze_nothing_so_their_cycles_stay_collectable():
    with task_gc():
        pass
    frozen = gc.get_freeze_count()
    with task_gc():
        node = Node()  # alive when the task ends: frozen there, it would never be collected
        cycle = weakref.ref(node)
    assert gc.get_freeze_count() <= frozen  # frozen objects freed meanwhile lower it
    del node
    gc.collect()  # what PySpark's daemon runs after every task
    assert cycle() is None
