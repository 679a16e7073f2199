"""The member's Structured Streaming query, in one of two reader modes (``source.reader``):

* :class:`RestartingQuery` (``spark-kafka``): Spark's Kafka source over exactly the owned
  partitions; a changed assignment stops the query at a batch boundary and starts a new one;
* :class:`FollowingQuery` (``scg-kafka``): one query for the member's life over the
  ``scg-kafka`` source, whose planner reads the member's claims from the assignment file at every
  micro-batch; a rebalance changes the file, never the query.

Both claim a partition in both tables before they read its start offset (anything a previous
owner committed before the claim is seen, anything it tries after is refused), read only
partitions their member owns, and give a partition up only once no batch writes it any more. The
runner calls them under its lock; Spark's query thread calls the batch writer they build.
"""
from __future__ import annotations

import abc
import itertools
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from groupmgr.core import TopicPartition
from pipelines.runtime import streaming_query as queries
from pipelines.runtime.assigned_offsets import Assignment, Claim
from pipelines.runtime.arrow_batches import arrow_batches
from pipelines.runtime.pipeline_tables import batches_take_arrow_path
from pipelines.runtime.assigned_source import (AssignedKafkaSource, AssignmentFile, assigned_source_options,
                                              reader_client_config)
from pipelines.runtime.batch_writer import (NO_HOOKS, BatchGate, BatchHooks, BatchReport, BatchWriter, TableTargets,
                                            unclaimed_targets)
from pipelines.runtime.checkpoint_log import AssignedOffsetLog, CheckpointOffsetLog
from pipelines.runtime.owned_partitions import OwnedPartitions, PartitionChecks
from pipelines.runtime.partition_checks import LOG_TRUNCATED, TOPIC_RECREATED, SourceChanged
from pipelines.runtime.start_offsets import StartDecision
from pipelines.runtime.warm_up import InQueryWarmUp, SourceWarmUp, WarmUpContext

log = logging.getLogger("scg.runner")
POLL_S = 0.5
GRACEFUL_STOP_S = 30.0     # the longest a stop waits for a running micro-batch to finish
TASK_SLOTS_CHECK_S = 10.0  # how often an scg-kafka member asks Spark how many cores it has
BACKFILL_TRIGGER_MS = 200  # an available-now scg-kafka query's trigger: batches run back to back
                           # while there is a backlog; an idle planner looks again this often


@dataclass(frozen=True)
class QueryContext:
    """What a reader mode works with. ``tables``: ``PipelineTables``; ``probe``: ``BrokerProbe``;
    ``commit(offsets, metadata)``: the group commit after Delta; ``report``: each committed
    batch; ``progress``: ``ProgressPrinter``; ``lock``: the runner's lock, which serialises every
    change to the query (held by the caller of every method here but :meth:`ReaderMode.tick`)."""

    spark: object
    config: object
    tables: object
    fs: object
    probe: object
    owned: OwnedPartitions
    commit: Callable[[Mapping[TopicPartition, int], str], bool]
    report: Callable[[BatchReport], None]
    progress: object
    warm_up: WarmUpContext
    lock: threading.RLock
    hooks: BatchHooks = NO_HOOKS
    clock: Callable[[], float] = time.monotonic
    query_name: str = "scg"  # Spark's name of the member's query, the same for the member's life


