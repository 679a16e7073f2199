"""The tests' one polling wait: a condition checked until it holds or a deadline passes.

Every wait in the tests has a bound, and one that runs out fails the test with what it waited for.
Where the code under test offers an event or a condition variable (a listener's recorder, a fake
coordinator's ``wait_for``), wait on that instead; this is for state that can only be looked at: a
file, another process's output, a broker, a Delta table.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout_s: float, what: str | Callable[[], str],
               poll_s: float = 0.2) -> T:
    """Call ``condition()`` every ``poll_s`` seconds until it returns something true, and return that.

    After ``timeout_s`` raise ``AssertionError("timed out after … waiting for <what>")``; ``what`` is a
    string, or a callable that gives it when the wait fails (e.g. with a process's latest output).
    ``condition`` may raise to end the wait early (e.g. because the process it waits for exited)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what() if callable(what) else what}")
        time.sleep(min(poll_s, left))  # the polling interval of a bounded wait, not synchronisation
