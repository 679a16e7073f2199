"""``scg run``'s bounded way out (pipelines/cli/run_member.py, ``_StopOnSignals``): real signals
sent to this process, the watchdog's ``os._exit`` replaced by a recorder."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from pipelines.cli.run_member import _StopOnSignals
from tests.support.waiting import wait_until


class Exits:
    def __init__(self):
        self.codes: list[int] = []
        self.done = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.done.set()


@pytest.fixture
def watched():
    stop, exits, lines = threading.Event(), Exits(), []
    yield stop, exits, lines


def test_a_member_that_does_not_stop_is_ended_after_the_grace_period(watched):
    stop, exits, lines = watched
    with _StopOnSignals(stop, grace_s=0.5, out=lines.append, exit=exits):
        started = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
        assert exits.done.wait(5)
        assert time.monotonic() - started >= 0.45
    assert exits.codes == [143]
    assert lines[-1] == ("[scg] member did not stop within 0.5 s after SIGTERM; exiting now "
                         "(partitions are fenced by the next owner's claim)")


def test_a_second_signal_exits_at_once(watched):
    stop, exits, lines = watched
    with _StopOnSignals(stop, grace_s=60, out=lines.append, exit=exits):
        started = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
        os.kill(os.getpid(), signal.SIGINT)
        assert exits.done.wait(5)
        assert time.monotonic() - started < 5
    assert exits.codes == [130]
    assert "second SIGINT" in lines[-1] and lines[-1].endswith("exiting now (partitions are fenced by the next owner's claim)")


def test_the_watchdog_stays_armed_after_the_block(watched):
    """Once signalled, the bound covers the rest of the way out (Spark's and Python's shutdown)."""
    stop, exits, lines = watched
    with _StopOnSignals(stop, grace_s=0.5, out=lines.append, exit=exits):
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
    assert exits.done.wait(5) and exits.codes == [143]


def test_without_a_signal_nothing_stays_behind(watched):
    stop, exits, lines = watched
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with _StopOnSignals(stop, grace_s=0.1, out=lines.append, exit=exits):
        assert any(t.name == "scg-shutdown-watchdog" for t in threading.enumerate())
    wait_until(lambda: not any(t.name == "scg-shutdown-watchdog" for t in threading.enumerate()), 30,
               "the watchdog thread to end", poll_s=0.01)
    assert {sig: signal.getsignal(sig) for sig in before} == before
    assert signal.set_wakeup_fd(-1) == -1  # restored (pytest sets none)
    assert not stop.is_set() and exits.codes == [] and lines == []