class ReaderMode(abc.ABC):
    """The member's query in one reader mode. The state of the running query (its handle, batch
    writer, checkpoint, the topic IDs it reads) lives here and nowhere else."""

    on_fenced = "stopping the query"  # what a fencing does to it, for the progress line

    def __init__(self, ctx: QueryContext):
        self.ctx = ctx
        self.query = None
        self.writer: BatchWriter | None = None
        self.partitions: tuple[TopicPartition, ...] = ()  # what the running query reads
        self.refused_batch: int | None = None             # set when the table refused a batch
        self._checkpoint: str | None = None
        self._topic_ids: dict[str, int] = {}               # topic ID fingerprints the query reads

    # -- the member's events (lock held) ---------------------------------------------------------
    def begin(self) -> None:
        """Before the member joins."""

    @abc.abstractmethod
    def warm_up(self, stop: threading.Event) -> None:
        """Warm the batch path up before joining (best effort)."""

    @abc.abstractmethod
    def assigned(self, partitions: tuple[TopicPartition, ...]) -> None:
        """The member's whole new assignment: stop reading what it no longer holds, before returning."""

    @abc.abstractmethod
    def revoked(self, partitions) -> None:
        """Stop writing ``partitions`` before returning (a batch boundary)."""

    @abc.abstractmethod
    def fenced(self, poll_timeout: bool) -> None:
        """The generation is gone: stop writing every partition."""

    @abc.abstractmethod
    def start(self, generation) -> None:
        """Read the owned partitions that can run (claimed and checked first)."""

    def before_restart(self) -> None:
        """A start over the owned partitions is about to be made."""

    @abc.abstractmethod
    def start_failed(self) -> None:
        """A start raised: drop what it left behind."""

    def tick(self) -> None:
        """Main thread, between batches, lock not held."""

    def backfilled(self) -> bool:
        """An available-now run of this mode has read what it was to read (the runner then
        ends the member); the restarting query says so by finishing instead."""
        return False

    def close(self) -> None:
        """The member has left: remove what the mode keeps locally."""

    # -- the running query ----------------------------------------------------------------------
    @property
    def owned(self) -> OwnedPartitions:
        """The member's partitions this query reads from (claims, checks, stopped ones)."""
        return self.ctx.owned

    @property
    def gate(self) -> BatchGate | None:
        """The running query's batch boundary (its batch writer's gate)."""
        return self.writer.gate if self.writer is not None else None

    @property
    def writing(self) -> bool:
        """A micro-batch is in ``foreachBatch`` now (nearly all of a batch's time)."""
        gate = self.gate
        return gate is not None and gate.writing

    @property
    def failure(self) -> BaseException | None:
        """What the running query's batch writer raised last, as an object (Spark passes it on
        only as text)."""
        return self.writer.failure if self.writer is not None else None

    def close_gate(self) -> bool:
        """Let the micro-batch writing now end (at most :data:`GRACEFUL_STOP_S`) and no further
        one write. True when no batch of the query writes any more (or there is no query)."""
        if self.query is None or self.gate is None or self.gate.close(GRACEFUL_STOP_S):
            return True
        log.warning("a micro-batch still ran after %.0fs; stopping the query cancels it", GRACEFUL_STOP_S)
        return False

    def stop(self, graceful: bool = False) -> None:
        """Stop the query (``graceful``: first :meth:`close_gate`) and drop its checkpoint."""
        if graceful:
            self.close_gate()
        if self.query is not None:
            try:
                self.query.stop()
            except Exception as exc:  # noqa: BLE001 - stopping a failed query may raise again
                log.debug("stopping query: %s", exc)
            self.query = None
        self.partitions, self.writer = (), None
        self._forget()
        if self._checkpoint is not None:
            queries.remove_checkpoint(self.ctx.fs, self._checkpoint)
            self._checkpoint = None

    def _forget(self) -> None:
        """What a stopped query leaves behind in the mode."""

    def check_sources(self, ranges) -> None:
        """Query thread, before a batch is committed: its source is still the one the query
        started on (no partition's log went back below the query's offsets, no topic was
        recreated); else SourceChanged fails the batch and the restart's checks decide."""
        backwards = [r for r in ranges if r.end < r.start]
        if backwards:
            r = backwards[0]
            raise SourceChanged(LOG_TRUNCATED, f"{r.topic}-{r.partition} went back from {r.start} to {r.end}")
        topics = {r.topic for r in ranges if r.end > r.start}
        current = self.ctx.probe.current_topic_ids(topics) if topics else {}  # TopicIdsUnconfirmed: transient
        changed = sorted(t for t in topics if current[t] != self._topic_ids.get(t))
        if changed:
            raise SourceChanged(TOPIC_RECREATED, f"topic(s) {', '.join(changed)} no longer have the ID the "
                                                 "query started with (deleted, or deleted and created again)")

    def _new_writer(self, targets: TableTargets, offset_log, prepare=None, report=None) -> BatchWriter:
        ctx = self.ctx
        self.refused_batch = None
        self.writer = BatchWriter(ctx.tables.record_format, ctx.config.transform, targets, offset_log,
                                  ctx.commit, report or ctx.report, self._on_refused, ctx.hooks,
                                  check_sources=self.check_sources, prepare=prepare,
                                  follow=ctx.tables.schema_follower.for_batch if ctx.tables.schema_follower else None,
                                  routing=ctx.tables.routing, changes=ctx.tables.changes)
        return self.writer

    def _on_refused(self, batch_id: int, error: Exception) -> None:
        """Query thread: the table refused a batch (another member owns a partition)."""
        self.refused_batch = batch_id
        self.ctx.progress.refused(batch_id, error)

    def _checks(self, partitions, targets: TableTargets, others=()) -> PartitionChecks:
        """Check ``partitions``, make the tables agree with the verdicts, note the stopped ones
        (with ``others`` still stopped)."""
        owned = self.ctx.owned
        checks = owned.check(partitions)
        owned.apply(targets, checks)
        owned.note_stopped(checks, others)
        return checks

    def _new_checkpoint(self, generation) -> str:
        self._checkpoint = queries.new_checkpoint(self.ctx.config.checkpoint_root, _label(generation))
        return self._checkpoint


