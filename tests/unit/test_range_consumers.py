"""RangeConsumers: which consumer a range read gets, and which are closed (pure unit: fake
consumers, an injected clock)."""
from __future__ import annotations

import os

from pipelines.runtime.kafka_range_reader import RangeConsumers

A = {"bootstrap.servers": "a:9092"}
B = {"bootstrap.servers": "a:9092", "sasl.password": "other"}


class Consumer:
    def __init__(self, config):
        self.config, self.assigned, self.closed = config, "some range", False

    def unassign(self):
        self.assigned = None

    def close(self):
        self.closed = True


def _pool(**kwargs):
    now = [0.0]
    pool = RangeConsumers(Consumer, clock=lambda: now[0], **kwargs)
    return pool, now


def test_a_consumer_given_back_is_unassigned_and_taken_again_for_the_same_settings_only():
    pool, _ = _pool()
    first = pool.take(A)
    pool.give_back(A, first)
    assert first.assigned is None and not first.closed
    assert pool.take(B) is not first  # other settings (another principal): a consumer of its own
    assert pool.take(A) is first
    assert pool.take(A) is not first  # it is in use


def test_no_more_than_per_settings_wait_the_others_are_closed():
    pool, _ = _pool(per_settings=2)
    taken = [pool.take(A) for _ in range(3)]
    for consumer in taken:
        pool.give_back(A, consumer)
    assert [c.closed for c in taken] == [False, False, True]


def test_a_consumer_idle_past_the_bound_is_closed_not_reused():
    pool, now = _pool(idle_s=60)
    old = pool.take(A)
    pool.give_back(A, old)
    now[0] = 61
    fresh = pool.take(A)
    assert fresh is not old and old.closed


def test_close_all_closes_every_kept_consumer():
    pool, _ = _pool()
    kept = [pool.take(A), pool.take(B)]
    for consumer, config in zip(kept, (A, B)):
        pool.give_back(config, consumer)
    pool.close_all()
    assert all(c.closed for c in kept)
    assert pool.take(A) not in kept


def test_a_forked_child_never_uses_its_parent_s_consumers():
    pool, _ = _pool()
    parent_s = pool.take(A)
    pool.give_back(A, parent_s)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new consumer, and the parent's is left alone (not closed)
        ok = pool.take(A) is not parent_s and not parent_s.closed
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert pool.take(A) is parent_s
