"""One pipeline member: group membership drives the Spark query over the owned partitions.

Lifecycle (docs/DESIGN.md, data flow):

* ``on_assigned(generation, partitions)`` — record the assignment and return at once, so the
  member rejoins at once when a follow-up rebalance is due (a cooperative round that revoked
  partitions: their next owner gets them only when every member has rejoined). The main thread
  then stops the running query at a batch boundary (it reads a subset of the new assignment),
  claims the partitions in the output and dead-letter tables (bumping their owner epochs, which
  fences any previous writer), chooses start offsets (Delta > group commit > policy), checks each
  partition against the brokers (:mod:`pipelines.runtime.partition_checks`: a partition that
  cannot run is stopped and re-checked with backoff) and starts one query over the partitions
  that run. The same assignment again (a cooperative rebalance that moved none of them) keeps the
  running query;
* ``on_revoked(partitions)`` — stop the query at a batch boundary before returning, so a
  partition is handed over only after its last batch was committed (an eager rebalance revokes
  everything before the member rejoins, a cooperative one only the partitions that leave);
  ``on_fenced(error)`` — stop it now; an in-flight batch either committed whole to Delta or not at all;
* every batch commits Delta first, then Kafka offsets with the member's generation;
* between batches the main thread calls the member's ``poll()``: a batch running past the
  rebalance timeout makes the member leave the group (Kafka's ``max.poll.interval.ms``).

The member's thread calls the listener methods; the main thread (:meth:`PipelineRunner.run`)
watches the member and the query and prints progress. ``_lock`` serialises query changes.
Offsets are next-offset-to-read everywhere (docs/DESIGN.md, invariant 2).

Failures (docs/DESIGN.md, errors; invariant 9): starting the query of an assignment and a failed
query are classified by :func:`pipelines.runtime.failure_rules.classify_failure`. A transient fault
(broker restart, leader or coordinator move, timeout, storage hiccup) never ends the member: the
start is retried, and a failed query restarted from the table's offsets, by the main thread after a
bounded exponential backoff with jitter, for as long as the fault lasts; every retry is one progress
line naming the condition. A permanent fault ends the member with its condition
(:class:`PermanentFault`, or the project's own ``ScgError``); an unrecognised one after
``MAX_UNKNOWN_RESTARTS`` consecutive restarts (:class:`QueryFailedRepeatedly`). ``on_assigned``
never raises: a failure is left to the main thread.
"""
from __future__ import annotations

import functools
import itertools
import logging
import queue
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from groupmgr.coordinator_client import ACCEPTED_CLIENT_SETTINGS
from groupmgr.core import ScgError, TopicPartition
from groupmgr.generation import Generation
from groupmgr.kafka_faults import Backoff, Fault, FaultKind
from groupmgr.member import GroupMember, MemberConfig
from groupmgr.member_config import subscribed_topics
from groupmgr.server_assignment import CONSUMER_GROUP, GroupRunByBroker, group_type_of
from pipelines.runtime import streaming_query as queries
from pipelines.runtime.assigned_offsets import Assignment, Claim
from pipelines.runtime.assigned_source import AssignedKafkaSource, AssignmentFile, assigned_source_options
from pipelines.runtime.batch_writer import (NO_HOOKS, BatchGate, BatchHooks, BatchReport, BatchWriter,
                                            TableTargets, warm_up, warm_up_batch)
from pipelines.runtime.broker_probe import GROUP_PATIENCE_S, BrokerProbe
from pipelines.runtime.checkpoint_log import AssignedOffsetLog, CheckpointOffsetLog
from pipelines.runtime.failure_rules import RestartPolicy, Verdict, classify_failure
from pipelines.runtime.hadoop_fs import HadoopFileSystem
from pipelines.runtime.partition_checks import (DATA_LOSS_REASON, LOG_TRUNCATED, STOPPED_METADATA,
                                                TOPIC_RECREATED, PartitionLog, PartitionVerdict, SourceChanged,
                                                check_partition, lost_range_value)
from pipelines.runtime.pipeline_spec import PipelineSpec
from pipelines.runtime.pipeline_tables import open_tables
from pipelines.runtime.progress import ProgressPrinter
from pipelines.runtime.spark_session import prepare_session, use_local_checkpoint_manager
from pipelines.runtime.start_offsets import StartDecision, choose_start_offset
from pipelines.runtime.warm_up_rounds import WarmUpRounds

log = logging.getLogger("scg.runner")
POLL_S = 0.5
STOP_CHECK_S = 0.05        # how soon the main loop sees run()'s stop event
RESTART_BACKOFF_S = 1.0    # first wait of a failure streak; doubles per attempt (jitter 20 %)
RESTART_BACKOFF_MAX_S = 30.0
MAX_UNKNOWN_RESTARTS = 5    # consecutive restarts after failures no rule recognises
STABLE_AFTER_S = 60.0       # a query running this long (or a committed batch) ends a failure streak
GRACEFUL_STOP_S = 30.0     # the longest a stop waits for a running micro-batch to finish
STOPPED_RECHECK = Backoff(5.0, 60.0)  # how often a stopped partition is checked again
WARM_UP_QUERY_S = 60.0     # the longest the warm-up query may run before it is stopped
TASK_SLOTS_CHECK_S = 10.0  # how often an scg-kafka member asks Spark how many cores it has


class QueryFailedRepeatedly(ScgError):
    """The member's query kept failing, for a reason no rule recognises, after restarts from the
    table's offsets."""

    condition = "QUERY_FAILED_REPEATEDLY"


class PermanentFault(ScgError):
    """A failure a person must fix ended the member; ``condition`` is the fault's own
    (``TOPIC_AUTHORIZATION_FAILED``, ``STORAGE_UNAVAILABLE``, ``KAFKA_DATA_LOSS``, ...)."""

    def __init__(self, fault: Fault, what: str):
        self.fault = fault
        self.condition = fault.condition  # type: ignore[misc]  # per instance, like BrokerError
        super().__init__(f"[{fault.condition}] {what}: {fault.detail}")


@dataclass(frozen=True)
class PartitionChecks:
    """The verdicts over some owned partitions and what they were made from."""

    verdicts: list[PartitionVerdict]
    recorded_offsets: Mapping[TopicPartition, int | None] = field(default_factory=dict)
    recorded_ids: Mapping[TopicPartition, int | None] = field(default_factory=dict)
    logs: Mapping[TopicPartition, PartitionLog] = field(default_factory=dict)
    origins: Mapping[TopicPartition, str] = field(default_factory=dict)  # which rule chose the start

    def origin(self, verdict: PartitionVerdict) -> str:
        return verdict.events[-1].lower() if verdict.events else self.origins.get(verdict.tp, "")


