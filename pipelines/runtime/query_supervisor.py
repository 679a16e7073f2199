"""The member query's state machine: when the query is started, restarted after a failure, and
when a failure ends the member. No Spark and no I/O: the runner reports what happened, the
supervisor answers what comes next; the clock is injected.

Transitions (drawn in docs/DESIGN.md):

=============  ===========================================================  ==========
from           event                                                        to
=============  ===========================================================  ==========
not FAILED     an assignment with partitions; a stopped one can run again   STARTING
STARTING       started (IDLE when every owned partition is stopped)         RUNNING
STARTING       a transient start failure                                    RESTARTING
RESTARTING     the backoff is over and the start succeeds                   RUNNING
RUNNING        the query failed with a transient fault                      RESTARTING
RUNNING        the table refused a batch                                    FENCED
RUNNING        ... of an older claim, the partition claimed again since     STARTING
RUNNING        ... with an assignment since the query started               STARTING
RUNNING        an available-now query read everything                       FINISHED
STARTING,      the partitions were revoked before the start                 IDLE
RESTARTING
any            a permanent fault, too many unrecognised failures            FAILED
=============  ===========================================================  ==========

A transient fault never ends the member: the start is retried after a bounded exponential
backoff with jitter (:class:`~pipelines.runtime.failure_rules.RestartPolicy`) for as long as the
fault lasts. A committed batch, or a query running :data:`STABLE_AFTER_S`, ends a failure streak.
"""
from __future__ import annotations

import enum
import threading
from collections.abc import Callable

from groupmgr.core import ScgError
from pipelines.runtime.failure_rules import RestartPolicy, Verdict
from pipelines.runtime.member_errors import fatal_error

STABLE_AFTER_S = 60.0       # a query running this long (or a committed batch) ends a failure streak


class QueryState(enum.Enum):
    """Where the member's query stands, as the main loop sees it."""

    IDLE = "idle"              # no start due and no query running (nothing owned, or all stopped)
    STARTING = "starting"      # a start over the owned partitions is due once the clock reaches retry_at
    RESTARTING = "restarting"  # the same, after the query or its start failed (a failure streak)
    RUNNING = "running"        # the query runs over the owned partitions that can run
    FENCED = "fenced"          # the table refused a batch: stopped, waiting for the group to rebalance
    FINISHED = "finished"      # an available-now query read everything it was started over
    FAILED = "failed"          # a failure a person must fix: raise_if_failed ends the member


PENDING = (QueryState.STARTING, QueryState.RESTARTING)


class QuerySupervisor:
    """Decides the query's next step from what happened to it. Listener and main thread call it
    under the runner's lock; :meth:`batch_committed` comes from Spark's query thread and only
    increments a counter."""

    def __init__(self, restarts: RestartPolicy, clock: Callable[[], float],
                 retrying: Callable[[str, Verdict], None] = lambda what, verdict: None,
                 fatal: Callable[[BaseException, Verdict, str], ScgError] = fatal_error,
                 stable_after_s: float = STABLE_AFTER_S):
        """``retrying(what, verdict)`` is told of every retry; ``fatal`` makes the error that ends
        the member from a failure the restart policy gave up on."""
        self._restarts, self._clock, self._retrying, self._fatal_of = restarts, clock, retrying, fatal
        self._stable_after_s = stable_after_s
        self.state = QueryState.IDLE
        self.retry_at = 0.0
        self._started_at = 0.0
        self._closing = False
        self._failure: ScgError | None = None
        self._committed = 0           # committed batches, counted by the query thread
        self._committed_seen = 0      # ... as seen when the failure streak was last judged
        self._count_lock = threading.Lock()

    # -- what happened --------------------------------------------------------------------------
    def assigned(self, has_partitions: bool) -> None:
        """A new assignment: a start is due now, unless it is empty or the member is closing."""
        if self.state is QueryState.FAILED:
            return
        due = has_partitions and not self._closing
        self.state, self.retry_at = (QueryState.STARTING if due else QueryState.IDLE), 0.0

    def dropped(self, query_running: bool) -> None:
        """Partitions were revoked or the member was fenced: a pending start is cancelled."""
        if self.state in PENDING or (self.state is QueryState.RUNNING and not query_running):
            self.state = QueryState.IDLE

    def may_run_again(self) -> None:
        """A stopped partition can run again: a start over the owned partitions is due now."""
        if self.state is not QueryState.FAILED and not self._closing:
            self.state, self.retry_at = QueryState.STARTING, 0.0

    def started(self, running: bool) -> None:
        """A start succeeded; ``running`` is False when every owned partition is stopped."""
        self.state = QueryState.RUNNING if running else QueryState.IDLE
        self._started_at = self._clock()

    def start_failed(self, exc: BaseException) -> Verdict:
        """A start failed: retry after the verdict's backoff, or fail."""
        return self._failed(exc, "query restart failed" if self.state is QueryState.RESTARTING
                            else "query start failed")

    def query_failed(self, exc: BaseException) -> Verdict:
        """The running query failed with ``exc``: restart it from the tables' offsets after a backoff
        (nothing is lost or repeated: the next batch starts where the last Delta commit ended), or fail."""
        return self._failed(exc, "query failed")

    def query_ended(self, refused: bool) -> None:
        """The query stopped by itself without an error: it was refused by the table (FENCED), or an
        available-now query read everything (FINISHED)."""
        self.state = QueryState.FENCED if refused else QueryState.FINISHED

    def batch_committed(self) -> None:
        """Query thread: a batch was committed (ends a failure streak; counts as a poll)."""
        with self._count_lock:
            self._committed += 1

    def fail(self, error: ScgError) -> None:
        """End the member with ``error`` at the main thread's next look."""
        self.state, self._failure = QueryState.FAILED, error

    def close(self) -> None:
        """The member is stopping: no query starts any more."""
        self._closing = True
        if self.state in PENDING:
            self.state = QueryState.IDLE

    # -- what comes next ------------------------------------------------------------------------
    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def committed_batches(self) -> int:
        return self._committed

    @property
    def pending(self) -> bool:
        """A start is due (now or after its backoff)."""
        return self.state in PENDING

    def start_due(self) -> bool:
        """A start is due now (its backoff, if any, is over)."""
        return self.pending and self._clock() >= self.retry_at

    def judge_streak(self, query_running: bool) -> None:
        """End a failure streak once a batch was committed since the last look, or the query has
        run :data:`STABLE_AFTER_S`."""
        committed = self._committed
        if committed != self._committed_seen or (
                query_running and self._clock() - self._started_at >= self._stable_after_s):
            self._committed_seen = committed
            self._restarts.succeeded()

    def raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _failed(self, exc: BaseException, what: str) -> Verdict:
        verdict = self._restarts.failed(exc)
        if verdict.give_up:
            self.fail(self._fatal_of(exc, verdict, what))
        else:
            self.state, self.retry_at = QueryState.RESTARTING, self._clock() + verdict.delay_s
            self._retrying(what, verdict)
        return verdict
