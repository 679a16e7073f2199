"""One pipeline member: group membership drives the Spark query over the owned partitions.

The member's thread calls the listener methods; they record what changed and return at once (a
revocation only after no batch writes the revoked partitions any more). The main thread
(:meth:`PipelineRunner.run`) then does the work: it looks at the query (:meth:`check`), starts
it when a start is due, restarts it after a failure, and polls the member between batches. Each
piece has its own module:

* :mod:`~pipelines.runtime.query_supervisor` — the query's state machine (``QueryState``): when
  a start is due, the backoff after a failure, the failure that ends the member;
* :mod:`~pipelines.runtime.reader_modes` — the query itself, per ``source.reader``: a query per
  assignment over Spark's Kafka source, or one query for the member's life that follows its claims;
* :mod:`~pipelines.runtime.owned_partitions` — the assignment, the claims and checks before a
  partition is read, stopped partitions and their re-checks;
* :mod:`~pipelines.runtime.warm_up` — the batch path's warm-up before joining;
* :mod:`~pipelines.runtime.membership` — the group member, its offset commits and the watch for a
  group the brokers run themselves.

Guarantees: a query runs only over partitions this member was assigned and has claimed in both
tables (claim before reading start offsets); it stops writing a partition before the member gives
it up; each batch is committed to Delta before its offsets are committed to Kafka; a transient
fault never ends the member (docs/DESIGN.md, invariants 3, 4 and 9). ``_lock`` serialises every
change to the query. Offsets are next-offset-to-read everywhere.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable

from groupmgr.generation import Generation
from groupmgr.kafka_faults import Backoff
from groupmgr.member import GroupMember
from groupmgr.server_assignment import group_type_of
from pipelines.runtime.batch_writer import NO_HOOKS, BatchHooks, BatchReport
from pipelines.runtime.broker_probe import BrokerProbe
from pipelines.runtime.failure_rules import RestartPolicy, classify_failure
from pipelines.runtime.hadoop_fs import HadoopFileSystem
from pipelines.runtime.install_paths import package_version
from pipelines.runtime.membership import OffsetCommitter, ServerAssignmentWatch, group_member_factory
from pipelines.runtime.member_probes import MemberProbes
from pipelines.runtime.metrics import MemberMetrics, MetricsServer, Probe, member_label
from pipelines.runtime.owned_partitions import OwnedPartitions
from pipelines.runtime.pipeline_spec import PipelineSpec
from pipelines.runtime.pipeline_tables import batches_take_arrow_path, open_tables
from pipelines.runtime.progress import ProgressPrinter
from pipelines.runtime.query_supervisor import QueryState, QuerySupervisor
from pipelines.runtime.reader_modes import QueryContext, ReaderMode, reader_mode
from pipelines.runtime.spark_session import configure_session, executor_python_checked, use_local_checkpoint_manager
from pipelines.runtime.streaming_query import failure_text
from pipelines.runtime.warm_up import WarmUpContext

log = logging.getLogger("scg.runner")
POLL_S = 0.5
STOP_CHECK_S = 0.05        # how soon the main loop sees run()'s stop event
RESTART_BACKOFF = Backoff(1.0, 30.0)  # the waits of a failure streak: doubling from 1 s (jitter 20 %)
MAX_UNKNOWN_RESTARTS = 5    # consecutive restarts after failures no rule recognises

MemberFactory = Callable[[PipelineSpec, "PipelineRunner"], GroupMember]
# (member, report each committed batch, the runner's lock) -> the member's query
ReaderFactory = Callable[[GroupMember, Callable[[BatchReport], None], threading.RLock], ReaderMode]
# (is the member alive, is it ready) -> the server of its metrics and probes, not started yet
ServerFactory = Callable[[Callable[[], Probe], Callable[[], Probe]], MetricsServer]


def classify(exc: BaseException):
    """The fault of a failure: ``exc`` with its whole cause chain (the JVM's too)."""
    return classify_failure(exc, failure_text(exc))


class PipelineRunner:
    """One member of a pipeline's group and the Spark query over exactly its partitions.

    Built by :meth:`open` from a config and a Spark session; the constructor itself does no I/O:
    it wires the member (``member_factory(config, self)``: the runner is its RebalanceListener)
    to the query (``reader_factory``)."""

    def __init__(self, config: PipelineSpec, member_factory: MemberFactory, reader_factory: ReaderFactory,
                 probe, progress: ProgressPrinter, watch: ServerAssignmentWatch | None = None,
                 clock: Callable[[], float] = time.monotonic, metrics: MemberMetrics | None = None,
                 serve: ServerFactory | None = None):
        """``metrics``: the member's Prometheus metrics (None: none kept); ``serve``: the server
        of the metrics and probes, started by :meth:`run` (None: none)."""
        self.config, self.probe, self.progress, self.watch = config, probe, progress, watch
        self.metrics, self._serve, self.server = metrics, serve, None
        self._lock = threading.RLock()
        self._wake = threading.Event()      # the main thread has a start to make now
        self._generation: Generation | None = None
        self._assignments = 0               # assignments received so far
        self._assignments_at_start = 0      # ... when the query last started reading
        self._polled_batches = 0            # committed batches as seen at the last poll
        self.supervisor = QuerySupervisor(RestartPolicy(RESTART_BACKOFF, MAX_UNKNOWN_RESTARTS, clock, classify),
                                          clock, self._retrying)
        self.member = member_factory(config, self)
        self.reader = reader_factory(self.member, self._on_batch, self._lock)
        self.owned: OwnedPartitions = self.reader.owned

    @classmethod
    def open(cls, config: PipelineSpec, spark, member_factory: MemberFactory | None = None,
             out: Callable[[str], None] = print, hooks: BatchHooks = NO_HOOKS,
             clock: Callable[[], float] = time.monotonic) -> PipelineRunner:
        """The runner of ``config`` on ``spark``: configures the session, then, while the
        executors' Python is checked (:func:`~pipelines.runtime.spark_session.executor_python_checked`:
        a failed check ends the start here, before the member exists), opens every table (their
        storage answers now, or a named error before joining the group), the brokers' probe and
        the member."""
        fs, progress = HadoopFileSystem(spark), ProgressPrinter(out)
        for note in configure_session(spark, config.storage.hadoop_settings()):
            progress.note(note)
        with executor_python_checked(spark, batches_take_arrow_path(config)):
            return cls._opened(config, spark, fs, progress, member_factory, hooks, clock)

    @classmethod
    def _opened(cls, config: PipelineSpec, spark, fs: HadoopFileSystem, progress: ProgressPrinter,
                member_factory: MemberFactory | None, hooks: BatchHooks, clock: Callable[[], float]) -> PipelineRunner:
        use_local_checkpoint_manager(spark, config.checkpoint_root, fs.qualify)
        tables = open_tables(config, spark)
        for table in (tables.table, *tables.routed, tables.dead_table):
            table.check_storage()
        probe = BrokerProbe(config.kafka.confluent_config())
        label = member_label(config.group.instance_id)
        metrics = MemberMetrics(config.name, config.group.id, label) if config.metrics.enabled else None
        query_name = f"{config.name}-{config.group.instance_id or uuid.uuid4().hex[:8]}"

        def reader_factory(member, report, lock) -> ReaderMode:
            commit = OffsetCommitter(member, progress.note, metrics.commit_refused if metrics else lambda: None)
            owned = OwnedPartitions(tables, config.source, member.committed, probe.describe, commit,
                                    progress.note, clock)
            warm = WarmUpContext(spark, config, tables, probe, member.group_offsets, progress.note, fs, clock)
            return reader_mode(QueryContext(spark, config, tables, fs, probe, owned, commit, report, progress,
                                            warm, lock, hooks, clock, query_name))

        def serve(healthy, ready) -> MetricsServer:
            return MetricsServer(metrics.registry, healthy, ready, config.metrics.host, config.metrics.port)

        watch = ServerAssignmentWatch(config.group, functools.partial(
            group_type_of, config.kafka.confluent_config(), config.group.id), progress.note)
        return cls(config, member_factory or group_member_factory, reader_factory, probe, progress, watch, clock,
                   metrics, serve if metrics is not None else None)

    # -- RebalanceListener (the member's thread) ------------------------------------------------
    def on_assigned(self, generation: Generation, partitions) -> None:
        """Take ``partitions`` (the member's whole assignment) and return without waiting: the
        main thread starts the query over them (:meth:`check`). Never raises. An unchanged
        assignment (a cooperative rebalance that moved none of this member's partitions) keeps
        the running query: no pause, no cancelled batch. A running query reads a subset of
        ``partitions`` (the member revokes before it assigns); one that does not stops reading
        the others here, before the member goes on."""
        if self.metrics is not None:
            self.metrics.assigned(getattr(generation, "generation_id", generation))
        with self._lock:
            partitions = tuple(sorted(partitions))
            self._generation = generation
            self._assignments += 1
            if self.watch is not None:
                self.watch.assignment_arrived()
            running = self.reader.query is not None or self.supervisor.pending
            if partitions and partitions == self.owned.partitions and running:
                self.progress.assigned(generation, partitions, "unchanged: the query keeps running")
                return
            self.reader.assigned(partitions)
            self.owned.assign(partitions)
            self.progress.assigned(generation, self.owned.partitions)
            self.supervisor.assigned(bool(partitions))
            self._wake.set()

    def on_revoked(self, partitions) -> None:
        """Stop writing ``partitions`` (all owned ones in an eager rebalance, only those that leave
        in a cooperative one) before returning; ``on_assigned`` follows with the new assignment."""
        with self._lock:
            if self.supervisor.closing:  # the gate is closed: nothing more is written; it stops after the leave
                self.progress.revoked(partitions, "leaving the group; the query writes no further batch")
            else:
                self.reader.revoked(partitions)
            self.owned.revoke(partitions)
            self.supervisor.dropped(self.reader.query is not None)

    def on_fenced(self, error) -> None:
        """The generation is gone: stop writing. After a poll timeout (a batch ran past the
        rebalance timeout) the member rejoins at the first poll once the query has stopped."""
        poll_timeout = getattr(error, "condition", "") == "POLL_TIMEOUT_EXPIRED"
        if poll_timeout:
            self.progress.note(f"fenced by the group: [POLL_TIMEOUT_EXPIRED] no batch finished within "
                               f"group.rebalance_timeout ({self.config.group.rebalance_timeout_ms} ms); left the "
                               "group so its partitions move; rejoining once the query has stopped")
        with self._lock:
            if not poll_timeout:
                self.progress.note(f"fenced by the group ({error}); {self.reader.on_fenced} and rejoining")
            self.reader.fenced(poll_timeout)
            self.owned.clear()
            self.supervisor.dropped(self.reader.query is not None)

    # -- the main thread ------------------------------------------------------------------------
    def run(self, stop: threading.Event | None = None, until: Callable[[], bool] | None = None) -> None:
        """Join the group and process until ``stop`` is set, ``until()`` is true, or (with an
        available-now trigger) the query read everything. Leaves the group on return."""
        stop = stop or threading.Event()
        try:  # the warm-up too: it may have opened the member's offsets connection, closed by the leave
            self._start_server()
            with self._lock:
                self.reader.begin()  # scg-kafka: its query starts now, over no partition yet
                self.supervisor.started(self.reader.query is not None)
            self.reader.warm_up(stop)
            if not stop.is_set():  # a member stopped while warming up never joins
                self.progress.note(f"joining consumer group {self.config.group.id} "
                                   f"(assignors {', '.join(self.config.group.assignors)})")
                self.member.start()
            while not stop.is_set():
                self._wait_for_wake(stop)
                self._wake.clear()
                if stop.is_set():
                    break
                self.member.raise_if_failed()
                self.poll_between_batches()
                self.reader.tick()
                state = self.check()  # before the describe below: a start waits for nothing
                self._watch_server_assignment()
                self._observe()
                if self.config.trigger.available_now and (state is QueryState.FINISHED or self.reader.backfilled()):
                    break
                if until is not None and until():
                    break
        finally:
            self._leave()
            self.probe.close()
            self.reader.close()
            if self.server is not None:
                self.server.stop()
                self.server = None

    def check(self) -> QueryState:
        """One look at the query: settle a query that stopped, make a start that is due, restart a
        failed query after its backoff, raise the failure that ends the member. The query's state
        after the look."""
        with self._lock:
            supervisor, reader = self.supervisor, self.reader
            supervisor.raise_if_failed()
            supervisor.judge_streak(reader.query is not None)
            if reader.query is not None and not reader.query.isActive:
                self._query_stopped(reader.query)  # before any start: a start never joins a stopped query
            if not supervisor.pending and self.owned.recheck_due():
                supervisor.may_run_again()  # a stopped partition can run again: start over all owned
            if supervisor.start_due() and self.owned.partitions:
                self._start()
            return supervisor.state

    def _query_stopped(self, query) -> None:
        """Lock held: the query stopped by itself. When the group has assigned this member
        partitions since the query last started, it starts over them at once (the assignment may
        have come while the query was stopping); so it does after a refused batch whose partition
        it has claimed again since. Otherwise a refused batch waits for the group's next
        assignment (FENCED), a query that read everything is FINISHED, and a failed one is
        restarted after a backoff or ends the member."""
        supervisor, reader = self.supervisor, self.reader
        error, refused, failure = query.exception(), reader.refused_batch is not None, reader.failure
        reader.stop()
        if error is not None and not refused:
            supervisor.query_failed(_cause(failure, error))
            supervisor.raise_if_failed()
            return
        assigned_since = bool(self.owned.partitions) and self._assignments != self._assignments_at_start
        if refused and assigned_since:
            self.progress.note("query stopped after a refused batch; the group has assigned this member "
                               "partitions since: starting over them")
        elif refused and self.owned.partitions and self.owned.claimed_since(failure):
            self.progress.note("the refused batch was written under an earlier claim; this member has "
                               "claimed its partitions again since: starting over them")
        elif not assigned_since:
            supervisor.query_ended(refused=refused)
            if refused:
                self.progress.note("query stopped after a refused batch; waiting for the group to rebalance")
            return
        supervisor.may_run_again()

    def poll_between_batches(self) -> None:
        """Tell the member the application is alive (Kafka's ``poll()``) when no micro-batch is
        writing (a trigger that only plans is not a batch) or one was committed since the last
        poll (a backlog runs batches back to back). A batch that runs longer than
        ``group.rebalance_timeout`` therefore makes the member leave the group, so its partitions
        move to the others; it rejoins at the first poll once the batch has ended or its query
        was stopped. Lock-free: a listener stuck stopping the query cannot delay it."""
        committed = self.supervisor.committed_batches
        if not self.reader.writing or committed != self._polled_batches:
            self._polled_batches = committed
            self.member.poll()

    def _start_server(self) -> None:
        """Serve the metrics and probes (before the warm-up: a probe says why it is not ready)."""
        if self._serve is None:
            return
        probes = MemberProbes(self.supervisor, self.member, self.owned, lambda: self._generation is not None,
                              lambda: self.reader.query is not None)
        self.server = self._serve(probes.healthy, probes.ready).start()
        self.progress.note(f"metrics and probes on port {self.server.port} (/metrics, /healthz, /readyz)")
        self.metrics.describe(version=package_version(), assignors=",".join(self.config.group.assignors),
                              reader=self.config.source.reader, protocol=getattr(self.member, "protocol", ""))

    def _observe(self) -> None:
        """Main thread: the gauges of the member's state."""
        if self.metrics is not None:
            self.metrics.partitions(self.owned.partitions,
                                    {tp: s.verdict.condition for tp, s in self.owned.stopped.items()})

    def _retrying(self, what: str, verdict) -> None:
        """Lock held: a failed start or query is retried after ``verdict``'s backoff."""
        self.progress.retrying(what, verdict)
        self.owned.publish_waiting(verdict.fault.condition, verdict.fault.detail)
        if self.metrics is not None:
            self.metrics.restarting(verdict.fault.condition)

    def _start(self) -> None:
        """Start reading the owned partitions (lock held); a failure is the supervisor's to judge."""
        try:
            self._assignments_at_start = self._assignments
            self.reader.before_restart()
            self.reader.start(self._generation)
            self.supervisor.started(self.reader.query is not None)
        except Exception as exc:  # noqa: BLE001 - classified: retried later or fatal
            self.reader.start_failed()
            self.supervisor.start_failed(exc)
        self.supervisor.raise_if_failed()

    def _wait_for_wake(self, stop: threading.Event) -> None:
        """Up to :data:`POLL_S`, ended at once by an assignment (``_wake``) and within
        :data:`STOP_CHECK_S` by ``stop``: a stop closes the batch gate before Spark starts another
        micro-batch whenever it can."""
        deadline = time.monotonic() + POLL_S
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._wake.wait(min(remaining, STOP_CHECK_S)):
                return

    def _watch_server_assignment(self) -> None:
        """Once after each assignment, no lock held: does the broker run the group now?"""
        error = self.watch.check_when_due() if self.watch is not None else None
        if error is not None:
            self.supervisor.fail(error)

    def _leave(self) -> None:
        """Leave the group as soon as the query writes nothing more, then stop the query: the
        partitions' next owners need not wait for Spark to stop it. The batch writing now ends
        first (the gate); one still writing after the grace period is cancelled before the
        member leaves."""
        with self._lock:
            self.supervisor.close()
            if not self.reader.close_gate():
                self.reader.stop()
        try:
            self.member.close()  # on_revoked, then LeaveGroup
        finally:
            with self._lock:
                self.reader.stop()

    # -- Spark's query thread -------------------------------------------------------------------
    def _on_batch(self, report: BatchReport) -> None:
        """A batch was committed: report it with the lag of its partitions (log end - next offset)."""
        self.supervisor.batch_committed()
        try:
            latest = self.probe.latest(r.tp for r in report.ranges)
        except Exception:  # noqa: BLE001 - lag is informative only; the batch is committed
            latest = {}
        lag = {r.tp: max(latest[r.tp] - r.end, 0) for r in report.ranges if r.tp in latest}
        self.progress.batch(report, lag)
        if self.metrics is not None:
            self.metrics.batch(report, lag)


def _cause(failure: BaseException | None, error: BaseException) -> BaseException:
    """What a failed query is judged by: the batch writer's own exception when it raised one in
    the driver's Python (the project's errors, deltalake's, confluent-kafka's), as an object;
    otherwise (a Spark job's failure, the source's) the query's exception with its cause chain."""
    if failure is None or type(failure).__module__.split(".")[0] in ("pyspark", "py4j"):
        return error
    return failure