@dataclass(frozen=True)
class StoppedPartition:
    """An owned partition the query leaves out, why, since when, and when it is checked again."""

    verdict: PartitionVerdict
    since: float
    next_check: float
    checks: int


MemberFactory = Callable[[PipelineSpec, "PipelineRunner"], GroupMember]


class PipelineRunner:
    """One member of a pipeline's group and the Spark query over exactly its partitions.

    Guarantees: a query runs only over partitions this member was assigned and has claimed in both
    tables (claim before reading start offsets); it stops using a partition before the member
    gives it up (on_revoked); each batch is committed to Delta before its offsets are committed to
    Kafka. The listener methods run
    on the member's thread, :meth:`run` on the caller's; both take ``_lock`` to change the query.
    """

    def __init__(self, config: PipelineSpec, spark, member_factory: MemberFactory | None = None,
                 out: Callable[[str], None] = print, hooks: BatchHooks = NO_HOOKS):
        self.config, self.spark, self.hooks = config, spark, hooks
        self.fs = HadoopFileSystem(spark)
        self.progress = ProgressPrinter(out)
        for note in prepare_session(spark, config.storage.hadoop_settings()):
            self.progress.note(note)
        use_local_checkpoint_manager(spark, config.checkpoint_root, self.fs.qualify)
        self.tables = open_tables(config, spark)
        for table in (self.tables.table, self.tables.dead_table):
            table.check_storage()  # the storage answers now, or a named error before joining the group
        self.probe = BrokerProbe(config.kafka.confluent_config())
        self.member = (member_factory or group_member_factory)(config, self)
        self._init_lifecycle(follow=config.source.reader == "scg-kafka")
        if self._follow:
            self._assignment_dir = tempfile.mkdtemp(prefix="scg-assignment-")
            spark.dataSource.register(AssignedKafkaSource)
        self._group_type = functools.partial(group_type_of, config.kafka.confluent_config(), config.group.id)

    def _init_lifecycle(self, follow: bool = False) -> None:
        """The query and failure state (no I/O), set before the member can call back.
        ``follow``: one ``scg-kafka`` query follows the assignment (``source.reader``)."""
        self._follow = follow
        self._assignment_dir: str | None = None  # scg-kafka: where the assignment file lives
        self._lock = threading.RLock()
        self._query = None
        self._closing = False                   # run() is ending: no query starts any more
        self._checkpoint = None
        self._owned: tuple[TopicPartition, ...] = ()
        self._query_partitions: tuple[TopicPartition, ...] = ()  # what the running query was started over
        self._wake = threading.Event()           # the main thread has a start to make now
        self._generation: Generation | None = None
        self._refused_batch: int | None = None   # set when the table refused a batch of this query
        self._pending_start = False              # owned partitions wait for a (re)start of the query
        self._retry_at = 0.0                     # monotonic time of the next start attempt
        self._restarting = False                 # the pending start follows a failure (not an assignment)
        self._restarts = RestartPolicy(Backoff(RESTART_BACKOFF_S, RESTART_BACKOFF_MAX_S), MAX_UNKNOWN_RESTARTS,
                                       time.monotonic, lambda exc: classify_failure(exc, queries.failure_text(exc)))
        self._batch_done = False                 # set by the query thread after a committed batch
        self._batches_reported = 0               # committed batches (query thread increments)
        self._batches_at_poll = 0                # ... as seen at the last poll (main thread)
        self._started_at = 0.0
        self._fatal: BaseException | None = None  # a permanent failure for run() to raise
        self._run_by_broker = False              # the group is a consumer-protocol (KIP-848) group
        self._group_type: Callable[[], str] | None = None  # asks the brokers (set once configured)
        self._server_check_due = False           # an assignment arrived: who runs the group? (main thread asks)
        self._stopped: dict[TopicPartition, StoppedPartition] = {}  # owned partitions left out
        self._query_topic_ids: dict[str, int] = {}  # topic ID fingerprints the query reads
        self._claims: dict[TopicPartition, Claim] = {}  # scg-kafka: what the running query reads, per claim
        self._claim_serials = itertools.count(1)
        self._targets: TableTargets | None = None  # the running query's tables and owner epochs
        self._writer: BatchWriter | None = None  # the running query's batch writer (and its gate)
        self._task_slots = 1                     # scg-kafka: the application's cores, as last published
        self._task_slots_checked_at = 0.0        # ... and when they were last asked (main thread)

    @property
    def _gate(self) -> BatchGate | None:
        """The running query's batch boundary (its batch writer's gate)."""
        return self._writer.gate if self._writer is not None else None

    # -- RebalanceListener ------------------------------------------------------------------------
    def on_assigned(self, generation: Generation, partitions) -> None:
        """Take ``partitions`` (the member's whole assignment) and return without waiting: the
        main thread starts the query over them (:meth:`_check_query`), first stopping the running
        one at a batch boundary. Never raises. An unchanged assignment (a cooperative rebalance that
        moved none of this member's partitions) keeps the running query: no pause, no cancelled
        batch. A running query reads a subset of ``partitions`` (the member revokes before it
        assigns); one that does not is stopped here, before the member goes on."""
        with self._lock:
            partitions = tuple(sorted(partitions))
            self._generation = generation
            running = self._query is not None or self._pending_start
            if partitions and partitions == self._owned and running:
                self.progress.assigned(generation, partitions, "unchanged: the query keeps running")
                self._server_check_due = True
                return
            if self._follow:
                self._release([tp for tp in self._claims if tp not in partitions])
            elif not set(self._query_partitions) <= set(partitions):
                self._stop_query(graceful=True)
            self._owned = partitions
            self._stopped = {tp: s for tp, s in self._stopped.items() if tp in self._owned}
            self.progress.assigned(generation, self._owned)
            self._server_check_due = True
            self._pending_start, self._retry_at = bool(self._owned) and not self._closing, 0.0
            self._restarting = False
            self._wake.set()

    def on_revoked(self, partitions) -> None:
        """Stop using ``partitions`` (all owned ones in an eager rebalance, only those that leave
        in a cooperative one): the query stops at a batch boundary; ``on_assigned`` follows with
        the new assignment."""
        with self._lock:
            if self._closing:  # the gate is closed: the query writes nothing more, it stops after the leave
                self.progress.revoked(partitions, "leaving the group; the query writes no further batch")
            elif self._follow:
                self.progress.revoked(partitions, "the query reads them no more after its current batch")
                self._release(partitions)
            else:
                self.progress.revoked(partitions)
                self._stop_query(graceful=True)
            revoked = set(partitions)
            self._owned = tuple(tp for tp in self._owned if tp not in revoked)
            self._pending_start = False

    def on_fenced(self, error) -> None:
        """The generation is gone: stop the query. After a poll timeout (a batch ran past the
        rebalance timeout) the member rejoins at the first poll once the query has stopped."""
        if getattr(error, "condition", "") == "POLL_TIMEOUT_EXPIRED":
            self.progress.note(f"fenced by the group: [POLL_TIMEOUT_EXPIRED] no batch finished within "
                               f"group.rebalance_timeout ({self.config.group.rebalance_timeout_ms} ms); left the "
                               "group so its partitions move; rejoining once the query has stopped")
        with self._lock:
            poll_timeout = getattr(error, "condition", "") == "POLL_TIMEOUT_EXPIRED"
            if not poll_timeout:
                self.progress.note(f"fenced by the group ({error}); "
                                   + ("dropping its partitions" if self._follow else "stopping the query")
                                   + " and rejoining")
            if self._follow and not poll_timeout:
                self._release(list(self._claims))
            else:
                self._stop_query()
            self._owned, self._pending_start = (), False

    # -- main loop --------------------------------------------------------------------------------
    def run(self, stop: threading.Event | None = None,
            until: Callable[[], bool] | None = None) -> None:
        """Join the group and process until ``stop`` is set, ``until()`` is true, or (with an
        available-now trigger) every owned partition is caught up. Leaves the group on return."""
        stop = stop or threading.Event()
        try:  # the warm-up too: it may have opened the member's offsets connection, closed by the leave
            if self._follow:
                with self._lock:
                    self._start_following_query()  # over no partition yet: assignments then cost no start
                self._warm_up_in_query(stop)
            else:
                self._warm_up()
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
                self._poll_between_batches()
                if self._follow:
                    self._follow_application_cores()
                state = self._check_query()  # before the describe below: a start waits for nothing
                self._check_server_assignment_when_due()
                if state == "finished" and self.config.trigger.available_now:
                    break
                if until is not None and until():
                    break
        finally:
            self._leave()
            self.probe.close()
            if self._assignment_dir is not None:
                shutil.rmtree(self._assignment_dir, ignore_errors=True)

    # -- internals --------------------------------------------------------------------------------
    def _leave(self) -> None:
        """Leave the group as soon as the query writes nothing more, then stop the query: the
        partitions' next owners need not wait for Spark to stop it (measured: 0.8 s between a
        leaving member's last batch and its LeaveGroup when the stop came first). The batch
        writing now ends first (the gate); one still writing after :data:`GRACEFUL_STOP_S` is
        cancelled before the member leaves."""
        with self._lock:
            self._closing = True
            if not self._close_gate():
                self._stop_query()
        try:
            self.member.close()  # on_revoked, then LeaveGroup
        finally:
            with self._lock:
                self._stop_query()

    def _wait_for_wake(self, stop: threading.Event) -> None:
        """Main thread: up to :data:`POLL_S`, ended at once by an assignment (``_wake``) and
        within :data:`STOP_CHECK_S` by ``stop``: a stop closes the batch gate before Spark starts
        another micro-batch whenever it can (measured: a member SIGTERMed as a batch ended let the
        next 2.7 s batch run before it left)."""
        deadline = time.monotonic() + POLL_S
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._wake.wait(min(remaining, STOP_CHECK_S)):
                return

    def _warm_up(self) -> None:
        """Before joining (reader ``spark-kafka``), so the first batch after an assignment pays
        less of Spark's first-use cost (the partitions a new member takes over wait for it): a
        short streaming query over the last record of the first topic's partition 0, through
        Spark's Kafka source and the batch path (:meth:`_warm_up_through_the_source`); when there
        is nothing to read, one made-up record through the batch path (:func:`warm_up`). Nothing
        is written or committed, no offset either. Best effort: a failure here is the query's to
        report, when it meets it for real."""
        started = time.monotonic()
        targets = TableTargets(self.tables.table, self.tables.dead_table, {}, {})
        try:
            read = self._warm_up_through_the_source(targets)
        except Exception as exc:  # noqa: BLE001 - advisory: the real query reports its own failure
            log.debug("warming up through the Kafka source failed: %s", exc)
            read = ""
        if read or self._warm_up_made_up(targets):
            self._note_warmed_up(started, read)

    def _warm_up_made_up(self, targets: TableTargets) -> bool:
        """One made-up record through the batch path (:func:`warm_up`); False if that failed."""
        try:
            warm_up(self.spark, self.tables.record_format, self.config.transform, targets)
            return True
        except Exception as exc:  # noqa: BLE001 - advisory: the real batch reports its own failure
            log.debug("warming up the batch path failed: %s", exc)
            return False

    def _note_warmed_up(self, started: float, read: str, where: str = "") -> None:
        how = f"read {read} through reader {self.config.source.reader}{where}" if read else "one made-up record"
        self.progress.note(f"batch path warmed up in {time.monotonic() - started:.1f}s ({how}; nothing written)")

    def _warm_up_record(self) -> tuple[TopicPartition, int] | None:
        """The last record of partition 0 of the first configured topic, as (partition, offset);
        None when there is none (a pattern subscription, an empty log)."""
        if not self.config.topics:
            return None
        tp = TopicPartition(self.config.topics[0], 0)
        log_ = self.probe.describe([tp]).logs.get(tp)
        if log_ is None or log_.latest <= log_.earliest:
            return None
        return tp, log_.latest - 1

    def _warm_up_in_query(self, stop: threading.Event | None = None) -> None:
        """Before joining (reader ``scg-kafka``), with the member's own query started over no
        partition: claim the last record of the first topic's partition 0 for the query alone and
        hand the batches that read it to :func:`warm_up_batch` (:meth:`BatchWriter.rehearse`:
        nothing written or committed, no offset either), claiming the then last record again
        with a new serial after each one, for as many batches as :meth:`_warm_up_rounds` says
        (:class:`~pipelines.runtime.warm_up_rounds.WarmUpRounds`); then drop the claim
        (:meth:`_release`) and write again. The query's planner, the executors' Python readers,
        the batch path and the driver's JIT-compiled code are then warm when the first real claim
        comes; one query start, not two. At most :data:`WARM_UP_QUERY_S` for a batch; ``stop``
        ends the warm-up after the batch in flight. With nothing to read, one made-up record
        through the batch path and a wait for the query's first trigger. Best effort."""
        started, writer, stop = time.monotonic(), self._writer, stop or threading.Event()
        targets = TableTargets(self.tables.table, self.tables.dead_table, {}, {})
        record = self._warm_up_record_or_none()
        if record is None or writer is None:
            if self._warm_up_made_up(targets):
                self._note_warmed_up(started, "")
            if queries.wait_until_planned(self._query, WARM_UP_QUERY_S):
                self.progress.note(f"query ready in {time.monotonic() - started:.1f}s (its first trigger planned)")
            return
        tp, first_offset = record
        rehearsed: queue.SimpleQueue[tuple[float, bool]] = queue.SimpleQueue()

        def rehearsal(kafka_rows, ranges) -> None:  # query thread
            if not any(r.end > r.start for r in ranges):
                return
            began, ok = time.monotonic(), True
            try:
                warm_up_batch(kafka_rows, self.tables.record_format, self.config.transform, targets)
            except Exception as exc:  # noqa: BLE001 - advisory: the real batch reports its own failure
                log.debug("warming up the batch path failed: %s", exc)
                ok = False
            rehearsed.put((time.monotonic() - began, ok))

        rounds, why = self._warm_up_rounds(stop)
        self.progress.note(f"warming the batch path up before joining ({why}): rehearsing batches over "
                           f"{tp.topic}-{tp.partition} (nothing written)")
        writer.rehearse(rehearsal)
        try:
            while record is not None and rounds.more(time.monotonic()) and not stop.is_set():
                with self._lock:
                    self._claims[tp] = Claim(next(self._claim_serials), record[1])
                    self._publish_claims()
                outcome = self._next_rehearsal(rehearsed, stop)
                if outcome is None or not outcome[1]:
                    break
                rounds.add(outcome[0], time.monotonic())
                if rounds.more(time.monotonic()):
                    waiting = self._who_waits(stop.wait, patience_s=0.0)[0]
                    if waiting is not None:  # e.g. a crashed member's session ended: the group is empty now
                        self.progress.note(f"joining after {len(rounds.durations)} rehearsed batches: {waiting}")
                        break
                record = self._warm_up_record_or_none()
            with self._lock:
                self._release([tp])
        finally:
            writer.rehearse(None)
        if rounds.durations:
            self._note_warmed_up(started, f"{tp.topic}-{tp.partition}@{first_offset}",
                                 f" in the member's query, {rounds.summary()}")

    def _warm_up_rounds(self, stop: threading.Event) -> tuple[WarmUpRounds, str]:
        """How long to rehearse, and why: one batch when someone waits for this member
        (:meth:`_who_waits`); otherwise only its own join waits, and it rehearses until its
        batches stop getting faster, the batches starting within ``source.warm_up_limit`` after
        the first ended."""
        trigger_s = (self.config.trigger.processing_time_ms or 0) / 1000
        waiting, members = self._who_waits(stop.wait)
        if waiting is not None:
            return WarmUpRounds(trigger_s=trigger_s, max_batches=1), f"{waiting}: one batch"
        limit_s = self.config.source.warm_up_limit_ms / 1000
        return (WarmUpRounds(trigger_s=trigger_s, max_seconds=limit_s),
                f"the group's {members} member(s) read its partitions meanwhile: until the batches stop "
                f"getting faster, starting within {limit_s:g}s")

    def _who_waits(self, sleep: Callable[[float], object] = time.sleep,
                   patience_s: float = GROUP_PATIENCE_S) -> tuple[str | None, int]:
        """Why this member should join now rather than rehearse on (None: nobody waits for it),
        and how many members its group has. Someone waits when nobody else reads the partitions
        it would take: a group with no member (or that the brokers did not describe), or one
        where this member's ``group.instance.id`` is still a member (a static member restarting
        within its session timeout: its partitions wait for it); and when the group is more
        records behind than its members read in one batch each (``max_offsets_per_trigger``),
        or its backlog is unknown (no committed offset yet: members started together over the
        logs share them at once). Also after ``source.warm_up_limit: 0s``, or a check that
        failed. ``sleep``/``patience_s``: how the describe waits out a loading coordinator."""
        group = self.config.group
        if self.config.source.warm_up_limit_ms == 0:
            return "source.warm_up_limit is 0s", 0
        try:
            members = self.probe.group_members(group.id, patience_s=patience_s, sleep=sleep)
            if members is None:
                return "the brokers did not describe the group", 0
            if not members:
                return "the group has no member", 0
            if group.instance_id is not None and group.instance_id in members:
                return f"this member's instance id {group.instance_id!r} still holds its partitions", len(members)
            offsets = self.member.group_offsets(self.probe.timeout_s)
            wanted = set(subscribed_topics(tuple(self.config.topics), self.config.topic_pattern or None,
                                           {tp.topic for tp in offsets}))  # a pattern: the topics it matches
            committed = {tp: c.offset for tp, c in offsets.items() if tp.topic in wanted}
            if not committed:
                return "the group's backlog is unknown (no committed offset yet)", len(members)
            backlog = self.probe.backlog(committed)
            per_round = len(members) * self.config.source.max_offsets_per_trigger
            if backlog > per_round:
                return (f"the group is {backlog:,} records behind, more than its {len(members)} member(s) "
                        f"read in a batch each ({per_round:,})"), len(members)
            return None, len(members)
        except Exception as exc:  # noqa: BLE001 - advisory: joining at once is always safe
            log.debug("checking group %s before joining: %r", group.id, exc)
            return f"the group could not be checked ({type(exc).__name__})", 0

    def _warm_up_record_or_none(self) -> tuple[TopicPartition, int] | None:
        """:meth:`_warm_up_record`, None when the brokers could not say."""
        try:
            return self._warm_up_record()
        except Exception as exc:  # noqa: BLE001 - advisory: the real query reports its own failure
            log.debug("finding a record to warm up on failed: %s", exc)
            return None

    def _next_rehearsal(self, rehearsed: queue.SimpleQueue, stop: threading.Event) -> tuple[float, bool] | None:
        """The next rehearsed batch's (seconds, succeeded), waiting at most :data:`WARM_UP_QUERY_S`
        while the query runs and ``stop`` is not set; None when none came."""
        deadline = time.monotonic() + WARM_UP_QUERY_S
        while time.monotonic() < deadline and self._query is not None and self._query.isActive:
            try:
                return rehearsed.get(timeout=POLL_S)
            except queue.Empty:
                if stop.is_set():
                    return None
        return None

    def _warm_up_through_the_source(self, targets: TableTargets) -> str:
        """Run one query like the member's own (Spark's Kafka source, same source options, fresh
        checkpoint, removed after) from the last record of partition 0 of the first configured
        topic, until its first micro-batch has gone through :func:`warm_up_batch` (at most
        :data:`WARM_UP_QUERY_S`). The partition it read (e.g. ``orders-0@41``), or "" when there
        was nothing to read (a pattern subscription, an empty log) or no batch ran."""
        record = self._warm_up_record()
        if record is None:
            return ""
        tp, start = record
        done = threading.Event()

        def batch(kafka_rows, batch_id: int) -> None:
            warm_up_batch(kafka_rows, self.tables.record_format, self.config.transform, targets)
            done.set()

        checkpoint = queries.new_checkpoint(self.config.checkpoint_root, "warm-up")
        try:
            query = self._start_warm_up_query(tp, start, batch, checkpoint)
            try:
                deadline = time.monotonic() + WARM_UP_QUERY_S
                while not done.wait(POLL_S) and query.isActive and time.monotonic() < deadline:
                    pass
            finally:
                query.stop()
        finally:
            queries.remove_checkpoint(self.fs, checkpoint)
        return f"{tp.topic}-{tp.partition}@{start}" if done.is_set() else ""

    def _start_warm_up_query(self, tp: TopicPartition, start: int, batch, checkpoint: str):
        """The warm-up query over ``tp`` from ``start`` through Spark's Kafka source, with no
        minimum batch size (one record: no batch to delay)."""
        options = {k: v for k, v in self.tables.source_options.items()
                   if k not in ("minOffsetsPerTrigger", "maxTriggerDelay")}
        return queries.start_query(self.spark, options, {tp: start}, batch, checkpoint,
                                   {"availableNow": True}, f"{self.config.name}-warm-up")

    def _poll_between_batches(self) -> None:
        """Main thread: tell the member the application is alive (Kafka's ``poll()``) when no
        micro-batch is writing (in its ``foreachBatch``, nearly all of a batch's time; a trigger
        that only plans, e.g. the scg-kafka planner waiting for an assignment for most of the
        interval, is not a batch) or one was committed since the last poll (a backlog runs
        batches back to back, with no idle moment between them). A batch that runs longer than
        ``group.rebalance_timeout`` (the member's ``max_poll_interval``) therefore makes the member
        leave the group, so its partitions move to the others; it rejoins at the first poll once
        the batch has ended or its query was stopped. Lock-free: a listener stuck stopping the
        query cannot delay it."""
        gate, committed = self._gate, self._batches_reported
        busy = gate is not None and gate.writing
        if not busy or committed != self._batches_at_poll:
            self._batches_at_poll = committed
            self.member.poll()

    def _check_server_assignment_when_due(self) -> None:
        """Main thread, no lock held: :meth:`_check_server_assignment` once after each assignment.
        The describe round trip (a new admin client: ~65 ms on an idle loopback broker, more with
        TLS and SASL) is kept off the listener thread, where it delayed every query start."""
        due, self._server_check_due = self._server_check_due, False
        if due:
            self._check_server_assignment()

    def _check_server_assignment(self) -> None:
        """After an assignment (main thread): when the broker now runs the group
        with its own assignor (a member joined with group.protocol=consumer), say so once, by
        name, and with ``group.on_server_assignment: fail`` end the member; say so again when the
        group is classic again. Advisory: a describe that fails changes nothing."""
        if self._group_type is None:
            return
        try:
            kind = self._group_type()
        except Exception as exc:  # noqa: BLE001 - the check never stands in the way of a rebalance
            log.debug("describing the group failed: %s", exc)
            return
        run_by_broker = kind == CONSUMER_GROUP
        if run_by_broker == self._run_by_broker:
            return
        self._run_by_broker = run_by_broker
        if not run_by_broker:
            self.progress.note(f"group {self.config.group.id} is a classic group again: assignor "
                               f"{', '.join(self.config.group.assignors)} decides")
            return
        error = GroupRunByBroker(self.config.group.id, tuple(self.config.group.assignors))
        self.progress.note(error.headline())
        if self.config.group.on_server_assignment == "fail":
            self._fatal = error

    def _check_query(self) -> str:
        """One look at the query (main thread): restart it when due, raise a permanent failure."""
        with self._lock:
            self._raise_if_fatal()
            if self._batch_done or (self._query is not None
                                    and time.monotonic() - self._started_at >= STABLE_AFTER_S):
                self._batch_done = False
                self._restarts.succeeded()
            self._recheck_stopped()
            if self._pending_start and self._owned and time.monotonic() >= self._retry_at:
                if not self._follow:
                    self._stop_query(graceful=True)  # a query over fewer partitions ends at a batch boundary
                self._try_start("query restart failed" if self._restarting else "query start failed")
                self._raise_if_fatal()
                return "restarted" if self._query is not None else "idle"
            query = self._query
            if query is None:
                return "idle"
            if query.isActive:
                return "active"
            error = query.exception()
            refused = self._refused_batch is not None
            self._stop_query()
            if error is None:
                return "finished"
            if refused:
                self.progress.note("query stopped after a refused batch; waiting for the group to rebalance")
                return "fenced"
            # Restart from the table's offsets (nothing is lost or repeated: the next batch starts
            # where the last Delta commit ended), after a backoff, unless the cause is permanent.
            self._pending_start = True
            self._failed(error, "query failed")
            self._raise_if_fatal()
            return "restarting"

    def _try_start(self, what: str) -> None:
        """Start the query over the owned partitions; a failure is classified (``_failed``).
        Once the member is stopping, an assignment that arrives before it left the group starts
        nothing (the partitions' next owner resumes from the tables)."""
        if self._closing:
            self._pending_start = False
            return
        try:
            if self._follow:
                self._follow_owned()
            else:
                self._start_query()
            self._pending_start, self._started_at = False, time.monotonic()
        except Exception as exc:  # noqa: BLE001 - classified: retried later or fatal
            if not self._follow or self._query is None or not self._query.isActive:
                self._stop_query()  # (a following query goes on; only the new partitions wait)
            self._failed(exc, what)

    def _failed(self, exc: BaseException, what: str) -> None:
        """Classify ``exc``: schedule the next start after a backoff, or record a fatal failure."""
        verdict = self._restarts.failed(exc)
        self._restarting = True
        if verdict.give_up:
            self._fatal = fatal_error(exc, verdict, what)
            return
        self._retry_at = time.monotonic() + verdict.delay_s
        self.progress.retrying(what, verdict)

    def _raise_if_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    def _start_query(self) -> None:
        # Claim first, then read the recorded offsets: anything a previous owner committed before
        # the claim is seen, and anything it tries after the claim is refused.
        epochs, dead_epochs = self._claim(self._owned)
        targets = TableTargets(self.tables.table, self.tables.dead_table, epochs, dead_epochs)
        checks = self._check_partitions(self._owned)
        runs = [v for v in checks.verdicts if v.runs]
        self._apply_verdicts(runs, targets, checks)
        self._note_stopped([v for v in checks.verdicts if not v.runs], checks)
        if not runs:
            return  # every owned partition is stopped; _recheck_stopped starts the query later
        offsets = {v.tp: v.offset for v in runs}
        self.progress.starting({v.tp: StartDecision(v.offset, checks.origin(v)) for v in runs})
        self._query_topic_ids = {tp.topic: checks.logs[tp].topic_id for tp in offsets}
        self._checkpoint = queries.new_checkpoint(self.config.checkpoint_root, _label(self._generation))
        self._refused_batch = None
        writer = BatchWriter(self.tables.record_format, self.config.transform, targets,
                             CheckpointOffsetLog(self._checkpoint, offsets, self.fs.read_text),
                             self._commit_kafka, self._on_batch, self._on_refused, self.hooks,
                             check_sources=self._check_sources)
        self._writer = writer
        self._query = queries.start_query(self.spark, self.tables.source_options, offsets, writer,
                                          self._checkpoint, self.tables.trigger,
                                          f"{self.config.name}-{_label(self._generation)}")
        self._query_partitions = tuple(sorted(offsets))

    # -- scg-kafka: one query that follows the assignment --------------------------------------------
    def _follow_owned(self) -> None:
        """Let the query read the owned partitions it does not read yet (all of them after a
        failure stopped it): claim them in both tables, check them, publish each one that runs
        with a new claim and its start offset in the assignment file; the next micro-batch
        reads them, with no restart. The epochs of a claim reach the batch writer before the
        file names the partition. Main thread, lock held."""
        if self._query is None:
            self._claims = {}
            self._start_following_query()
        new = tuple(tp for tp in self._owned if tp not in self._claims)
        if not new:
            return
        epochs, dead_epochs = self._claim(new)
        targets = self._targets
        merged = TableTargets(targets.table, targets.dead_table, {**targets.epochs, **epochs},
                              {**targets.dead_epochs, **dead_epochs})
        checks = self._check_partitions(new)
        runs = [v for v in checks.verdicts if v.runs]
        self._apply_verdicts(runs, merged, checks)
        self._note_stopped([v for v in checks.verdicts if not v.runs]
                           + [s.verdict for tp, s in self._stopped.items() if tp not in new], checks)
        if not runs:
            return
        self.progress.starting({v.tp: StartDecision(v.offset, checks.origin(v)) for v in runs},
                               "reading from the next batch, the query keeps running")
        self._query_topic_ids.update({v.tp.topic: checks.logs[v.tp].topic_id for v in runs})
        targets.epochs, targets.dead_epochs = merged.epochs, merged.dead_epochs  # read once per batch
        self._claims.update({v.tp: Claim(next(self._claim_serials), v.offset) for v in runs})
        self._publish_claims()

    def _start_following_query(self) -> None:
        """Start the ``scg-kafka`` query over the current claims (none yet, before the member
        joins). Lock held."""
        self._task_slots = self._application_cores() or self._task_slots
        self._targets = TableTargets(self.tables.table, self.tables.dead_table, {}, {})
        self._checkpoint = queries.new_checkpoint(self.config.checkpoint_root, _label(self._generation))
        self._refused_batch = None
        writer = BatchWriter(self.tables.record_format, self.config.transform, self._targets,
                             AssignedOffsetLog(self._checkpoint, self.fs.read_text),
                             self._commit_kafka, self._on_batch, self._on_refused, self.hooks,
                             check_sources=self._check_sources)
        self._writer = writer
        self._publish_claims()
        trigger = self.config.trigger
        options = assigned_source_options(self.config.kafka.confluent_config(), self._assignment_path(),
                                          self.config.source, self._task_slots,
                                          None if trigger.available_now else trigger.processing_time_ms)
        self._query = queries.start_assigned_query(self.spark, options, writer, self._checkpoint,
                                                   self.tables.trigger,
                                                   f"{self.config.name}-follow-{uuid.uuid4().hex[:8]}")
        self._started_at = time.monotonic()
        self.progress.note("query started over reader scg-kafka: it reads the group's assignment at every "
                           "micro-batch, so rebalances do not restart it")

    def _release(self, partitions) -> None:
        """Take ``partitions`` out of the query (scg-kafka) and return once every batch that writes
        them has ended (committed, refused or failed), so the next owner starts from what the
        tables hold. A batch that begins after this writes none of them (:meth:`_publish_claims`),
        so a revocation between batches is released when the next batch begins, one in the
        middle of a batch when that batch ends. A query that does not get there within
        :data:`GRACEFUL_STOP_S` is stopped (a batch still writing is cancelled; the next owner's
        claim refuses anything it commits later). Lock held."""
        gone = [tp for tp in partitions if tp in self._claims]
        if not gone:
            return
        for tp in gone:
            del self._claims[tp]
        query, gate = self._query, self._gate
        self._publish_claims()
        if query is None or gate is None:
            return
        mark, deadline = gate.mark(), time.monotonic() + GRACEFUL_STOP_S
        while not gate.released(gone, mark, POLL_S):
            if not query.isActive:
                return  # a failed query reads nothing more; it is restarted from the tables
            if time.monotonic() >= deadline:
                log.warning("no micro-batch boundary within %.0fs; stopping the query", GRACEFUL_STOP_S)
                self._stop_query()
                return

    def _publish_claims(self) -> None:
        """Tell the query's batch writer, then the source's planner (the assignment file), which
        partitions the query reads now. The writer first: a batch that begins after this writes
        none of the partitions given up (a batch planned before may still name them), and no
        batch can be planned over a new claim before the writer allows it. Lock held."""
        if self._gate is not None:
            self._gate.allow(self._claims)
        AssignmentFile(self._assignment_path()).write(Assignment(dict(self._claims), self._task_slots))
        self._query_partitions = tuple(sorted(self._claims))

    def _application_cores(self) -> int | None:
        """The cores the application runs tasks on now (``SparkContext.defaultParallelism``:
        executors registered so far, or ``spark.default.parallelism`` when set); None when Spark
        could not say."""
        try:
            return max(1, int(self.spark.sparkContext.defaultParallelism))
        except Exception as exc:  # noqa: BLE001 - advisory: the last known count stays
            log.debug("reading defaultParallelism failed: %s", exc)
            return None

    def _follow_application_cores(self) -> None:
        """Main thread, every :data:`TASK_SLOTS_CHECK_S`: when the application's cores changed
        (executors that registered after the query started, or came and went with dynamic
        allocation), publish the new count with the claims, so the scg-kafka planner groups the
        next batches into that many tasks (:func:`~pipelines.runtime.assigned_offsets.task_groups`).
        Never waits for the lock: a listener releasing partitions holds it, and the check is
        simply made again later."""
        now = time.monotonic()
        if self._query is None or now < self._task_slots_checked_at + TASK_SLOTS_CHECK_S:
            return
        self._task_slots_checked_at = now
        cores = self._application_cores()
        if cores is None or cores == self._task_slots or not self._lock.acquire(blocking=False):
            return
        try:
            if self._query is None:
                return
            before, self._task_slots = self._task_slots, cores
            self._publish_claims()
        finally:
            self._lock.release()
        self.progress.note(f"the application has {cores} cores now ({before} before): "
                           f"a batch runs in up to {cores} tasks")

    def _assignment_path(self) -> str:
        return f"{self._assignment_dir}/assignment.json"

    def _claim(self, partitions) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """Claim ``partitions`` in the output and the dead-letter table (:meth:`TxnDeltaTable.claim`),
        both at once: two tables, two commits, each ordered only against its own table. Their
        epochs, output table first."""
        return at_once(lambda: self.tables.table.claim(partitions),
                       lambda: self.tables.dead_table.claim(partitions))

    def _check_partitions(self, partitions) -> PartitionChecks:
        """Each partition's verdict (:func:`check_partition`) from the table's offsets and topic
        IDs, the group's commits and the brokers' view of the logs (the three asked at once;
        after the claim, so the table shows anything a previous owner committed before it)."""
        (delta, recorded_ids), committed, probe = at_once(
            lambda: self.tables.table.recorded(partitions),
            lambda: {tp: getattr(om, "offset", om) for tp, om in self.member.committed(partitions).items()},
            lambda: self.probe.describe(partitions))
        verdicts, origins = [], {}
        for tp in partitions:
            log_ = probe.logs.get(tp)
            start = choose_start_offset(tp, delta, committed, self.config.source.starting_offsets,
                                        getattr(log_, "earliest", None), getattr(log_, "latest", None))
            origins[tp] = start.origin if start else ""
            verdicts.append(check_partition(tp, start.offset if start else None, recorded_ids.get(tp), log_,
                                            probe.errors.get(tp), self.config.source.on_data_loss, origins[tp]))
        return PartitionChecks(verdicts, delta, recorded_ids, probe.logs, origins)

    def _apply_verdicts(self, runs: list[PartitionVerdict], targets: TableTargets,
                        checks: PartitionChecks) -> None:
        """Make the tables agree with the verdicts before the query starts: resets (a recreated
        topic, a truncated log) and new topic IDs in one commit per table, then each skipped range
        as a ``data_loss`` marker row in the dead-letter table, committed in both tables like a
        batch (idempotent: a retry after a crash finds the range recorded and writes nothing)."""
        resets = {v.tp: v.reset_to for v in runs if v.reset_to is not None}
        ids = {v.tp: checks.logs[v.tp].topic_id for v in runs
               if checks.recorded_ids.get(v.tp) != checks.logs[v.tp].topic_id}
        events = [v for v in runs if v.events]
        info = {"scg.event": ",".join(sorted({e for v in events for e in v.events})),
                "scg.detail": " | ".join(v.detail for v in events)[:4000]} if events else None
        if resets:
            targets.dead_table.record_partitions(targets.dead_epochs, resets, {}, info)
        targets.table.record_partitions(targets.epochs, resets, ids, info)
        for v in events:
            self.progress.note(f"{v.tp.topic}-{v.tp.partition}: [{', '.join(v.events)}] {v.detail}")
        lost = [v.lost for v in runs if v.lost is not None]
        if lost:
            now_ms = int(time.time() * 1000)
            markers = [{"topic": r.topic, "partition": r.partition, "offset": r.start, "timestamp": now_ms * 1000,
                        "key": None, "value": lost_range_value(r, now_ms), "reason": DATA_LOSS_REASON}
                       for r in lost]
            dead_schema = targets.dead_table.schema
            rows = pa.Table.from_pylist([{f.name: m.get(f.name) for f in dead_schema} for m in markers],
                                        schema=_with_int_timestamps(dead_schema)).cast(dead_schema)
            targets.dead_table.commit(rows, lost, targets.dead_epochs)
            targets.table.commit(targets.table.schema.empty_table(), lost, targets.epochs)

    def _note_stopped(self, verdicts: list[PartitionVerdict], checks: PartitionChecks) -> None:
        """Record the stopped partitions: one progress line when a partition stops (or its
        condition changes), a Kafka commit of the table's offset with ``scg:stopped:<condition>``
        metadata for ``scg describe``; partitions no longer stopped are announced as resumed."""
        now = time.monotonic()
        stopped = {v.tp: v for v in verdicts}
        for tp in [tp for tp in self._stopped if tp not in stopped]:
            self.progress.note(f"{tp.topic}-{tp.partition} resumes "
                               f"(was stopped: {self._stopped.pop(tp).verdict.condition})")
        for tp, verdict in stopped.items():
            previous = self._stopped.get(tp)
            attempt = previous.checks + 1 if previous else 1
            self._stopped[tp] = StoppedPartition(verdict, previous.since if previous else now,
                                                 now + STOPPED_RECHECK.delay(attempt), attempt)
            if previous is None or previous.verdict.condition != verdict.condition:
                self.progress.note(f"{tp.topic}-{tp.partition} stopped: [{verdict.condition}] {verdict.detail}; "
                                   "the other partitions go on; checked again with backoff")
                self._publish_stopped(tp, verdict, checks.recorded_offsets.get(tp))

    def _publish_stopped(self, tp: TopicPartition, verdict: PartitionVerdict, offset: int | None) -> None:
        """Commit the table's offset of ``tp`` (never more than the table holds) with metadata
        naming why it is stopped; best effort."""
        if offset is None:
            return
        self._commit_kafka({tp: offset}, f"{STOPPED_METADATA}{verdict.condition}: {verdict.detail}"[:1000])

    def _recheck_stopped(self) -> None:
        """Main thread, lock held: check the stopped partitions that are due; when one may run
        again, restart the query over the owned partitions (the start re-checks them all)."""
        now = time.monotonic()
        due = [tp for tp, s in self._stopped.items() if s.next_check <= now and tp in self._owned]
        if not due or self._pending_start:
            return
        try:
            checks = self._check_partitions(tuple(due))
        except Exception as exc:  # noqa: BLE001 - still stopped; checked again later
            log.debug("checking stopped partitions failed: %s", exc)
            checks = PartitionChecks([s.verdict for tp, s in self._stopped.items() if tp in due])
        if any(v.runs for v in checks.verdicts):
            if not self._follow:
                self._stop_query(graceful=True)
            self._pending_start, self._retry_at = True, 0.0
        else:
            others = [s.verdict for tp, s in self._stopped.items() if tp not in due]
            self._note_stopped(checks.verdicts + others, checks)

    def _check_sources(self, ranges) -> None:
        """Query thread, before a batch is committed: its source is still the one the query
        started on (no partition's log went back below the query's offsets, no topic was
        recreated); else SourceChanged fails the batch and the restart's checks decide."""
        backwards = [r for r in ranges if r.end < r.start]
        if backwards:
            r = backwards[0]
            raise SourceChanged(LOG_TRUNCATED, f"{r.topic}-{r.partition} went back from {r.start} to {r.end}")
        topics = {r.topic for r in ranges if r.end > r.start}
        current = self.probe.current_topic_ids(topics) if topics else {}  # TopicIdsUnconfirmed: transient
        changed = sorted(t for t in topics if current[t] != self._query_topic_ids.get(t))
        if changed:
            raise SourceChanged(TOPIC_RECREATED, f"topic(s) {', '.join(changed)} no longer have the ID the "
                                                 "query started with (deleted, or deleted and created again)")

    def _close_gate(self) -> bool:
        """Let the micro-batch writing now end (at most :data:`GRACEFUL_STOP_S`) and no further
        one write. True when no batch of the query writes any more (or there is no query)."""
        if self._query is None or self._gate is None or self._gate.close(GRACEFUL_STOP_S):
            return True
        log.warning("a micro-batch still ran after %.0fs; stopping the query cancels it", GRACEFUL_STOP_S)
        return False

    def _stop_query(self, graceful: bool = False) -> None:
        """Stop the query (``graceful``: first :meth:`_close_gate`) and drop its checkpoint."""
        if graceful:
            self._close_gate()
        if self._query is not None:
            try:
                self._query.stop()
            except Exception as exc:  # noqa: BLE001 - stopping a failed query may raise again
                log.debug("stopping query: %s", exc)
            self._query = None
        self._query_partitions, self._writer = (), None
        self._claims, self._targets = {}, None
        if self._checkpoint is not None:
            queries.remove_checkpoint(self.fs, self._checkpoint)
            self._checkpoint = None

    def _on_refused(self, batch_id: int, error: Exception) -> None:
        """Called by the batch writer (query thread) when the table refused a batch."""
        self._refused_batch = batch_id
        self.progress.refused(batch_id, error)

    def _on_batch(self, report: BatchReport) -> None:
        """Report the batch with the lag of its partitions (log end - next offset to read)."""
        self._batch_done = True  # a committed batch ends a failure streak (read by the main thread)
        self._batches_reported += 1
        try:
            latest = self.probe.latest(r.tp for r in report.ranges)
        except Exception:  # noqa: BLE001 - lag is informative only; the batch is committed
            latest = {}
        self.progress.batch(report, {r.tp: max(latest[r.tp] - r.end, 0)
                                     for r in report.ranges if r.tp in latest})

    def _commit_kafka(self, offsets: Mapping[TopicPartition, int], metadata: str) -> bool:
        try:
            self.member.commit_offsets(offsets, metadata)
            return True
        except Exception as exc:  # noqa: BLE001 - Delta already holds the truth; report and go on
            self.progress.note(f"Kafka offset commit refused ({type(exc).__name__}: {exc}); "
                               "the Delta table is authoritative, the next owner resumes from it")
            return False


