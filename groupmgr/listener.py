"""Rebalance-listener hooks, and the dispatcher that runs them without starving heartbeats.

Callbacks run one at a time, in submission order, on one listener thread (Java runs them on the
application thread while its heartbeat thread keeps the session alive). The member thread waits
for each callback at most ``bound_s`` (the rebalance timeout) and calls ``keep_alive`` whenever a
heartbeat is due meanwhile. A callback that overruns the bound is logged and left running (later
callbacks queue behind it, order is kept).

A callback that raises a transient Kafka fault (:func:`groupmgr.kafka_faults.classify_kafka`: a
broker restart, a leader or coordinator move, a timeout) is run again with bounded exponential
backoff, each retry logged once at WARNING with the fault's condition, until it succeeds or the
bound passes; a transient fault that outlasts the bound is logged and left to the listener (which
owns its retries past the bound; the pipeline runner does), never fatal. Any other exception
becomes a fatal ``ListenerError``.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, Protocol

from groupmgr.core import TopicPartition
from groupmgr.group_errors import GroupError, ListenerError
from groupmgr.generation import Generation
from groupmgr.kafka_faults import Backoff, Fault, call_with_retries, classify_kafka

log = logging.getLogger(__name__)
CALLBACK_BACKOFF = Backoff(initial_s=0.2, max_s=5.0)


class RebalanceListener(Protocol):
    """Hooks a member calls (on its listener thread), one at a time, in order.

    Sequences per rebalance, by the member's protocol (``GroupMember.protocol``):

    * eager: ``on_revoked(all owned)`` (if any) before rejoining, then
      ``on_assigned(generation, assignment)``.
    * cooperative: nothing before rejoining (the listener keeps its partitions and keeps working;
      commits use the last stable generation), then ``on_revoked(owned - assignment)`` only if
      non-empty, then ``on_assigned(generation, assignment)``; after a revocation the member rejoins
      at once (follow-up rebalance) and the same sequence repeats, usually with nothing revoked.
    * lost generation (either protocol): ``on_fenced(error)``, then ``on_revoked(all owned)``.
    * close: ``on_revoked(all owned)``.
    """

    def on_revoked(self, partitions: tuple[TopicPartition, ...]) -> None:
        """Stop using ``partitions`` (non-empty). Eager: every owned partition, before the rejoin;
        commits with the old generation work until this returns. Cooperative: only the partitions
        that leave this member (the others stay in use, untouched), after the join, with the new
        generation already in force for commits. After ``on_fenced`` and on close: all owned ones."""

    def on_assigned(self, generation: Generation, partitions: tuple[TopicPartition, ...]) -> None:
        """Use ``partitions`` (possibly empty) in ``generation``: always the member's FULL assignment,
        in both protocols (cooperative: partitions kept from before are included; compare with what
        is in use to see what is new; an unchanged assignment means nothing moved)."""

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
        self._closed = threading.Event()

    def call(self, hook: str, args: tuple, next_heartbeat_s: Callable[[], float | None],
             keep_alive: Callable[[], None]) -> None:
        """Run ``listener.<hook>(*args)`` and wait for it, at most ``bound_s``.

        ``next_heartbeat_s()`` says how long until a heartbeat is due (None: no heartbeats now);
        ``keep_alive()`` is called each time one is due while the callback runs.
        """
        deadline = self._clock() + self._bound_s
        last_fault: list[Fault] = []
        future = self._executor.submit(self._run, hook, args, deadline, last_fault)
        while True:
            remaining = deadline - self._clock()
            beat = next_heartbeat_s()
            try:
                future.result(timeout=max(0.0, remaining if beat is None else min(remaining, beat)))
                return
            except FutureTimeout:
                pass
            except Exception as exc:
                fault = classify_kafka(exc)
                if fault is None or not fault.transient:
                    raise ListenerError(hook, exc) from exc
                self._log_persisted(hook, fault)
                return
            if self._clock() >= deadline:
                if last_fault:  # still retrying the same transient fault: say which
                    self._log_persisted(hook, last_fault[-1])
                else:
                    log.warning("listener %s still running after %.1fs; continuing", hook, self._bound_s)
                return
            keep_alive()

    def _log_persisted(self, hook: str, fault: Fault) -> None:
        log.warning("listener %s: transient %s persisted for %.1fs; continuing without it",
                    hook, fault.headline(), self._bound_s)

    def _run(self, hook: str, args: tuple, deadline: float, last_fault: list[Fault]) -> None:
        """On the listener thread: the callback, retried on transient Kafka faults until ``deadline``;
        each fault retried is appended to ``last_fault`` (read by the waiting member thread)."""
        def retrying(fault: Fault, attempt: int, delay: float) -> None:
            last_fault.append(fault)
            log.warning("listener %s: transient %s; retry %d in %.1fs", hook, fault.headline(), attempt, delay)

        call_with_retries(lambda: getattr(self._listener, hook)(*args), classify_kafka,
                          backoff=CALLBACK_BACKOFF, deadline=deadline, clock=self._clock,
                          wait=self._closed.wait, on_retry=retrying)

    def shutdown(self) -> None:
        """Stop accepting callbacks; a running one is not interrupted (it finishes on its own, a
        pending retry is not started)."""
        self._closed.set()
        self._executor.shutdown(wait=False)