class RestartingQuery(ReaderMode):
    """``spark-kafka``: one query per assignment over Spark's Kafka source."""

    def warm_up(self, stop: threading.Event) -> None:
        SourceWarmUp(self.ctx.warm_up).run()

    def assigned(self, partitions) -> None:
        if not set(self.partitions) <= set(partitions):
            self.stop(graceful=True)

    def revoked(self, partitions) -> None:
        self.ctx.progress.revoked(partitions)
        self.stop(graceful=True)

    def fenced(self, poll_timeout: bool) -> None:
        self.stop()

    def before_restart(self) -> None:
        self.stop(graceful=True)  # a query over fewer partitions ends at a batch boundary

    def start_failed(self) -> None:
        self.stop()

    def start(self, generation) -> None:
        ctx, owned = self.ctx, self.ctx.owned.partitions
        targets = ctx.owned.claim(owned)
        checks = self._checks(owned, targets)
        if not checks.runs:
            return  # every owned partition is stopped; a re-check starts the query later
        offsets = {v.tp: v.offset for v in checks.runs}
        ctx.progress.starting({v.tp: StartDecision(v.offset, checks.origin(v)) for v in checks.runs})
        self._topic_ids = {tp.topic: checks.logs[tp].topic_id for tp in offsets}
        checkpoint = self._new_checkpoint(generation)
        writer = self._new_writer(targets, CheckpointOffsetLog(checkpoint, offsets, ctx.fs.read_text))
        self.query = queries.start_query(ctx.spark, ctx.tables.source_options, offsets, writer, checkpoint,
                                         ctx.tables.trigger, ctx.query_name)
        self.partitions = tuple(sorted(offsets))