def _with_int_timestamps(schema: pa.Schema) -> pa.Schema:
    """``schema`` with timestamp fields as int64 (microseconds), to build rows then cast."""
    return pa.schema([pa.field(f.name, pa.int64(), f.nullable) if pa.types.is_timestamp(f.type) else f
                      for f in schema])


def fatal_error(exc: BaseException, verdict: Verdict, what: str, details_dir: str | None = None) -> ScgError:
    """The error that ends the member after ``verdict`` gave up on ``exc``: the project's own
    error as it is, else a named :class:`PermanentFault` or :class:`QueryFailedRepeatedly`. Its
    ``details`` names a file (in ``details_dir``, default the temp directory) holding ``exc``'s
    whole cause chain (the JVM's and the failed batch's tracebacks), for the one line a person sees."""
    if verdict.fault.kind is FaultKind.UNKNOWN:
        error: ScgError = QueryFailedRepeatedly(f"{what} {verdict.unknown_count} times in a row for reasons no "
                                                f"rule recognises; last error: {verdict.fault.detail}")
    elif isinstance(exc, ScgError):
        error = exc
    else:
        error = PermanentFault(verdict.fault, what)
    error.details = error.details or write_failure_details(exc, details_dir)
    return error


def write_failure_details(exc: BaseException, directory: str | None = None) -> str | None:
    """Write ``exc`` with its cause chain to a new file; its path, or None when it cannot be written."""
    import os
    import tempfile

    try:
        directory = directory or os.path.join(tempfile.gettempdir(), "scg-failures")
        os.makedirs(directory, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=time.strftime("failure-%Y%m%d-%H%M%S-"), suffix=".txt", dir=directory)
        with os.fdopen(fd, "w") as out:
            out.write(queries.failure_text(exc))
        return path
    except OSError:
        return None


