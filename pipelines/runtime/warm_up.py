"""Warming a member's batch path up before it joins its group, so the first batch after an
assignment pays less of Spark's first-use cost (the partitions a new member takes over wait for
it). Nothing is written or committed, no offset either; best effort throughout: a failure here is
the query's to report when it meets it for real.

* reader ``spark-kafka`` (:class:`SourceWarmUp`): a short query through Spark's Kafka source over
  the last record of the first topic's partition 0, its batch through the batch path; with nothing
  to read, one made-up record through the batch path;
* reader ``scg-kafka`` (:class:`InQueryWarmUp`): the member's own query (started over no
  partition) rehearses batches over that record, for as many batches as :func:`warm_up_rounds`
  says — none when nobody else reads the partitions it would take, one when others read them but
  somebody waits for this member (:func:`who_waits`), else until its batches stop getting faster
  within ``source.warm_up_limit``.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from groupmgr.core import TopicPartition
from groupmgr.member_config import subscribed_topics
from pipelines.runtime import streaming_query as queries
from pipelines.runtime.batch_writer import TableTargets, rehearse_batch, unclaimed_targets, warm_up, warm_up_batch
from pipelines.runtime.broker_probe import GROUP_PATIENCE_S
from pipelines.runtime.warm_up_rounds import WarmUpRounds

log = logging.getLogger("scg.runner")
WARM_UP_QUERY_S = 60.0     # the longest the warm-up query may run before it is stopped
POLL_S = 0.5


@dataclass(frozen=True)
class WarmUpContext:
    """What a warm-up works with: the session, the pipeline, its tables (``PipelineTables``), the
    brokers (``BrokerProbe``), the member's committed offsets (``group_offsets(timeout_s)``) and
    where it says what it did."""

    spark: object
    config: object
    tables: object
    probe: object
    group_offsets: Callable
    note: Callable[[str], None]
    fs: object = None
    clock: Callable[[], float] = time.monotonic

    def empty_targets(self) -> TableTargets:
        return unclaimed_targets(self.tables)

    def last_record(self) -> tuple[TopicPartition, int] | None:
        """The last record of partition 0 of the first configured topic, as (partition, offset);
        None when there is none (a pattern subscription, an empty log) or the brokers could not say."""
        if not self.config.topics:
            return None
        tp = TopicPartition(self.config.topics[0], 0)
        try:
            log_ = self.probe.describe([tp]).logs.get(tp)
        except Exception as exc:  # noqa: BLE001 - advisory: the real query reports its own failure
            log.debug("finding a record to warm up on failed: %s", exc)
            return None
        if log_ is None or log_.latest <= log_.earliest:
            return None
        return tp, log_.latest - 1

    def made_up(self) -> bool:
        """One made-up record through the batch path (:func:`warm_up`); False if that failed."""
        try:
            warm_up(self.spark, self.tables.record_format, self.config.transform, self.empty_targets(),
                    self.tables.routing, self.tables.changes)
            return True
        except Exception as exc:  # noqa: BLE001 - advisory: the real batch reports its own failure
            log.debug("warming up the batch path failed: %s", exc)
            return False

    def warmed_up(self, started: float, read: str, where: str = "") -> None:
        how = f"read {read} through reader {self.config.source.reader}{where}" if read else "one made-up record"
        self.note(f"batch path warmed up in {self.clock() - started:.1f}s ({how}; nothing written)")


@dataclass(frozen=True)
class Waiting:
    """Who waits for this member to join: ``why`` (None: nobody, the others read on), how many
    ``members`` its group has, and whether the partitions it would take are ``unread`` meanwhile
    (nobody else reads them)."""

    why: str | None
    members: int
    unread: bool = False


def who_waits(ctx: WarmUpContext, sleep: Callable[[float], object] = time.sleep,
              patience_s: float = GROUP_PATIENCE_S) -> Waiting:
    """Whether this member should join now rather than rehearse on. Someone waits when nobody
    else reads the partitions it would take (``unread``): a group with no member, or one where
    this member's ``group.instance.id`` is still a member (a static member restarting within its
    session timeout: its partitions wait for it); and when the group is more records behind than
    its members read in one batch each (``max_offsets_per_trigger``), or its backlog is unknown
    (no committed offset yet: members started together over the logs share them at once). Also
    after ``source.warm_up_limit: 0s``, a group the brokers did not describe, or a check that
    failed. ``sleep``/``patience_s``: how the describe waits out a loading coordinator."""
    config, group = ctx.config, ctx.config.group
    try:
        members = ctx.probe.group_members(group.id, patience_s=patience_s, sleep=sleep)
        if members is None:
            return Waiting("the brokers did not describe the group", 0)
        if not members:
            return Waiting("the group has no member", 0, unread=True)
        if group.instance_id is not None and group.instance_id in members:
            return Waiting(f"this member's instance id {group.instance_id!r} still holds its partitions", len(members),
                           unread=True)
        if config.source.warm_up_limit_ms == 0:
            return Waiting("source.warm_up_limit is 0s", len(members))
        offsets = ctx.group_offsets(ctx.probe.timeout_s)
        wanted = set(subscribed_topics(tuple(config.topics), config.topic_pattern or None,
                                       {tp.topic for tp in offsets}))  # a pattern: the topics it matches
        committed = {tp: c.offset for tp, c in offsets.items() if tp.topic in wanted}
        if not committed:
            return Waiting("the group's backlog is unknown (no committed offset yet)", len(members))
        backlog = ctx.probe.backlog(committed)
        per_round = len(members) * config.source.max_offsets_per_trigger
        if backlog > per_round:
            return Waiting(f"the group is {backlog:,} records behind, more than its {len(members)} member(s) "
                           f"read in a batch each ({per_round:,})", len(members))
        return Waiting(None, len(members))
    except Exception as exc:  # noqa: BLE001 - advisory: joining at once is always safe
        log.debug("checking group %s before joining: %r", group.id, exc)
        return Waiting(f"the group could not be checked ({type(exc).__name__})", 0)


def warm_up_rounds(ctx: WarmUpContext,
                   sleep: Callable[[float], object] = time.sleep) -> tuple[WarmUpRounds | None, str]:
    """How long to rehearse, and why (:func:`who_waits`). None when nobody else reads the
    partitions this member would take: they wait for it either way, and a rehearsed batch
    costs what it saves the first real one (a fresh driver's first use of the batch path).
    One batch when others read them but someone waits for this member. Otherwise only its
    own join waits, and it rehearses until its batches stop getting faster, the batches
    starting within ``source.warm_up_limit`` after the first ended."""
    trigger_s = (ctx.config.trigger.processing_time_ms or 0) / 1000
    waiting = who_waits(ctx, sleep)
    if waiting.unread:
        return None, f"{waiting.why}: nobody reads its partitions meanwhile"
    if waiting.why is not None:
        return WarmUpRounds(trigger_s=trigger_s, max_batches=1), f"{waiting.why}: one batch"
    members = waiting.members
    limit_s = ctx.config.source.warm_up_limit_ms / 1000
    return (WarmUpRounds(trigger_s=trigger_s, max_seconds=limit_s),
            f"the group's {members} member(s) read its partitions meanwhile: until the batches stop "
            f"getting faster, starting within {limit_s:g}s")


class SourceWarmUp:
    """Reader ``spark-kafka``: one query like the member's own (Spark's Kafka source, the same
    source options, a fresh checkpoint removed after) over the last record of partition 0 of the
    first configured topic, until its first micro-batch has gone through :func:`warm_up_batch`
    (at most :data:`WARM_UP_QUERY_S`); with nothing to read, one made-up record."""

    def __init__(self, ctx: WarmUpContext):
        self.ctx = ctx

    def run(self) -> None:
        started = self.ctx.clock()
        try:
            read = self.through_the_source()
        except Exception as exc:  # noqa: BLE001 - advisory: the real query reports its own failure
            log.debug("warming up through the Kafka source failed: %s", exc)
            read = ""
        if read or self.ctx.made_up():
            self.ctx.warmed_up(started, read)

    def through_the_source(self) -> str:
        """The partition the warm-up query read (e.g. ``orders-0@41``), or "" when there was
        nothing to read or no batch ran."""
        ctx = self.ctx
        record = ctx.last_record()
        if record is None:
            return ""
        tp, start = record
        done, targets = threading.Event(), ctx.empty_targets()

        def batch(kafka_rows, batch_id: int) -> None:
            warm_up_batch(kafka_rows, ctx.tables.record_format, ctx.config.transform, targets, ctx.tables.routing,
                          ctx.tables.changes)
            done.set()

        options = {k: v for k, v in ctx.tables.source_options.items()
                   if k not in ("minOffsetsPerTrigger", "maxTriggerDelay")}  # one record: no batch to delay
        checkpoint = queries.new_checkpoint(ctx.config.checkpoint_root, "warm-up")
        try:
            query = queries.start_query(ctx.spark, options, {tp: start}, batch, checkpoint,
                                        {"availableNow": True}, f"{ctx.config.name}-warm-up")
            try:
                deadline = ctx.clock() + WARM_UP_QUERY_S
                while not done.wait(POLL_S) and query.isActive and ctx.clock() < deadline:
                    pass
            finally:
                query.stop()
        finally:
            queries.remove_checkpoint(ctx.fs, checkpoint)
        return f"{tp.topic}-{tp.partition}@{start}" if done.is_set() else ""


class InQueryWarmUp:
    """Reader ``scg-kafka``, before joining, with the member's own query started over no
    partition: claim the last record of the first topic's partition 0 for the query alone and
    hand the batches that read it to the writer's batch path (:meth:`BatchWriter.rehearse`:
    nothing written or committed), claiming the then last record again with a new serial after
    each one, for as many batches as :func:`warm_up_rounds` says; then drop the claim and write
    again. The planner, the executors' Python readers, the batch path and the driver's JIT are
    then warm when the first real claim comes; one query start, not two. When nobody else reads
    the partitions the member would take it rehearses nothing and returns at once, the query's
    first trigger perhaps still starting (it may read the first claims). ``query`` is the
    following query (``claim_alone(tp, offset)``, ``release(partitions)``, ``writer``,
    ``query``); ``stop`` ends the warm-up after the batch in flight."""

    def __init__(self, ctx: WarmUpContext, query, lock):
        self.ctx, self.query, self.lock = ctx, query, lock

    def run(self, stop: threading.Event) -> None:
        ctx, writer = self.ctx, self.query.writer
        started = ctx.clock()
        rounds, why = warm_up_rounds(ctx, stop.wait)
        if rounds is None:  # the query's first trigger, still starting, may read its first claims
            ctx.note(f"joining without a rehearsal ({why})")
            return
        record = ctx.last_record()
        if record is None or writer is None:
            if ctx.made_up():
                ctx.warmed_up(started, "")
            self._query_ready(started)
            return
        tp, first_offset = record
        rehearsed: queue.SimpleQueue[tuple[float, bool]] = queue.SimpleQueue()
        ctx.note(f"warming the batch path up before joining ({why}): rehearsing batches over "
                 f"{tp.topic}-{tp.partition} (nothing written)")
        writer.rehearse(self._rehearsal(rehearsed))
        try:
            while record is not None and rounds.more(ctx.clock()) and not stop.is_set():
                with self.lock:
                    self.query.claim_alone(tp, record[1])
                outcome = self._next(rehearsed, stop)
                if outcome is None or not outcome[1]:
                    break
                rounds.add(outcome[0], ctx.clock())
                if rounds.more(ctx.clock()):
                    waiting = who_waits(ctx, stop.wait, patience_s=0.0).why
                    if waiting is not None:  # e.g. a crashed member's session ended: the group is empty now
                        ctx.note(f"joining after {len(rounds.durations)} rehearsed batches: {waiting}")
                        break
                record = ctx.last_record()
            with self.lock:
                self.query.release([tp])
        finally:
            writer.rehearse(None)
        if rounds.durations:
            ctx.warmed_up(started, f"{tp.topic}-{tp.partition}@{first_offset}", f" in the member's query, "
                                                                             f"{rounds.summary()}")

    def _query_ready(self, started: float) -> None:
        """Wait until the query has planned its first trigger (at most :data:`WARM_UP_QUERY_S`)."""
        if queries.wait_until_planned(self.query.query, WARM_UP_QUERY_S):
            self.ctx.note(f"query ready in {self.ctx.clock() - started:.1f}s (its first trigger planned)")

    def _rehearsal(self, rehearsed: queue.SimpleQueue):
        ctx, targets = self.ctx, self.ctx.empty_targets()

        def rehearsal(kafka_rows, ranges) -> None:  # query thread
            if not any(r.end > r.start for r in ranges):
                return
            began, ok = ctx.clock(), True
            try:
                rehearse_batch(self.query.writer.prepare(kafka_rows, ranges), targets)
            except Exception as exc:  # noqa: BLE001 - advisory: the real batch reports its own failure
                log.debug("warming up the batch path failed: %s", exc)
                ok = False
            rehearsed.put((ctx.clock() - began, ok))
        return rehearsal

    def _next(self, rehearsed: queue.SimpleQueue, stop: threading.Event) -> tuple[float, bool] | None:
        """The next rehearsed batch's (seconds, succeeded), waiting at most :data:`WARM_UP_QUERY_S`
        while the query runs and ``stop`` is not set; None when none came."""
        deadline = self.ctx.clock() + WARM_UP_QUERY_S
        while self.ctx.clock() < deadline and self.query.query is not None and self.query.query.isActive:
            try:
                return rehearsed.get(timeout=POLL_S)
            except queue.Empty:
                if stop.is_set():
                    return None
        return None
