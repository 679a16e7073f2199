"""Rebalance-listener hooks, and the dispatcher that runs them without starving heartbeats.

Callbacks run one at a time, in submission order, on one listener thread (Java runs them on the
application thread while its heartbeat thread keeps the session alive). The member thread waits
for each callback at most ``bound_s`` (the rebalance timeout) and calls ``keep_alive`` whenever a
heartbeat is due meanwhile. A callback that raises becomes a fatal ``ListenerError``; one that
overruns the bound is logged and left running (later callbacks queue behind it, order is kept).
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, Protocol

from groupmgr.core import TopicPartition
from groupmgr.group_errors import GroupError, ListenerError
from groupmgr.generation import Generation

log = logging.getLogger(__name__)


class RebalanceListener(Protocol):
    """Hooks a member calls (on its listener thread), one at a time, in order."""

    def on_revoked(self, partitions: tuple[TopicPartition, ...]) -> None:
        """Stop using ``partitions`` (non-empty). Commits with the old generation work until this returns."""

    def on_assigned(self, generation: Generation, partitions: tuple[TopicPartition, ...]) -> None:
        """Start using ``partitions`` (possibly empty) in ``generation``."""

    def on_fenced(self, error: GroupError) -> None:
        """The generation was lost (``error`` says why); ``on_revoked`` follows with the lost partitions."""


class ListenerDispatcher:
    """Runs listener callbacks on one worker thread with a bounded, heartbeat-keeping wait.

    ``call`` must be used from one thread (the member thread); ``shutdown`` from any thread.
    """

    def __init__(self, listener: RebalanceListener, name: str, bound_s: float,
                 clock: Callable[[], float]) -> None:
        self._listener = listener
        self._bound_s = bound_s
        self._clock = clock
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"scg-listener-{name}")

    def call(self, hook: str, args: tuple, next_heartbeat_s: Callable[[], float | None],
             keep_alive: Callable[[], None]) -> None:
        """Run ``listener.<hook>(*args)`` and wait for it, at most ``bound_s``.

        ``next_heartbeat_s()`` says how long until a heartbeat is due (None: no heartbeats now);
        ``keep_alive()`` is called each time one is due while the callback runs.
        """
        future = self._executor.submit(getattr(self._listener, hook), *args)
        deadline = self._clock() + self._bound_s
        while True:
            remaining = deadline - self._clock()
            beat = next_heartbeat_s()
            try:
                future.result(timeout=max(0.0, remaining if beat is None else min(remaining, beat)))
                return
            except FutureTimeout:
                pass
            except Exception as exc:
                raise ListenerError(hook, exc) from exc
            if self._clock() >= deadline:
                log.warning("listener %s still running after %.1fs; continuing", hook, self._bound_s)
                return
            keep_alive()

    def shutdown(self) -> None:
        """Stop accepting callbacks; a running one is not interrupted (it finishes on its own)."""
        self._executor.shutdown(wait=False)