class FollowingQuery(ReaderMode):
    """``scg-kafka``: one query that follows the member's claims, published in an assignment file
    its planner reads at every micro-batch. ``assignment_dir``: where that file lives (None: a new
    temporary directory, removed by :meth:`close`)."""

    on_fenced = "dropping its partitions"

    def __init__(self, ctx: QueryContext, assignment_dir: str | None = None):
        super().__init__(ctx)
        self._own_dir = assignment_dir is None
        self.assignment_file = AssignmentFile(f"{assignment_dir or tempfile.mkdtemp(prefix='scg-assignment-')}"
                                              "/assignment.json")
        self.claims: dict[TopicPartition, Claim] = {}  # what the query reads, per claim
        self._serials = itertools.count(1)
        self._targets: TableTargets | None = None      # the tables and the owner epochs claimed
        self.task_slots = 1                            # the application's cores, as last published
        self._slots_checked_at = 0.0
        self.backfill = Backfill() if ctx.config.trigger.available_now else None

    @classmethod
    def registered(cls, ctx: QueryContext) -> FollowingQuery:
        """A following query on a session that knows the ``scg-kafka`` source."""
        ctx.spark.dataSource.register(AssignedKafkaSource)
        return cls(ctx)

    def begin(self) -> None:
        self._start_query(None)  # over no partition yet: assignments then cost no start

    def warm_up(self, stop: threading.Event) -> None:
        InQueryWarmUp(self.ctx.warm_up, self, self.ctx.lock).run(stop)

    def assigned(self, partitions) -> None:
        self.release([tp for tp in self.claims if tp not in partitions])
        if self.backfill is not None:
            self.backfill.assigned = True

    def backfilled(self) -> bool:
        """With ``trigger.available_now``: the member has had an assignment, and every partition
        it owns is stopped or was read to the log end it had when this member claimed it."""
        backfill, owned = self.backfill, self.ctx.owned
        if backfill is None or not backfill.assigned:
            return False
        waiting = [tp for tp in owned.partitions if tp not in owned.stopped]
        return all(tp in self.claims and backfill.reached(tp) for tp in waiting)

    def revoked(self, partitions) -> None:
        self.ctx.progress.revoked(partitions, "the query reads them no more after its current batch")
        self.release(partitions)

    def fenced(self, poll_timeout: bool) -> None:
        if poll_timeout:
            self.stop()
        else:
            self.release(list(self.claims))

    def start_failed(self) -> None:
        if self.query is None or not self.query.isActive:
            self.stop()  # (a following query goes on; only the new partitions wait)

    def start(self, generation) -> None:
        """Let the query read the owned partitions it does not read yet (all of them after a
        failure stopped it): claim them in both tables, check them, publish each one that runs
        with a new claim and its start offset in the assignment file; the next micro-batch
        reads them, with no restart. The epochs of a claim reach the batch writer before the
        file names the partition."""
        ctx = self.ctx
        if self.query is None:
            self.claims = {}
            self._start_query(generation)
        new = tuple(tp for tp in ctx.owned.partitions if tp not in self.claims)
        if not new:
            return
        targets = self._targets
        merged = targets.with_claims(ctx.owned.claim(new))
        checks = self._checks(new, merged, ctx.owned.stopped_except(new))
        if not checks.runs:
            return
        ctx.progress.starting({v.tp: StartDecision(v.offset, checks.origin(v)) for v in checks.runs},
                              "reading from the next batch, the query keeps running")
        self._topic_ids.update({v.tp.topic: checks.logs[v.tp].topic_id for v in checks.runs})
        targets.epochs, targets.dead_epochs, targets.routed = merged.epochs, merged.dead_epochs, merged.routed
        self.claims.update({v.tp: Claim(next(self._serials), v.offset) for v in checks.runs})
        if self.backfill is not None:
            self.backfill.claimed({v.tp: (v.offset, checks.logs[v.tp].latest) for v in checks.runs})
        self.publish()

    def claim_alone(self, tp: TopicPartition, offset: int) -> None:
        """Let the query read ``tp`` from ``offset`` under a new claim, with no table claim (the
        warm-up's rehearsed batches write nothing)."""
        self.claims[tp] = Claim(next(self._serials), offset)
        self.publish()

    def release(self, partitions) -> None:
        """Take ``partitions`` out of the query and return once every batch that writes them has
        ended (committed, refused or failed), so the next owner starts from what the tables hold.
        A batch that begins after this writes none of them (:meth:`publish`), so a revocation
        between batches is released when the next batch begins, one in the middle of a batch
        when that batch ends. A query that does not get there within :data:`GRACEFUL_STOP_S` is
        stopped (a batch still writing is cancelled; the next owner's claim refuses anything it
        commits later)."""
        gone = [tp for tp in partitions if tp in self.claims]
        if not gone:
            return
        for tp in gone:
            del self.claims[tp]
        query, gate = self.query, self.gate
        self.publish()
        if query is None or gate is None:
            return
        mark, deadline = gate.mark(), self.ctx.clock() + GRACEFUL_STOP_S
        while not gate.released(gone, mark, POLL_S):
            if not query.isActive:
                return  # a failed query reads nothing more; it is restarted from the tables
            if self.ctx.clock() >= deadline:
                log.warning("no micro-batch boundary within %.0fs; stopping the query", GRACEFUL_STOP_S)
                self.stop()
                return

    def publish(self) -> None:
        """Tell the query's batch writer, then the source's planner (the assignment file), which
        partitions the query reads now. The writer first: a batch that begins after this writes
        none of the partitions given up (a batch planned before may still name them), and no
        batch can be planned over a new claim before the writer allows it."""
        if self.gate is not None:
            self.gate.allow(self.claims)
        self.assignment_file.write(Assignment(dict(self.claims), self.task_slots))
        self.partitions = tuple(sorted(self.claims))

    def tick(self) -> None:
        """Every :data:`TASK_SLOTS_CHECK_S`: when the application's cores changed (executors that
        registered after the query started, or came and went with dynamic allocation), publish
        the new count with the claims, so the planner groups the next batches into that many
        tasks (:func:`~pipelines.runtime.assigned_offsets.task_groups`). Never waits for the lock:
        a listener releasing partitions holds it, and the check is simply made again later."""
        now = self.ctx.clock()
        if self.query is None or now < self._slots_checked_at + TASK_SLOTS_CHECK_S:
            return
        self._slots_checked_at = now
        cores = self.application_cores()
        if cores is None or cores == self.task_slots or not self.ctx.lock.acquire(blocking=False):
            return
        try:
            if self.query is None:
                return
            before, self.task_slots = self.task_slots, cores
            self.publish()
        finally:
            self.ctx.lock.release()
        self.ctx.progress.note(f"the application has {cores} cores now ({before} before): "
                               f"a batch runs in up to {cores} tasks")

    def application_cores(self) -> int | None:
        """The cores the application runs tasks on now (``SparkContext.defaultParallelism``:
        executors registered so far, or ``spark.default.parallelism`` when set); None when Spark
        could not say."""
        try:
            return max(1, int(self.ctx.spark.sparkContext.defaultParallelism))
        except Exception as exc:  # noqa: BLE001 - advisory: the last known count stays
            log.debug("reading defaultParallelism failed: %s", exc)
            return None

    def close(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.assignment_file.path.parent, ignore_errors=True)

    def _forget(self) -> None:
        self.claims, self._targets = {}, None

    def _start_query(self, generation) -> None:
        """Start the query over the current claims (none yet, before the member joins)."""
        ctx = self.ctx
        self.task_slots = self.application_cores() or self.task_slots
        self._targets = unclaimed_targets(ctx.tables)
        checkpoint = self._new_checkpoint(generation)
        interval_ms = BACKFILL_TRIGGER_MS if self.backfill is not None else ctx.config.trigger.processing_time_ms
        options = assigned_source_options(ctx.config.kafka.confluent_config(), self.assignment_file.path,
                                          ctx.config.source, self.task_slots, interval_ms)
        prepare = arrow_batches(ctx.spark, ctx.tables.record_format, ctx.config.transform,
                                reader_client_config(options), lambda: self.task_slots) \
            if batches_take_arrow_path(ctx.config) else None
        report = ctx.report if self.backfill is None else self.backfill.reporting(ctx.report)
        writer = self._new_writer(self._targets, AssignedOffsetLog(checkpoint, ctx.fs.read_text), prepare, report)
        self.publish()
        trigger = {"processingTime": f"{interval_ms} milliseconds"}
        self.query = queries.start_assigned_query(ctx.spark, options, writer, checkpoint, trigger, ctx.query_name)
        ctx.progress.note("query started over reader scg-kafka: it reads the group's assignment at every "
                          "micro-batch, so rebalances do not restart it")