def group_member_factory(config: PipelineSpec, listener: PipelineRunner, **overrides) -> GroupMember:
    """The real consumer-group member for ``config`` (groupmgr); ``overrides`` set other
    MemberConfig fields (e.g. metadata_max_age_ms)."""
    return GroupMember(member_config_for(config, **overrides), listener)


def member_config_for(config: PipelineSpec, **overrides) -> MemberConfig:
    """The MemberConfig of ``config``'s group; ``overrides`` replace any of its fields."""
    group = config.group
    settings = dict(
        bootstrap_servers=config.kafka.bootstrap_string, group_id=group.id,
        topics=tuple(config.topics), topic_pattern=config.topic_pattern or None, assignors=tuple(group.assignors),
        group_instance_id=group.instance_id, session_timeout_ms=group.session_timeout_ms,
        rebalance_timeout_ms=group.rebalance_timeout_ms, heartbeat_interval_ms=group.heartbeat_interval_ms,
        metadata_max_age_ms=group.metadata_max_age_ms,
        client_kwargs=_without(config.kafka.kafka_python_kwargs(ACCEPTED_CLIENT_SETTINGS), "bootstrap_servers"))
    return MemberConfig(**{**settings, **overrides})


def resolve_topics(config: PipelineSpec, timeout_s: float = 30.0) -> tuple[str, ...]:
    """The configured topics, or the existing topics matching ``topic_pattern`` now, by the same
    rule the running member applies (it re-matches every ``metadata_max_age``); for one-off views
    like describe."""
    if not config.topic_pattern:
        return tuple(config.topics)
    from groupmgr.coordinator_client import CoordinatorClient, KafkaTransport

    member = member_config_for(config)
    transport = KafkaTransport(member.bootstrap_servers, member.client_id, member.client_kwargs)
    client = CoordinatorClient(transport, member.group_id, request_timeout_ms=int(timeout_s * 1000))
    try:
        transport.start(timeout_s)
        return member.subscribed_topics(client.topic_names(client.deadline(timeout_s)))
    finally:
        client.close()


def _without(mapping, *keys) -> dict:
    return {k: v for k, v in mapping.items() if k not in keys}


def at_once(*calls: Callable[[], object]) -> list:
    """Run ``calls`` on threads of their own and return their results in order; the first
    failure (in order) is raised once every call has ended, any other is logged."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    failures = [f.exception() for f in futures if f.exception() is not None]
    for other in failures[1:]:
        log.warning("a call run alongside another that failed failed too: %r", other)
    return [future.result() for future in futures]


def _label(generation: Generation | None) -> str:
    gen_id = getattr(generation, "generation_id", generation)
    return f"gen-{gen_id}-{int(time.time() * 1000)}"
