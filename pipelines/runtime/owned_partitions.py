"""The partitions a member owns, and which of them its query may read.

Before a query reads a partition the member claims it in every table (bumping its owner epochs,
which fences any previous writer), then judges it (:func:`check_partition`) from the table's
offsets and topic IDs, the group's commits and the brokers' view of the log — claim first, so
the table shows anything a previous owner committed before the claim. The tables are made to
agree with the verdicts before the query reads (a recreated topic's reset and new topic ID, a
truncated log's skipped range as a ``data_loss`` dead letter). A partition that cannot run is
*stopped*: the others go on, its condition is committed to the group for ``scg describe``, and it
is checked again with backoff until it can run.
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from groupmgr.core import TopicPartition
from groupmgr.kafka_faults import Backoff
from pipelines.runtime.at_once import at_once
from pipelines.runtime.batch_writer import RoutedTable, TableTargets
from pipelines.runtime.partition_checks import (DATA_LOSS_REASON, PartitionLog,
                                                PartitionVerdict, check_partition, lost_range_value,
                                                stopped_metadata)
from pipelines.runtime.registry_client import RegistryUnavailableError
from pipelines.runtime.start_offsets import choose_start_offset, lowest_recorded
from sinks.txn_table import SchemaIncompatible

log = logging.getLogger("scg.runner")
STOPPED_RECHECK = Backoff(5.0, 60.0)  # how often a stopped partition is checked again
# The transient faults whose waiting partitions are published for scg describe: a batch's own,
# while the table and the group answer (a Kafka or storage fault leaves nothing to publish with,
# a fenced writer's partitions are the group's to show).
PUBLISHED_WAITS = frozenset({SchemaIncompatible.condition, RegistryUnavailableError.condition})


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

    @property
    def runs(self) -> list[PartitionVerdict]:
        return [v for v in self.verdicts if v.runs]

    @property
    def stopped(self) -> list[PartitionVerdict]:
        return [v for v in self.verdicts if not v.runs]


@dataclass(frozen=True)
class StoppedPartition:
    """An owned partition the query leaves out, why, since when, and when it is checked again."""

    verdict: PartitionVerdict
    since: float
    next_check: float
    checks: int


class OwnedPartitions:
    """The member's assignment and its stopped partitions; claims and checks partitions for the
    query. ``tables`` has ``table``, ``routed`` and ``dead_table`` (TxnDeltaTable: the output
    table, further output tables of a routing pipeline, the dead-letter table); ``committed(partitions)``
    reads the group's commits, ``describe(partitions)`` the brokers' view of the logs
    (BrokerProbe.describe), ``commit(offsets, metadata)`` commits to the group. Not thread safe:
    the runner calls it under its lock."""

    def __init__(self, tables, source, committed: Callable, describe: Callable,
                 commit: Callable[[Mapping[TopicPartition, int], str], bool],
                 note: Callable[[str], None], clock: Callable[[], float],
                 wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self._tables, self._source = tables, source
        self._committed, self._describe, self._commit = committed, describe, commit
        self._note, self._clock, self._wall_clock_ms = note, clock, wall_clock_ms
        self.partitions: tuple[TopicPartition, ...] = ()
        self.stopped: dict[TopicPartition, StoppedPartition] = {}
        self._claimed: dict[str, dict[TopicPartition, int]] = {}  # table path -> this member's latest epochs
        self._starts: dict[TopicPartition, int] = {}  # starts that claim no record the tables lack

    # -- the assignment -------------------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """The member's whole assignment now; stopped partitions it no longer holds are forgotten."""
        self.partitions = tuple(sorted(partitions))
        self.stopped = {tp: s for tp, s in self.stopped.items() if tp in self.partitions}
        self._starts = {tp: offset for tp, offset in self._starts.items() if tp in self.partitions}

    def revoke(self, partitions: Iterable[TopicPartition]) -> None:
        gone = set(partitions)
        self.partitions = tuple(tp for tp in self.partitions if tp not in gone)
        self._starts = {tp: offset for tp, offset in self._starts.items() if tp not in gone}

    def clear(self) -> None:
        self.partitions = ()
        self._starts = {}

    # -- claims and checks ----------------------------------------------------------------------
    def claim(self, partitions) -> TableTargets:
        """Claim ``partitions`` in every output table and the dead-letter table
        (:meth:`TxnDeltaTable.claim`), all at once: one commit per table, each ordered only against
        its own table. The tables with this member's new epochs of ``partitions``."""
        outputs, dead = self._output_tables(), self._tables.dead_table
        *epochs, dead_epochs = at_once(*(functools.partial(t.claim, partitions) for t in (*outputs, dead)))
        for table, claimed in zip((*outputs, dead), (*epochs, dead_epochs)):
            self._claimed.setdefault(table.path, {}).update(claimed)
        return TableTargets(outputs[0], dead, epochs[0], dead_epochs,
                            tuple(RoutedTable(t, e) for t, e in zip(outputs[1:], epochs[1:])))

    def _output_tables(self) -> tuple:
        """The output tables, in route order (one unless the pipeline routes records to several)."""
        return (self._tables.table, *self._tables.routed)

    def recorded(self, partitions) -> tuple[dict[TopicPartition, int | None], dict[TopicPartition, int | None]]:
        """Per partition, the offset the output tables hold it to (with several, the lowest any of
        them holds: :func:`lowest_recorded`) and the topic ID recorded with it, by the first table
        that holds that offset."""
        partitions = list(partitions)
        held = at_once(*(functools.partial(t.recorded, partitions) for t in self._output_tables()))
        offsets = lowest_recorded(offsets for offsets, _ in held)
        ids = {tp: next((i.get(tp) for o, i in held if o.get(tp) == offsets.get(tp)), None) for tp in partitions}
        return {tp: offsets.get(tp) for tp in partitions}, ids

    def claimed_since(self, refusal) -> bool:
        """Whether this member has claimed the partition a batch was refused for
        (``sinks.txn_table.FencedWriterError``) in that table at or after the claim that refused
        it: the batch was written under an older claim of this member's (a stale writer resuming
        after the group gave its partitions back to it), and the partition is its own again."""
        latest = self._claimed.get(getattr(refusal, "table", None), {}).get(getattr(refusal, "tp", None))
        recorded = getattr(refusal, "recorded", None)
        return latest is not None and recorded is not None and latest >= recorded

    def check(self, partitions) -> PartitionChecks:
        """Each partition's verdict (:func:`check_partition`) from the table's offsets and topic
        IDs, the group's commits and the brokers' view of the logs (the three asked at once;
        after the claim, so the table shows anything a previous owner committed before it)."""
        (delta, recorded_ids), committed, probe = at_once(
            lambda: self.recorded(partitions),
            lambda: {tp: getattr(om, "offset", om) for tp, om in self._committed(partitions).items()},
            lambda: self._describe(partitions))
        verdicts, origins = [], {}
        for tp in partitions:
            log_ = probe.logs.get(tp)
            start = choose_start_offset(tp, delta, committed, self._source.starting_offsets,
                                        getattr(log_, "earliest", None), getattr(log_, "latest", None))
            origins[tp] = start.origin if start else ""
            verdicts.append(check_partition(tp, start.offset if start else None, recorded_ids.get(tp), log_,
                                            probe.errors.get(tp), self._source.on_data_loss, origins[tp]))
        return PartitionChecks(verdicts, delta, recorded_ids, probe.logs, origins)

    def apply(self, targets: TableTargets, checks: PartitionChecks) -> None:
        """Make the tables agree with the verdicts of the partitions that run, before the query
        reads them: resets (a recreated topic, a truncated log) and new topic IDs in one commit per
        table, then each skipped range as a ``data_loss`` marker row in the dead-letter table,
        committed in both tables like a batch (idempotent: a retry after a crash finds the range
        recorded and writes nothing). Remembers where each running partition starts when that
        start claims no record the tables lack: the group's own commit, or the log's start."""
        runs = checks.runs
        self._starts.update({v.tp: v.offset for v in runs if checks.origin(v) in ("kafka", "earliest")})
        resets = {v.tp: v.reset_to for v in runs if v.reset_to is not None}
        ids = {v.tp: checks.logs[v.tp].topic_id for v in runs
               if checks.recorded_ids.get(v.tp) != checks.logs[v.tp].topic_id}
        events = [v for v in runs if v.events]
        info = {"scg.event": ",".join(sorted({e for v in events for e in v.events})),
                "scg.detail": " | ".join(v.detail for v in events)[:4000]} if events else None
        if resets:
            targets.dead_table.record_partitions(targets.dead_epochs, resets, {}, info)
        for table, epochs in targets.outputs:
            table.record_partitions(epochs, resets, ids, info)
        for v in events:
            self._note(f"{v.tp.topic}-{v.tp.partition}: [{', '.join(v.events)}] {v.detail}")
        lost = [v.lost for v in runs if v.lost is not None]
        if lost:
            targets.dead_table.commit(self._lost_markers(lost, targets.dead_table.schema), lost, targets.dead_epochs)
            for table, epochs in targets.outputs:
                table.commit(table.schema.empty_table(), lost, epochs)

    def _lost_markers(self, lost, dead_schema: pa.Schema) -> pa.Table:
        """One dead-letter row per skipped range, naming it (``data_loss``)."""
        now_ms = self._wall_clock_ms()
        markers = [{"topic": r.topic, "partition": r.partition, "offset": r.start, "timestamp": now_ms * 1000,
                    "key": None, "value": lost_range_value(r, now_ms), "reason": DATA_LOSS_REASON} for r in lost]
        return pa.Table.from_pylist([{f.name: m.get(f.name) for f in dead_schema} for m in markers],
                                    schema=_with_int_timestamps(dead_schema)).cast(dead_schema)

    # -- stopped partitions ---------------------------------------------------------------------
    def note_stopped(self, checks: PartitionChecks, others: Iterable[PartitionVerdict] = ()) -> None:
        """Record which owned partitions are stopped now (``checks``' stopped verdicts and
        ``others``): one progress line when a partition stops (or its condition changes), a group
        commit of the table's offset with ``scg:stopped:<condition>`` metadata for ``scg
        describe``; partitions no longer stopped are announced as resumed."""
        now = self._clock()
        stopped = {v.tp: v for v in [*checks.stopped, *others]}
        for tp in [tp for tp in self.stopped if tp not in stopped]:
            self._note(f"{tp.topic}-{tp.partition} resumes (was stopped: {self.stopped.pop(tp).verdict.condition})")
        for tp, verdict in stopped.items():
            previous = self.stopped.get(tp)
            attempt = previous.checks + 1 if previous else 1
            self.stopped[tp] = StoppedPartition(verdict, previous.since if previous else now,
                                                now + STOPPED_RECHECK.delay(attempt), attempt)
            if previous is None or previous.verdict.condition != verdict.condition:
                self._note(f"{tp.topic}-{tp.partition} stopped: [{verdict.condition}] {verdict.detail}; "
                           "the other partitions go on; checked again with backoff")
                self._publish_stopped(tp, verdict, checks.recorded_offsets.get(tp))

    def stopped_except(self, partitions: Iterable[TopicPartition]) -> list[PartitionVerdict]:
        """The verdicts of the stopped partitions not among ``partitions``."""
        skip = set(partitions)
        return [s.verdict for tp, s in self.stopped.items() if tp not in skip]

    def recheck_due(self) -> bool:
        """Check the stopped partitions whose backoff is over; True when one of them can run again
        (the caller restarts the query over the owned partitions, whose start checks them all)."""
        now = self._clock()
        due = [tp for tp, s in self.stopped.items() if s.next_check <= now and tp in self.partitions]
        if not due:
            return False
        try:
            checks = self.check(tuple(due))
        except Exception as exc:  # noqa: BLE001 - still stopped; checked again later
            log.debug("checking stopped partitions failed: %s", exc)
            checks = PartitionChecks([s.verdict for tp, s in self.stopped.items() if tp in due])
        if checks.runs:
            return True
        self.note_stopped(checks, self.stopped_except(due))
        return False

    def publish_waiting(self, condition: str, detail: str) -> None:
        """The owned partitions that are not stopped wait on a transient fault of
        :data:`PUBLISHED_WAITS` (a batch retried with backoff): commit each one's table offset with
        metadata naming ``condition`` and ``detail``, for ``scg describe`` (the next batch's commit
        replaces it). A partition the tables hold nothing of yet is committed at the offset its query
        started from when that was the group's commit or the log's start, so the commit never claims
        a record the tables lack (a start at the log's end, ``starting_offsets: latest``, is not
        published). Other faults publish nothing. Best effort: when the table or the group cannot
        be reached now, nothing is published."""
        waiting = [tp for tp in self.partitions if tp not in self.stopped]
        if condition not in PUBLISHED_WAITS or not waiting:
            return
        try:
            recorded, _ = self.recorded(waiting)
            offsets = {tp: offset if offset is not None else self._starts.get(tp) for tp, offset in recorded.items()}
            offsets = {tp: offset for tp, offset in offsets.items() if offset is not None}
            if offsets:
                self._commit(offsets, stopped_metadata(condition, detail))
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.debug("publishing what the partitions wait on failed: %s", exc)

    def _publish_stopped(self, tp: TopicPartition, verdict: PartitionVerdict, offset: int | None) -> None:
        """Commit the table's offset of ``tp`` (never more than the table holds) with metadata
        naming why it is stopped; best effort."""
        if offset is not None:
            self._commit({tp: offset}, stopped_metadata(verdict.condition, verdict.detail))


def _with_int_timestamps(schema: pa.Schema) -> pa.Schema:
    """``schema`` with timestamp fields as int64 (microseconds), to build rows then cast."""
    return pa.schema([pa.field(f.name, pa.int64(), f.nullable) if pa.types.is_timestamp(f.type) else f
                      for f in schema])
