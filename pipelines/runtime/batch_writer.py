"""The ``foreachBatch`` function of one member's query: one micro-batch → Delta, then Kafka.

Commit order (docs/DESIGN.md invariants 3, 4, 6, 8), per micro-batch:

1. the planned offset ranges are read from the query's checkpoint offset log (not from the rows),
   less those of partitions given up since the batch was planned (:meth:`BatchGate.allow`: their
   records are left out, their next owner reads them from the tables); once the rows are read,
   ``check_sources`` confirms the source is the one the query started on (no topic recreated,
   no log gone back), else the batch fails before any commit;
2. dead letters are committed to the dead-letter table (exactly once, per-partition txn);
3. good rows are committed to the output table in ONE Delta commit with per-partition txn versions
   (see :class:`sinks.txn_table.TxnDeltaTable`); a fenced writer raises and writes nothing. With
   several output tables (:mod:`pipelines.runtime.routing`) each takes the rows its route takes,
   in one commit of its own, table after table; a batch stopped between two of them is written
   again from the lowest offset any table holds, and each table skips what it holds;
4. only then are the end offsets committed to the Kafka group with the member's generation.

Every record lands in exactly one of the two tables (invariant 6), also when a batch is retried
after its dead-letter commit and the classification settings changed meanwhile (a new
``max_value_bytes`` or schema): the dead-letter table is committed first, so for the offsets it
already held before this batch (its commit replayed them) it has decided. For those partitions'
ranges the output rows are the records the dead-letter table does not hold, whatever the current
settings say (:class:`DeadLetterDecisions`).

Rows never pass through the driver: for each table the sink decides on a snapshot what to write,
Spark's executors write the Parquet files (``mapInArrow`` → :class:`sinks.data_files.DataFileWriter`)
and return their metadata, and the driver commits the files' ``add`` actions with the transactions.

One pass or two. Without a transform, and when the dead-letter table holds none of the batch's
records yet, both tables' files are written by ONE Spark job that reads the batch once
(:func:`records.split_rows`); each table's commit then checks that its plan is still the one the
files were written for (else those files stay unreferenced and the two passes below decide
again). Otherwise the batch is classified once and cached, the dead letters are written and
committed, then the output rows (through the transform, and following the dead-letter table's
decisions) are written from the cache and committed.
Runs on the Spark driver, in the query's thread; not shared between queries.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

import pyarrow as pa

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.changes import ChangeSpec, change_rows, classified_changes, last_changes
from pipelines.runtime.records import (DEAD_LETTER, OUTPUT, REASON, RecordFormat, classify,
                                       dead_letters, good_rows, kafka_row_ddl, split_rows)
from pipelines.runtime.routing import Routing, route_column, routed
from pipelines.runtime.schema_follower import BatchSchema
from sinks.data_files import METADATA_DDL, DataFileWriter, WrittenFiles, metadata_batch
from sinks.txn_table import CommitPlan, CommitResult, FencedWriterError, TxnDeltaTable
from sinks.upsert_table import MERGED, UpsertDeltaTable


@dataclass(frozen=True)
class BatchHooks:
    """Points where a test may act on a batch in flight (fault injection is passed in, never read
    from the environment). Each hook gets the batch id and its planned ranges; the defaults do
    nothing. ``before_commit`` runs after the rows are prepared and before the first Delta commit;
    ``files_written`` (also given what was written) each time the executors have written a table's
    files and before the driver commits them; ``table_committed`` (also given the table's path)
    after each table's Delta commit; ``after_delta_commit`` after every Delta commit and before
    the Kafka offset commit."""

    before_commit: Callable[[int, tuple[OffsetRange, ...]], None] = lambda batch_id, ranges: None
    files_written: Callable[[int, tuple[OffsetRange, ...], WrittenFiles], None] = \
        lambda batch_id, ranges, written: None
    after_delta_commit: Callable[[int, tuple[OffsetRange, ...]], None] = lambda batch_id, ranges: None
    table_committed: Callable[[int, tuple[OffsetRange, ...], str], None] = lambda batch_id, ranges, path: None


NO_HOOKS = BatchHooks()
log = logging.getLogger(__name__)


class BatchGate:
    """The batch boundary of one query: :meth:`close` waits for a micro-batch that is writing to
    finish, and from then on every micro-batch Spark starts writes and commits nothing (the query
    is about to be stopped; the next owner resumes from the tables, so nothing is lost).
    :meth:`released` waits, without closing, until the query has moved past some partitions
    (an ``scg-kafka`` query whose assignment dropped them); :meth:`allow` names the partitions a
    batch may still write, so a batch planned before such a drop but beginning after it writes
    without them and is not waited for.

    Spark runs a late micro-batch right after the previous one when batches take longer than the
    trigger interval, so "no trigger active" may never be observed; the gate needs no such moment.
    Thread safety: :meth:`enter`/:meth:`exit` on the query thread, the others on any thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._writing = False
        self._closed = False
        self._entered = 0                                    # batches that reached the gate
        self._ended = 0                                      # ... and ended (exit)
        self._writes: frozenset[TopicPartition] = frozenset()  # ... what the last one may write
        self._allowed: frozenset[TopicPartition] | None = None   # what a batch may write (None: any)

    def allow(self, partitions: Iterable[TopicPartition] | None) -> None:
        """From the next :meth:`enter` on, a batch writes only ``partitions`` (None: any). An
        ``scg-kafka`` runner calls it with its claims each time they change, *before* the
        source's planner can see the change: a partition claimed anew is allowed before any
        batch plans it, and one given up is left out of every batch that begins after this."""
        with self._cond:
            self._allowed = None if partitions is None else frozenset(partitions)

    def enter(self, partitions: Iterable[TopicPartition] = ()) -> frozenset[TopicPartition] | None:
        """Query thread, before a batch over ``partitions`` writes: the ones it may write (those
        :meth:`allow` allows; the others were given up after the batch was planned: it must write
        and commit nothing of them, their next owner reads them from the tables), or None once
        closed (the batch must write nothing)."""
        with self._cond:
            self._writing = not self._closed
            self._entered += 1
            planned = frozenset(partitions)
            self._writes = planned if self._allowed is None else planned & self._allowed
            self._cond.notify_all()
            return self._writes if self._writing else None

    def exit(self) -> None:
        """Query thread, after the batch ended (committed, refused or failed)."""
        with self._cond:
            self._writing = False
            self._ended += 1
            self._cond.notify_all()

    @property
    def writing(self) -> bool:
        """A batch is between :meth:`enter` and :meth:`exit` (its ``foreachBatch`` runs)."""
        with self._cond:
            return self._writing

    def close(self, bound_s: float) -> bool:
        """Let no further batch write; wait at most ``bound_s`` for a writing one to end. True when
        none is writing any more (False: the bound passed, a stop will cancel the batch)."""
        with self._cond:
            self._closed = True
            return self._cond.wait_for(lambda: not self._writing, bound_s)

    def mark(self) -> GateMark:
        """A point in the query's sequence of batches, for :meth:`released`."""
        with self._cond:
            return GateMark(self._entered, self._ended)

    def released(self, partitions: Iterable[TopicPartition], mark: GateMark, bound_s: float) -> bool:
        """Wait at most ``bound_s`` until every batch that may write ``partitions`` has ended
        (committed, refused or failed), given that the source no longer plans them and the gate
        no longer allows them: the caller took them out before taking ``mark``. True then.

        Batches run one after the other and each is planned after the previous one ended, so
        only batches planned before ``mark`` may read them: the one writing at ``mark``, or one
        being planned then. That is the case once a batch ended after ``mark`` (the batches
        after it are planned after the caller took the partitions out), or once a batch that
        began after ``mark`` writes none of them (planned without them, or planned with them
        but no longer allowed to write them: :meth:`allow`); whichever comes first. A member
        revoking partitions in the middle of a batch is thus released when that batch ends, not
        when the next one begins, and at once when that batch was only being planned. A closed
        gate with no batch writing is released too: no batch of this query writes any more."""
        gone = frozenset(partitions)
        with self._cond:
            return self._cond.wait_for(lambda: self._ended > mark.ended or (self._closed and not self._writing)
                                       or (self._entered > mark.entered and not (self._writes & gone)), bound_s)


@dataclass(frozen=True)
class GateMark:
    """A point in a query's sequence of batches (:meth:`BatchGate.mark`): how many batches had
    reached the gate, and how many had ended."""

    entered: int
    ended: int


@dataclass(frozen=True)
class DeadLetterDecisions:
    """The dead-letter table's decision over ``ranges`` (ranges it had already committed before
    this batch): ``coordinates`` (``topic, partition, offset``) are dead letters; every other
    record in ``ranges`` belongs in the output table."""

    ranges: tuple[OffsetRange, ...]
    coordinates: pa.Table


@dataclass(frozen=True)
class BatchReport:
    """What one committed micro-batch did; offsets in ``ranges`` are next-offset-to-read."""

    batch_id: int
    ranges: tuple[OffsetRange, ...]
    rows_written: int
    rows_skipped: int
    dead_letters: int
    delta_version: int | None
    duration_s: float
    commit_s: float
    kafka_committed: bool
    dead_letter_reasons: Mapping[str, int] = field(default_factory=dict)  # dead letters per reason
    merged: Mapping[str, int] = field(default_factory=dict)  # an upsert table's rows inserted, updated, deleted


class PlannedRanges(Protocol):
    """Where a batch's planned offset ranges are read (:mod:`pipelines.runtime.checkpoint_log`)."""

    def ranges(self, batch_id: int) -> tuple[OffsetRange, ...]: ...


class BatchRows(Protocol):
    """The rows of one micro-batch for one table, able to write themselves as data files."""

    def write(self, writer: DataFileWriter, keep_from: Mapping[TopicPartition, int]) -> WrittenFiles: ...


class ChangeRows(Protocol):
    """The change events of one micro-batch for an upsert table (:mod:`pipelines.runtime.changes`)."""

    def changes(self, key: tuple[str, ...], keep_from: Mapping[TopicPartition, int]) -> pa.Table:
        """Each key's last change at or above ``keep_from``: the table's columns and the delete flag."""


@dataclass(frozen=True)
class SparkRows:
    """Rows of a Spark DataFrame, written by the executors that hold them; the driver receives
    only the files' metadata (one small row per file). Change rows are collapsed to each key's
    last change on the executors; the driver receives those (one row per key changed)."""

    df: object  # pyspark.sql.DataFrame
    ordered: bool = False  # change rows carry an order value (sink.order_by)

    def write(self, writer: DataFileWriter, keep_from: Mapping[TopicPartition, int]) -> WrittenFiles:
        task = functools.partial(_write_task, writer, dict(keep_from))
        metadata = self.df.mapInArrow(task, METADATA_DDL).collect()
        return WrittenFiles.from_metadata(row.asDict() for row in metadata)

    def changes(self, key: tuple[str, ...], keep_from: Mapping[TopicPartition, int]) -> pa.Table:
        return last_changes(self.df, key, keep_from, ordered=self.ordered).toArrow()


def _write_task(writer: DataFileWriter, keep_from, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One Spark task (an executor's Python worker): write its rows, yield their metadata."""
    return writer.write_metadata(batches, keep_from)


@dataclass(frozen=True)
class ArrowRows:
    """Rows already in this process (tests and small tools), written by this process."""

    table: pa.Table

    def write(self, writer: DataFileWriter, keep_from: Mapping[TopicPartition, int]) -> WrittenFiles:
        return writer.write(self.table.to_batches(), keep_from)


@dataclass(frozen=True)
class PlannedWrite:
    """A table's file writer and the plan's ``keep_from`` (picklable: shipped to the executors)."""

    writer: DataFileWriter
    keep_from: Mapping[TopicPartition, int]


def _write_both_task(dead: PlannedWrite, output: PlannedWrite,
                     batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One Spark task over :func:`records.split_rows` batches: each record's row goes to the file
    set of the table whose struct is set; yields both tables' file metadata, named by table."""
    def rows_by_table() -> Iterator[tuple[str, pa.RecordBatch]]:
        for batch in batches:
            for name in (DEAD_LETTER, OUTPUT):
                rows = batch.column(name)
                yield name, pa.RecordBatch.from_struct_array(rows.filter(rows.is_valid()))

    return write_both_tables(dead, output, rows_by_table())


def write_both_tables(dead: PlannedWrite, output: PlannedWrite,
                      rows: Iterable[tuple[str, pa.RecordBatch | pa.Table]]) -> Iterator[pa.RecordBatch]:
    """One task's files of both tables: each ``(table, rows)`` of ``rows`` (``table`` is
    ``records.DEAD_LETTER`` or ``records.OUTPUT``) goes to that table's file set; yields both
    tables' file metadata, named by table. On any error every file is abandoned (never committed)."""
    files = {DEAD_LETTER: dead.writer.open(dead.keep_from), OUTPUT: output.writer.open(output.keep_from)}
    try:
        for name, part in rows:
            if part.num_rows:
                files[name].add(part)
        written = {name: file_set.finish() for name, file_set in files.items()}
    except BaseException:
        for file_set in files.values():
            file_set.abandon()
        raise
    for name, table_files in written.items():
        yield metadata_batch(table_files, name)


WARM_UP_TOPIC = "scg-warm-up"


def warm_up(spark, fmt: RecordFormat, transform: str | None, tables: TableTargets,
            routing: Routing | None = None, changes: ChangeSpec | None = None) -> None:
    """Run a micro-batch's path once over one made-up record, before the member joins its group:
    Spark generates the batch's code and starts its Python workers now, not in the first batch
    after an assignment, which the partitions a new member takes over wait for (measured on one
    idle 2-core machine: query start to first batch 3.2-3.5 s instead of 3.9-4.5 s; the member
    joins about 2 s later). Writes and commits nothing (:func:`warm_up_batch`)."""
    from datetime import datetime, timezone

    record = (b"k", b"{}", WARM_UP_TOPIC, 0, 0, datetime.fromtimestamp(0, timezone.utc), 0)
    record += ([("h", b"v")],) if fmt.headers else ()
    warm_up_batch(spark.createDataFrame([record], kafka_row_ddl(fmt.headers)), fmt, transform, tables, routing,
                  changes)


def warm_up_batch(kafka_rows, fmt: RecordFormat, transform: str | None, tables: TableTargets,
                  routing: Routing | None = None, changes: ChangeSpec | None = None) -> None:
    """``kafka_rows`` (as Spark's Kafka source gives them) through the batch path, both tables'
    files included, keeping no partition (``keep_from`` is empty): no file is created, nothing is
    committed anywhere. Then both tables' latest snapshots are read, as a batch's plans read
    them (this process's Delta log reading is warm too)."""
    rehearse_batch(SparkBatch(kafka_rows, fmt, transform, routing, changes), tables)


def rehearse_batch(batch: PreparedBatch, tables: TableTargets) -> None:
    """``batch`` through its write path, every table's files included, keeping no partition
    (``keep_from`` is empty): no file is created, nothing is committed anywhere; then both
    tables' latest snapshots are read, as a batch's plans read them."""
    outputs = [table for table, _ in tables.outputs]
    dead, *writes = (PlannedWrite(table.file_writer(file_prefix="warm-up"), {})
                     for table in (tables.dead_table, *outputs))
    try:
        if batch.one_pass and len(writes) == 1:
            batch.write_both(dead, writes[0])
        else:
            batch.dead.write(dead.writer, {})
            for index, (table, output) in enumerate(zip(outputs, writes)):
                if isinstance(table, UpsertDeltaTable):
                    batch.output(None, index).changes(table.key, {})
                else:
                    batch.output(None, index).write(output.writer, {})
    finally:
        batch.release()
    for table in (tables.dead_table, *outputs):
        table.snapshot()


RECORDED_DEAD_LETTER = "recorded_dead_letter"  # held by the dead-letter table already


def _coordinates(table: pa.Table) -> list[tuple[str, int, int]]:
    return list(zip(*(table[c].to_pylist() for c in ("topic", "partition", "offset"))))


class PreparedBatch(Protocol):
    """One micro-batch, nothing read yet. ``one_pass``: :meth:`write_both` may write both tables'
    files in one read of the batch. Otherwise its dead letters (``dead``) and its output rows
    (given what the dead-letter table had already decided, if anything) are written one after
    the other from a classification done once; :meth:`release` frees what that cached."""

    one_pass: bool
    dead: BatchRows

    def write_both(self, dead: PlannedWrite, output: PlannedWrite) -> tuple[WrittenFiles, WrittenFiles]: ...

    def output(self, decided: DeadLetterDecisions | None, index: int = 0) -> BatchRows:
        """The rows of output table ``index`` (route order)."""

    def release(self) -> None: ...


@dataclass
class SparkBatch:
    """A Spark micro-batch (``kafka_rows`` as Spark's Kafka source gives them). One pass when
    there is no transform (its output rows are Spark SQL's, not a per-record split); two passes
    share :attr:`classified`, cached on first use."""

    kafka_rows: object  # pyspark.sql.DataFrame
    fmt: RecordFormat
    transform: str | None
    routing: Routing | None = None  # the routes of several output tables (then each has its transform)
    changes: ChangeSpec | None = None  # the records are changes of an upsert table's keys
    _classified: object = None

    @property
    def one_pass(self) -> bool:
        return self.transform is None and self.routing is None and self.changes is None

    def write_both(self, dead: PlannedWrite, output: PlannedWrite) -> tuple[WrittenFiles, WrittenFiles]:
        rows = split_rows(classify(self.kafka_rows, self.fmt), self.fmt)  # read once, not cached
        task = functools.partial(_write_both_task, dead, output)
        metadata = [row.asDict() for row in rows.mapInArrow(task, METADATA_DDL).collect()]
        return WrittenFiles.from_metadata(metadata, DEAD_LETTER), WrittenFiles.from_metadata(metadata, OUTPUT)

    @property
    def classified(self):
        if self._classified is None:
            classified = classify(self.kafka_rows, self.fmt)
            if self.routing is not None:
                classified = routed(classified, self.fmt, self.routing)
            if self.changes is not None:
                classified = classified_changes(classified, self.fmt, self.changes)
            self._classified = classified.persist()
        return self._classified

    @property
    def dead(self) -> BatchRows:
        return SparkRows(dead_letters(self.classified, self.fmt))

    def output(self, decided: DeadLetterDecisions | None, index: int = 0) -> BatchRows:
        classified = self.classified if decided is None else _with_decisions(self.classified, decided)
        if self.changes is not None:
            return SparkRows(change_rows(classified), ordered=self.changes.order_by is not None)
        if self.routing is None:
            return SparkRows(apply_transform(good_rows(classified, self.fmt), self.transform))
        taken = classified.filter(f"`{route_column(index)}`")
        return SparkRows(apply_transform(good_rows(taken, self.fmt), self.routing.transforms[index]))

    def release(self) -> None:
        if self._classified is not None:
            self._classified.unpersist()


def _with_decisions(classified, decided: DeadLetterDecisions):
    """``classified`` whose dead-letter reason, within ``decided.ranges``, is the dead-letter
    table's: set for the records it holds, null for the others (they go to the output table)."""
    from pyspark.sql import functions as F

    key = ["topic", "partition", "offset"]
    in_ranges = None
    for rng in decided.ranges:
        test = ((F.col("topic") == rng.topic) & (F.col("partition") == rng.partition)
                & (F.col("offset") >= rng.start) & (F.col("offset") < rng.end))
        in_ranges = test if in_ranges is None else in_ranges | test
    if decided.coordinates.num_rows == 0:  # the dead-letter table holds none of these records
        return classified.withColumn(REASON, F.when(~in_ranges, F.col(REASON)))
    recorded = classified.sparkSession.createDataFrame(decided.coordinates.select(key)) \
        .withColumn("_recorded_dead", F.lit(True))
    reason = (F.when(~in_ranges, F.col(REASON))
              .when(F.col("_recorded_dead"), F.coalesce(F.col(REASON), F.lit(RECORDED_DEAD_LETTER))))
    return (classified.join(F.broadcast(recorded), key, "left")
            .withColumn(REASON, reason).drop("_recorded_dead"))


@dataclass
class ArrowBatch:
    """A classified batch in this process (tests and small tools): ``records`` are the output
    rows plus a ``reason`` column (null for good rows); ``dead_records`` the dead letters."""

    records: pa.Table
    dead_records: pa.Table
    one_pass: bool = True

    def write_both(self, dead: PlannedWrite, output: PlannedWrite) -> tuple[WrittenFiles, WrittenFiles]:
        return (self.dead.write(dead.writer, dead.keep_from),
                self.output(None).write(output.writer, output.keep_from))

    @property
    def dead(self) -> BatchRows:
        return ArrowRows(self.dead_records)

    def output(self, decided: DeadLetterDecisions | None, index: int = 0) -> BatchRows:
        reasons = self.records["reason"].to_pylist()
        if decided is None:
            keep = [reason is None for reason in reasons]
        else:
            recorded = set(_coordinates(decided.coordinates))
            keep = [(c not in recorded) if any(r.topic == c[0] and r.partition == c[1] and r.start <= c[2] < r.end
                                               for r in decided.ranges) else reason is None
                    for c, reason in zip(_coordinates(self.records), reasons)]
        return ArrowRows(self.records.filter(pa.array(keep, pa.bool_())).drop_columns(["reason"]))

    def release(self) -> None:
        pass


@dataclass(frozen=True)
class RoutedTable:
    """An output table after the first of a pipeline that routes records to several, with the
    owner epochs this member claimed in it."""

    table: TxnDeltaTable
    epochs: Mapping[TopicPartition, int]


@dataclass
class TableTargets:
    """The output and dead-letter tables with the owner epochs this member claimed; ``routed``:
    the further output tables of a pipeline that routes records to several (``table`` is the
    first of them)."""

    table: TxnDeltaTable
    dead_table: TxnDeltaTable
    epochs: Mapping[TopicPartition, int]
    dead_epochs: Mapping[TopicPartition, int]
    routed: tuple[RoutedTable, ...] = ()

    @property
    def outputs(self) -> tuple[tuple[TxnDeltaTable, Mapping[TopicPartition, int]], ...]:
        """Every output table with its epochs, in route order."""
        return ((self.table, self.epochs), *((r.table, r.epochs) for r in self.routed))

    def with_claims(self, claimed: TableTargets) -> TableTargets:
        """These tables with the epochs of ``claimed`` (the same tables' claims of more partitions) added."""
        return TableTargets(self.table, self.dead_table, {**self.epochs, **claimed.epochs},
                            {**self.dead_epochs, **claimed.dead_epochs},
                            tuple(RoutedTable(ours.table, {**ours.epochs, **theirs.epochs})
                                  for ours, theirs in zip(self.routed, claimed.routed)))


def unclaimed_targets(tables) -> TableTargets:
    """The tables of ``tables`` (a :class:`~pipelines.runtime.pipeline_tables.PipelineTables`)
    with no epochs claimed yet."""
    return TableTargets(tables.table, tables.dead_table, {}, {}, tuple(RoutedTable(t, {}) for t in tables.routed))


class BatchWriter:
    """The ``foreachBatch`` callable: commits each micro-batch to Delta, then to Kafka, in the order
    stated in the module docstring. A refused batch (another member owns a partition) calls
    ``refused`` and re-raises, so the query stops with nothing written and nothing committed."""

    def __init__(self, fmt: RecordFormat, transform: str | None, targets: TableTargets,
                 offset_log: PlannedRanges,
                 commit_kafka: Callable[[Mapping[TopicPartition, int], str], bool],
                 report: Callable[[BatchReport], None],
                 refused: Callable[[int, FencedWriterError], None],
                 hooks: BatchHooks = NO_HOOKS,
                 check_sources: Callable[[tuple[OffsetRange, ...]], None] = lambda ranges: None,
                 prepare: Callable[[object, tuple[OffsetRange, ...], frozenset[TopicPartition], RecordFormat],
                                   PreparedBatch] | None = None,
                 follow: Callable[[], BatchSchema] | None = None, routing: Routing | None = None,
                 changes: ChangeSpec | None = None):
        """``prepare(batch_df, ranges, left_out, fmt)``: how a micro-batch over the planned
        ``ranges`` (those of the partitions ``left_out`` taken out), decoded with ``fmt``, is planned
        for writing (default: the Spark plan of :meth:`_prepare`). ``follow()``: the record format
        and output table of the next batch (a reader schema that follows its registry subject,
        :mod:`pipelines.runtime.schema_follower`); default: ``fmt`` and ``targets.table`` always.
        ``routing``: the routes of ``targets``' output tables, when there are several; ``changes``:
        how records change the keys of an upsert output table."""
        self.fmt, self.transform, self.targets, self.routing = fmt, transform, targets, routing
        self.changes = changes
        self.follow = follow
        self.offset_log, self.commit_kafka, self.report = offset_log, commit_kafka, report
        self.refused, self.hooks, self.check_sources = refused, hooks, check_sources
        self.gate = BatchGate()
        self._prepare_batch = prepare or self._prepare
        self._rehearsal: Callable[[object, tuple[OffsetRange, ...]], None] | None = None
        self.failure: BaseException | None = None  # what the last failed batch raised

    def rehearse(self, rehearsal: Callable[[object, tuple[OffsetRange, ...]], None] | None) -> None:
        """From the next micro-batch on, hand each batch to ``rehearsal(batch_df, ranges)``
        instead of writing it; None writes again. Such a batch writes and commits nothing here
        (no Delta commit, no Kafka offset, no report), and gets all its planned ranges and rows,
        whatever :meth:`BatchGate.allow` says; it passes the gate like any batch, so
        :meth:`BatchGate.released` counts it. The runner warms its own ``scg-kafka`` query up
        this way before it joins. Any thread; a batch reads the setting once, when it begins."""
        self._rehearsal = rehearsal

    def __call__(self, batch_df, batch_id: int) -> None:
        """Write micro-batch ``batch_id``; what it raises is also kept in :attr:`failure`, since
        Spark hands it to the query's caller only as text."""
        try:
            self._batch(batch_df, batch_id)
        except BaseException as exc:
            self.failure = exc
            raise

    def _batch(self, batch_df, batch_id: int) -> None:
        started = time.monotonic()
        ranges = self.offset_log.ranges(batch_id)
        rehearsal = self._rehearsal
        allowed = self.gate.enter(r.tp for r in ranges)
        if allowed is None:
            log.debug("batch %d not written: the query is stopping at a batch boundary", batch_id)
            return
        try:
            if rehearsal is not None:
                rehearsal(batch_df, ranges)
                return
            kept = tuple(r for r in ranges if r.tp in allowed)
            given_up = frozenset(r.tp for r in ranges if r.tp not in allowed and r.end != r.start)
            if given_up:
                log.info("batch %d writes nothing of %s: given up after the batch was planned; their next "
                         "owner reads them from the tables", batch_id,
                         ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(given_up)))
            if any(r.end != r.start for r in kept):  # (an scg-kafka batch may only change partitions)
                self._write(batch_df, batch_id, kept, started, given_up)
        finally:
            self.gate.exit()

    def _write(self, batch_df, batch_id: int, ranges: tuple[OffsetRange, ...], started: float,
               left_out: frozenset[TopicPartition]) -> None:
        fmt, targets = self.fmt, self.targets
        if self.follow is not None:
            followed = self.follow()
            fmt, targets = followed.fmt, replace(targets, table=followed.table, routed=tuple(
                RoutedTable(table, routed.epochs) for table, routed in zip(followed.routed, targets.routed)))
        batch = self.prepare(batch_df, ranges, left_out, fmt)
        source_checked = functools.cache(lambda: self.check_sources(ranges))  # once the rows were read
        try:
            self.hooks.before_commit(batch_id, ranges)
            try:
                committed = (self._one_pass(batch, targets, ranges, batch_id, source_checked)
                             if batch.one_pass and not targets.routed else None)
                dead_result, results = committed or self._two_passes(batch, targets, ranges, batch_id,
                                                                     source_checked)
            except FencedWriterError as refused:
                self.refused(batch_id, refused)
                raise
        finally:
            batch.release()
        self.hooks.after_delta_commit(batch_id, ranges)
        first = results[0]
        committed = self._commit_kafka(ranges, first)
        self.report(BatchReport(batch_id, ranges, sum(r.rows_written for r in results),
                                sum(r.rows_skipped for r in results), dead_result.rows_written,
                                first.table_version, time.monotonic() - started,
                                sum(r.commit_s for r in results) + dead_result.commit_s,
                                committed, dict(dead_result.counts),
                                {kind: sum(r.counts.get(kind, 0) for r in results) for kind in MERGED
                                 if any(kind in r.counts for r in results)}))

    def prepare(self, batch_df, ranges: tuple[OffsetRange, ...],
                left_out: frozenset[TopicPartition] = frozenset(), fmt: RecordFormat | None = None) -> PreparedBatch:
        """Micro-batch ``batch_df`` over ``ranges``, planned for writing as this writer writes it
        (decoded with ``fmt``, default the writer's)."""
        return self._prepare_batch(batch_df, ranges, left_out, fmt or self.fmt)

    def _prepare(self, batch_df, ranges: tuple[OffsetRange, ...], left_out: frozenset[TopicPartition],
                 fmt: RecordFormat) -> PreparedBatch:
        """The batch as Spark plans it (nothing is computed yet), without the records of the
        partitions ``left_out``."""
        return SparkBatch(without_partitions(batch_df, left_out), fmt, self.transform, self.routing, self.changes)

    def _one_pass(self, batch: PreparedBatch, targets: TableTargets, ranges: tuple[OffsetRange, ...], batch_id: int,
                  check_sources: Callable[[], None]) -> tuple[CommitResult, tuple[CommitResult]] | None:
        """Both tables' files from one read of the batch, then the dead-letter and output commits.
        None when the dead-letter table already decided records of this batch (a retry after its
        commit: the output must follow its decisions) or when a table's plan changed before its
        commit; the two passes decide then, and the files written here stay unreferenced."""
        dead_plan = targets.dead_table.plan(ranges, targets.dead_epochs)
        if _decided_ranges(ranges, dead_plan.replayed):
            return None
        plan = targets.table.plan(ranges, targets.epochs)
        dead_written, written = batch.write_both(
            PlannedWrite(targets.dead_table.file_writer(file_prefix=f"part-b{batch_id}"), dead_plan.keep_from),
            PlannedWrite(targets.table.file_writer(file_prefix=f"part-b{batch_id}"), plan.keep_from))
        check_sources()  # the rows were read from the source the query started on
        try:
            dead_result = self._commit_written(targets.dead_table, ranges, targets.dead_epochs,
                                               dead_plan, dead_written, batch_id)
            return dead_result, (self._commit_written(targets.table, ranges, targets.epochs,
                                                      plan, written, batch_id),)
        except _PlanChanged as changed:
            log.warning("batch %d: %s changed before its commit; writing the batch again in two passes",
                        batch_id, changed)
            return None

    def _commit_written(self, table: TxnDeltaTable, ranges, epochs, planned: CommitPlan,
                        written: WrittenFiles, batch_id: int) -> CommitResult:
        """Commit files written for ``planned``; raises _PlanChanged when the table's plan is no
        longer that one (nothing is committed then)."""
        def write(plan: CommitPlan) -> WrittenFiles:
            if plan.keep_from != planned.keep_from:
                raise _PlanChanged(table.path)
            self.hooks.files_written(batch_id, ranges, written)
            return written

        result = table.commit_files(ranges, epochs, write, planned)
        self.hooks.table_committed(batch_id, ranges, table.path)
        return result

    def _two_passes(self, batch: PreparedBatch, targets: TableTargets, ranges: tuple[OffsetRange, ...],
                    batch_id: int, check_sources: Callable[[], None]) -> tuple[CommitResult, tuple[CommitResult, ...]]:
        """Dead letters written and committed first, then each output table's rows (those its
        route takes) that follow the dead-letter table's decisions, table after table."""
        dead_result = self._write_and_commit(targets.dead_table, batch.dead, ranges,
                                             targets.dead_epochs, batch_id, check_sources)
        decided = self._decided(ranges, dead_result)
        return dead_result, tuple(
            self._write_and_commit(table, batch.output(decided, index), ranges, epochs, batch_id, check_sources)
            for index, (table, epochs) in enumerate(targets.outputs))

    def _decided(self, ranges: tuple[OffsetRange, ...], dead_result: CommitResult) -> DeadLetterDecisions | None:
        """What the dead-letter table decided before this batch: for the partitions its commit
        replayed, the batch's ranges and the dead letters it holds there; None when it replayed
        nothing (then this batch's classification decided both tables)."""
        held = _decided_ranges(ranges, dead_result.replayed)
        if not held:
            return None
        return DeadLetterDecisions(held, self.targets.dead_table.coordinates(held))

    def _write_and_commit(self, table: TxnDeltaTable, rows: BatchRows, ranges, epochs,
                          batch_id: int, check_sources: Callable[[], None]) -> CommitResult:
        if isinstance(table, UpsertDeltaTable):
            return self._merge_and_commit(table, rows, ranges, epochs, batch_id, check_sources)
        writer = table.file_writer(file_prefix=f"part-b{batch_id}")

        def write(plan) -> WrittenFiles:
            written = rows.write(writer, plan.keep_from)
            check_sources()  # the rows were read from the source the query started on
            self.hooks.files_written(batch_id, ranges, written)
            return written

        result = table.commit_files(ranges, epochs, write)
        self.hooks.table_committed(batch_id, ranges, table.path)
        return result

    def _merge_and_commit(self, table: UpsertDeltaTable, rows: ChangeRows, ranges, epochs,
                          batch_id: int, check_sources: Callable[[], None]) -> CommitResult:
        """An upsert table's commit: the batch's last change per key, merged with its transactions."""
        def changes(plan: CommitPlan) -> pa.Table:
            collapsed = rows.changes(table.key, plan.keep_from)
            check_sources()  # the rows were read from the source the query started on
            return collapsed

        result = table.commit_changes(ranges, epochs, changes)
        self.hooks.table_committed(batch_id, ranges, table.path)
        return result

    def _commit_kafka(self, ranges: tuple[OffsetRange, ...], result: CommitResult) -> bool:
        offsets = {r.tp: r.end for r in ranges if r.end > r.start}
        if not offsets:
            return True
        metadata = f"delta:{result.table_version}" if result.table_version is not None else "delta:replay"
        return self.commit_kafka(offsets, metadata)


class _PlanChanged(Exception):
    """A table's commit plan differs from the one its files were written for."""


def _decided_ranges(ranges: tuple[OffsetRange, ...], replayed) -> tuple[OffsetRange, ...]:
    """The non-empty ranges of the partitions whose offsets a table already holds (in part)."""
    replayed = set(replayed)
    return tuple(r for r in ranges if r.tp in replayed and r.end > r.start)


def without_partitions(kafka_rows, partitions: Iterable[TopicPartition]):
    """``kafka_rows`` (Spark's Kafka schema) without the records of ``partitions``."""
    from pyspark.sql import functions as F

    left_out = None
    for tp in sorted(partitions):
        test = (F.col("topic") == tp.topic) & (F.col("partition") == tp.partition)
        left_out = test if left_out is None else left_out | test
    return kafka_rows if left_out is None else kafka_rows.where(~left_out)


def apply_transform(rows, transform: str | None):
    """Run the pipeline's SQL transform over the parsed rows, registered as the view ``input``."""
    if not transform:
        return rows
    rows.createOrReplaceTempView("input")
    return rows.sparkSession.sql(transform)