class Backfill:
    """What an available-now ``scg-kafka`` member reads: per claimed partition, the log end when
    it was claimed, and how far the committed batches have read it. Claims and the flag are set
    under the runner's lock; batches are reported on the query's thread."""

    def __init__(self) -> None:
        self.assigned = False                        # the member has had an assignment
        self.ends: dict[TopicPartition, int] = {}    # the log end at the claim
        self.read_to: dict[TopicPartition, int] = {}  # the next offset to read after the last batch

    def claimed(self, starts_and_ends: Mapping[TopicPartition, tuple[int, int]]) -> None:
        for tp, (start, end) in starts_and_ends.items():
            self.ends[tp], self.read_to[tp] = end, start

    def reached(self, tp: TopicPartition) -> bool:
        return tp in self.ends and self.read_to.get(tp, -1) >= self.ends[tp]

    def reporting(self, report: Callable[[BatchReport], None]) -> Callable[[BatchReport], None]:
        """``report``, noting first how far each committed batch read."""
        def noted(batch: BatchReport) -> None:
            for rng in batch.ranges:
                self.read_to[rng.tp] = max(self.read_to.get(rng.tp, rng.end), rng.end)
            report(batch)
        return noted


def reader_mode(ctx: QueryContext) -> ReaderMode:
    """The reader mode ``source.reader`` names."""
    return FollowingQuery.registered(ctx) if ctx.config.source.reader == "scg-kafka" else RestartingQuery(ctx)


def _label(generation) -> str:
    gen_id = getattr(generation, "generation_id", generation)
    return f"gen-{gen_id}-{int(time.time() * 1000)}"
