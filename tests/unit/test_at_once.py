"""runner.at_once: the claims of both tables, and the checks after them, run side by side."""
from __future__ import annotations

import threading

import pytest

from pipelines.runtime.at_once import at_once


def test_results_come_back_in_the_order_of_the_calls_and_the_calls_overlap():
    both_started = threading.Barrier(2, timeout=10)  # each call waits for the other: only side by side do both end
    assert at_once(lambda: (both_started.wait(), "first")[1], lambda: (both_started.wait(), "second")[1]) == \
        ["first", "second"]


def test_a_failure_is_raised_after_every_call_ended():
    ended = threading.Event()

    def slow():
        ended.wait(0.2)
        ended.set()
        return "done"

    with pytest.raises(ZeroDivisionError):
        at_once(lambda: 1 / 0, slow)
    assert ended.is_set()
