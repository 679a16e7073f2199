"""A Delta table written exactly once per Kafka partition, through per-partition ``txn`` actions.

For every (topic, partition) the table carries two Delta application transactions:

* ``<app>:offset:<topic>:<partition>`` — version = the **next Kafka offset to read** (every record
  below it is in the table);
* ``<app>:owner:<topic>:<partition>`` — version = the owner epoch of the member allowed to write
  the partition, bumped by :meth:`TxnDeltaTable.claim` when a member is assigned the partition.

Commit protocol of :meth:`TxnDeltaTable.commit_files` (docs/DESIGN.md, invariant 3): read one
snapshot; every partition of the batch must still be owned by the caller's epoch (else
``FencedWriterError``, and nothing is written); per partition, the recorded offset decides: equal
to the batch start → write the range; at or past the batch end → a replay, write nothing; in
between → a partial replay, write only rows at or above it; below the batch start → records would
be missing (``OffsetGapError``). The caller's ``write`` function then writes the data files of
that plan (on Spark's executors: rows never pass through the driver) and returns their metadata.
The files' ``add`` actions and all ``txn`` actions (offsets and owners, re-asserted) go into ONE
commit built on that same snapshot, so a concurrent commit that touched any of these app ids makes
ours fail (``CommitFailedError``); we re-read and re-decide, reusing the files when the plan is
unchanged and writing again when it is not (the first files stay unreferenced). Two writers of a
partition never both win. Files whose columns the table cannot read are never committed: a column
of another type, or (without ``add_columns``) a column the table lacks, is ``SchemaIncompatible``.
A table opened with ``add_columns`` commits files that carry columns it lacks together with the
new schema (nullable columns added, :mod:`sinks.schema_widening`): the schema changes in the
commit of the first rows that have them, and no file is removed. Thread
safety: a TxnDeltaTable keeps no state between calls, so threads may share one; each call works
on a snapshot of its own.
"""
from __future__ import annotations

import functools
import json
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.transaction import AddAction, Transaction

from groupmgr.core import OffsetRange, ScgError, TopicPartition
from sinks.data_files import DataFileWriter, WrittenFiles
from sinks.schema_widening import ColumnTypeChanged, added_columns, type_text, widen

COMMIT_ATTEMPTS = 5
# The partition filter of a commit that changes the schema: deltalake writes a new schema only in
# an overwrite, which removes the files this filter selects; no row has a negative offset.
NOTHING_REPLACED = [("offset", "=", "-1")]
COMMIT_MARKER = "scg.commit"   # commit-info key naming one commit attempt
# The start-up check's retry bound when the storage options set no request timeout: half of
# object_store's default 30 s (startup_storage_options).
STARTUP_STORAGE_OPTIONS = {"retry_timeout": "15s"}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|msec|s|sec|secs|seconds?|m|min|mins|minutes?)?\s*")
_UNIT_S = {"ms": 0.001, "msec": 0.001, "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0}
# Tables this module creates write a checkpoint every this many commits (Delta's default: 100).
# delta-rs 1.6 answers each app-transaction lookup (two per partition per commit, and as many per
# plan) by scanning the log since the last checkpoint: on object storage one request per commit
# file. Measured on s3proxy, 12 partitions per commit, table versions 21-81: a commit took
# 239-398 ms and one lookup 6-12 ms with the default, 112-163 ms and 0.9-1.1 ms with 10 (local
# disk: a checkpoint of 20,000 files takes 14-80 ms).
CHECKPOINT_INTERVAL = 10
_sleep = time.sleep  # the pause between commit attempts (a test replaces it, not time.sleep)


def startup_storage_options(storage_options: Mapping[str, str]) -> dict[str, str]:
    """``storage_options`` bounded for the start-up checks: deltalake retries a request for up to
    180 s (``retry_timeout``), so an endpoint that accepts connections but never answers would
    hold the start for three minutes. Unless the options set ``retry_timeout`` (in any spelling),
    it becomes half their request ``timeout`` (object_store's default 30 s when unset or not a
    plain number of ms, s or minutes): a request that is never answered fails the check after one
    request timeout, without a retry. Batches keep the default retries."""
    given = {key.lower(): value for key, value in storage_options.items()}
    if "retry_timeout" in given:
        return dict(storage_options)
    timeout = _duration_s(given.get("timeout"))
    bound = STARTUP_STORAGE_OPTIONS if timeout is None else {"retry_timeout": f"{max(1, int(timeout * 500))}ms"}
    return {**bound, **storage_options}


def _duration_s(text: str | None) -> float | None:
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return None
    return float(match.group(1)) * _UNIT_S.get(match.group(2) or "s", 1.0)


class SinkError(ScgError):
    """The Delta table could not take a commit (see the subclasses for the named cases)."""

    condition = "SINK_ERROR"


class StorageUnavailable(SinkError):
    """The table's storage cannot be read or written: unreachable endpoint, refused credentials,
    missing bucket. ``reason`` is the storage client's own last word."""

    condition = "STORAGE_UNAVAILABLE"

    def __init__(self, path: str, cause: BaseException):
        self.path, self.reason = path, storage_error_reason(cause)
        super().__init__(f"{path}: the table's storage failed: {self.reason} (check storage.endpoint, "
                         "the credentials and the bucket)")


def storage_error_reason(error: BaseException) -> str:
    """The innermost cause of a deltalake storage error, one line, without terminal colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    parts = [p.strip() for p in re.split(r"↳|\n", text) if p.strip()]
    reason = parts[-1] if parts else type(error).__name__
    code = re.search(r"<Code>([^<]+)</Code>", text)
    if code:
        return code.group(1)
    return reason[:300]


class SchemaIncompatible(SinkError):
    """The table cannot take the columns a batch would write: a column changed type, or new
    columns while the table's schema may not change. Retried with backoff (the stream waits,
    nothing is written) until the schema or the configuration changes; ``table_schema`` and
    ``batch_schema`` are the two schemas as simple type strings."""

    condition = "SCHEMA_INCOMPATIBLE"
    retriable = True

    def __init__(self, table: str, detail: str, table_schema: str, batch_schema: str):
        self.table, self.detail = table, detail
        self.table_schema, self.batch_schema = table_schema, batch_schema
        super().__init__(f"{table}: {detail}; table schema {table_schema}; batch schema {batch_schema}")


class FencedWriterError(SinkError):
    """Another member has claimed a partition of this batch since we did; nothing was written."""

    condition = "FENCED_WRITER"

    def __init__(self, table: str, tp: TopicPartition, ours: int, recorded: int | None):
        self.table, self.tp, self.ours, self.recorded = table, tp, ours, recorded
        super().__init__(f"{table}: partition {tp.topic}-{tp.partition} is owned by epoch "
                         f"{recorded}, this writer holds epoch {ours}; batch refused")


class OffsetGapError(SinkError):
    """The table ends below the batch start: writing would leave records out."""

    condition = "OFFSET_GAP"

    def __init__(self, table: str, rng: OffsetRange, recorded: int):
        self.table, self.range, self.recorded = table, rng, recorded
        super().__init__(f"{table}: {rng.topic}-{rng.partition} recorded up to {recorded} but the "
                         f"batch starts at {rng.start}; records {recorded}..{rng.start - 1} would be lost")


@dataclass(frozen=True)
class CommitResult:
    """What one :meth:`TxnDeltaTable.commit` did (immutable)."""

    table_version: int | None     # None when nothing needed committing (a full replay)
    rows_written: int
    rows_skipped: int             # rows already in the table (replay)
    replayed: tuple[TopicPartition, ...]
    commit_s: float = 0.0         # time spent in the Delta commit itself (files excluded)
    counts: Mapping[str, int] = field(default_factory=dict)  # rows written per ``count_by`` value, or
    # for a merge the rows it inserted, updated and deleted


@dataclass(frozen=True)
class CommitPlan:
    """What a batch must write, decided on one snapshot: ``keep_from`` lists the partitions to
    write with the first offset to keep (rows below it are already in the table). A plan from
    :meth:`TxnDeltaTable.plan` also holds that snapshot, for the one :meth:`commit_files` call
    that follows it (not compared, not shown)."""

    keep_from: dict[TopicPartition, int]
    new_versions: dict[TopicPartition, int]
    replayed: tuple[TopicPartition, ...]
    snapshot: DeltaTable | None = field(default=None, compare=False, repr=False)


WriteFiles = Callable[[CommitPlan], WrittenFiles]


class TxnDeltaTable:
    """A Delta table at ``path`` written exactly once per Kafka partition (protocol above).

    Offsets are next-offset-to-read: after a commit of range ``[start, end)`` the partition's
    offset transaction holds ``end``. Every commit is one Delta version holding the data files and
    the offset and owner transactions of its partitions, built on the snapshot it checked (CAS).
    Keeps no state between calls (each works on a snapshot of its own): one instance may be
    used from several threads at once; any number of processes may share the table.
    """

    def __init__(self, path: str, app_id: str, schema: pa.Schema,
                 partition_by: Sequence[str] = (), storage_options: Mapping[str, str] | None = None,
                 count_by: str | None = None, add_columns: bool = False):
        """``count_by``: a column whose values a commit counts in the rows it wrote
        (:attr:`CommitResult.counts`; the dead-letter table's ``reason``). ``add_columns``: a
        commit of files whose ``schema`` has columns the table lacks adds them to the table in
        that same commit (:func:`sinks.schema_widening.widen`); without it the table's schema
        never changes."""
        self.path, self.app_id, self.schema, self.count_by = str(path), app_id, schema, count_by
        self.partition_by = list(partition_by)
        self.storage_options = dict(storage_options or {})
        self.add_columns = add_columns

    def with_schema(self, schema: pa.Schema, add_columns: bool) -> "TxnDeltaTable":
        """The same table written with files of ``schema``."""
        return TxnDeltaTable(self.path, self.app_id, schema, self.partition_by, self.storage_options,
                             self.count_by, add_columns)

    # -- app ids -------------------------------------------------------------------------------
    def offset_app_id(self, tp: TopicPartition) -> str:
        return offset_app_id(self.app_id, tp)

    def owner_app_id(self, tp: TopicPartition) -> str:
        return f"{self.app_id}:owner:{tp.topic}:{tp.partition}"

    def topic_id_app_id(self, tp: TopicPartition) -> str:
        """The transaction whose version is the fingerprint of the Kafka topic ID that ``tp``'s
        offsets belong to (a recreated topic has a new ID: its offsets start again)."""
        return f"{self.app_id}:topic-id:{tp.topic}:{tp.partition}"

    # -- reads ---------------------------------------------------------------------------------
    def snapshot(self) -> DeltaTable:
        """The latest snapshot; creates the (empty) table on first use. Raises StorageUnavailable
        when the storage cannot be reached or refuses access."""
        try:
            for _ in range(COMMIT_ATTEMPTS):
                try:
                    return DeltaTable(self.path, storage_options=self.storage_options or None)
                except TableNotFoundError:
                    self._create()
            return DeltaTable(self.path, storage_options=self.storage_options or None)
        except OSError as exc:
            raise StorageUnavailable(self.path, exc) from None

    def check_storage(self) -> None:
        """:meth:`snapshot` once with the start-up retry bound (:func:`startup_storage_options`):
        the table is read (or created), or StorageUnavailable is raised within about one request
        timeout (30 s unless the storage options set another)."""
        bounded = startup_storage_options(self.storage_options)
        TxnDeltaTable(self.path, self.app_id, self.schema, self.partition_by, bounded).snapshot()

    def delta_schema(self) -> dict:
        """The table's schema as Delta's JSON schema (parsed), from the latest snapshot."""
        return json.loads(self.snapshot().schema().to_json())

    def file_delta_schema(self) -> dict:
        """:attr:`schema` (the files' columns) as Delta's JSON schema (parsed)."""
        return json.loads(DeltaSchema.from_arrow(self.schema).to_json())

    def recorded_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return _versions(self.snapshot(), self.offset_app_id, partitions)

    def recorded_topic_ids(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The topic ID fingerprint recorded for each partition (None: never recorded)."""
        return _versions(self.snapshot(), self.topic_id_app_id, partitions)

    def recorded(self, partitions: Iterable[TopicPartition]
                 ) -> tuple[dict[TopicPartition, int | None], dict[TopicPartition, int | None]]:
        """:meth:`recorded_offsets` and :meth:`recorded_topic_ids` from one snapshot (a snapshot
        load reads the log since its last checkpoint: on object storage one request per commit
        file)."""
        table, partitions = self.snapshot(), list(partitions)
        return (_versions(table, self.offset_app_id, partitions),
                _versions(table, self.topic_id_app_id, partitions))

    def coordinates(self, ranges: Sequence[OffsetRange]) -> pa.Table:
        """The ``topic, partition, offset`` of the rows this table holds within ``ranges`` (read on
        this process: for small selections, e.g. a replayed batch's dead letters)."""
        if not ranges:
            return pa.schema([self.schema.field(c) for c in ("topic", "partition", "offset")]).empty_table()
        predicate = None
        for rng in ranges:
            test = ((ds.field("topic") == rng.topic) & (ds.field("partition") == rng.partition)
                    & (ds.field("offset") >= rng.start) & (ds.field("offset") < rng.end))
            predicate = test if predicate is None else predicate | test
        try:
            dataset = self.snapshot().to_pyarrow_dataset()
            return dataset.to_table(columns=["topic", "partition", "offset"], filter=predicate)
        except OSError as exc:
            raise StorageUnavailable(self.path, exc) from None

    # -- writes --------------------------------------------------------------------------------
    def claim(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Become the writer of ``partitions``: bump each owner epoch in one commit and return
        the new epochs. Any writer holding an older epoch is refused from now on."""
        partitions = sorted(set(partitions))
        for _ in range(COMMIT_ATTEMPTS):
            table = self.snapshot()
            epochs = {tp: (_transaction_version(table, self.owner_app_id(tp)) or 0) + 1
                      for tp in partitions}
            txns = [self._txn(self.owner_app_id(tp), e) for tp, e in epochs.items()]
            if not txns or self._try_commit(table, (), txns, uuid.uuid4().hex):
                return epochs
        raise SinkError(f"{self.path}: could not claim partitions after {COMMIT_ATTEMPTS} attempts")

    def record_partitions(self, epochs: Mapping[TopicPartition, int], offsets: Mapping[TopicPartition, int],
                          topic_ids: Mapping[TopicPartition, int], event: Mapping[str, str] | None = None) -> None:
        """Set partitions' next offsets (a reset may move them down: a recreated topic, a
        truncated log) and topic ID fingerprints in one commit without data, with ``event`` in
        the commit info. Every partition touched must still be owned by ``epochs`` (else
        FencedWriterError, nothing written); a concurrent commit makes it re-check and retry."""
        touched = sorted(set(offsets) | set(topic_ids))
        if not touched:
            return
        ranges = [OffsetRange(tp.topic, tp.partition, 0, 0) for tp in touched]
        for _ in range(COMMIT_ATTEMPTS):
            table = self.snapshot()
            self._check_owner(table, ranges, epochs)
            txns = [self._txn(self.offset_app_id(tp), v) for tp, v in offsets.items()]
            txns += [self._txn(self.topic_id_app_id(tp), v) for tp, v in topic_ids.items()]
            txns += [self._txn(self.owner_app_id(tp), epochs[tp]) for tp in touched]
            if self._try_commit(table, (), txns, uuid.uuid4().hex, event):
                return
        raise SinkError(f"{self.path}: could not record partitions after {COMMIT_ATTEMPTS} attempts")

    def file_writer(self, file_prefix: str = "part") -> DataFileWriter:
        """A writer of this table's data files (picklable: Spark ships it to the executors)."""
        return DataFileWriter(self.path, self.schema, tuple(self.partition_by), self.storage_options,
                              file_prefix, count_by=self.count_by)

    def commit(self, rows: pa.Table, ranges: Sequence[OffsetRange],
               epochs: Mapping[TopicPartition, int]) -> CommitResult:
        """:meth:`commit_files` with ``rows`` (carrying topic/partition/offset columns) written by
        this process: for tests and small tables; a Spark batch writes on its executors."""
        writer = self.file_writer()
        return self.commit_files(ranges, epochs,
                                 lambda plan: writer.write(rows.to_batches(), plan.keep_from))

    def plan(self, ranges: Sequence[OffsetRange], epochs: Mapping[TopicPartition, int]) -> CommitPlan:
        """What a commit of ``ranges`` would write on the latest snapshot, for files written before
        the commit (:meth:`commit_files` decides again on its own snapshot; a caller compares).
        Raises FencedWriterError or OffsetGapError as the commit would."""
        table = self.snapshot()
        self._check_owner(table, ranges, epochs)
        return replace(self._plan(table, ranges), snapshot=table)

    def commit_files(self, ranges: Sequence[OffsetRange], epochs: Mapping[TopicPartition, int],
                     write: WriteFiles, planned: CommitPlan | None = None) -> CommitResult:
        """Decide, have ``write`` write the plan's files, commit them with the offset and owner
        transactions in one CAS commit (protocol above). Raises FencedWriterError or OffsetGapError
        without writing; SinkError when conflicts persist. ``planned``: the :meth:`plan` this
        commit follows; its snapshot, brought up to date (only the commits since are read, not
        the log from its checkpoint), is the first attempt's, and everything is decided on it
        again as on a fresh one."""
        plan, written = None, None
        for attempt in range(COMMIT_ATTEMPTS):
            table = self._latest(planned.snapshot if planned is not None and attempt == 0 else None)
            self._check_owner(table, ranges, epochs)
            decided = self._plan(table, ranges)
            if not decided.new_versions:  # a full replay: the rows are counted, none is written
                if written is None or written.files:
                    written = write(decided)
                return CommitResult(None, 0, written.rows_skipped + written.rows_written, decided.replayed)
            if written is None or decided.keep_from != plan.keep_from:
                plan, written = decided, write(decided)
            txns = [self._txn(self.offset_app_id(tp), v) for tp, v in decided.new_versions.items()]
            txns += [self._txn(self.owner_app_id(tp), epochs[tp]) for tp in decided.new_versions]
            marker = uuid.uuid4().hex
            commit_started = time.monotonic()
            if self._try_commit(table, written.files, txns, marker):
                return CommitResult(self._committed_version(table, marker), written.rows_written,
                                    written.rows_skipped, decided.replayed,
                                    time.monotonic() - commit_started, written.counts)
            _sleep(0.05 * (attempt + 1))
        raise SinkError(f"{self.path}: commit kept conflicting after {COMMIT_ATTEMPTS} attempts")

    # -- internals -----------------------------------------------------------------------------
    def _latest(self, kept: DeltaTable | None) -> DeltaTable:
        """``kept`` brought up to the latest version, or a fresh :meth:`snapshot` (no snapshot
        kept, or updating it failed: the fresh load decides and names a storage failure)."""
        if kept is not None:
            try:
                kept.update_incremental()
                return kept
            except Exception:  # noqa: BLE001 - see the docstring
                pass
        return self.snapshot()

    def _check_owner(self, table: DeltaTable, ranges, epochs) -> None:
        """Every partition of ``ranges`` is owned by the writer's epoch, else FencedWriterError: a
        partition claimed since by another member, one nobody claimed (no owner recorded), or one
        the writer holds no epoch for (it never claimed it), even when the table records none."""
        for rng in ranges:
            recorded = _transaction_version(table, self.owner_app_id(rng.tp))
            ours = epochs.get(rng.tp)
            if ours is None or recorded != ours:
                raise FencedWriterError(self.path, rng.tp, -1 if ours is None else ours, recorded)

    def _plan(self, table: DeltaTable, ranges: Sequence[OffsetRange]) -> CommitPlan:
        keep_from, versions, replayed = {}, {}, []
        for rng in ranges:
            recorded = _transaction_version(table, self.offset_app_id(rng.tp))
            if recorded is not None and recorded >= rng.end:
                replayed.append(rng.tp)
                continue
            if recorded is not None and recorded < rng.start:
                raise OffsetGapError(self.path, rng, recorded)
            keep_from[rng.tp] = rng.start if recorded is None else recorded
            if recorded is not None and recorded > rng.start:
                replayed.append(rng.tp)
            versions[rng.tp] = rng.end
        return CommitPlan(keep_from, versions, tuple(replayed))

    def _try_commit(self, table: DeltaTable, files, txns: list[Transaction], marker: str,
                    info: Mapping[str, str] | None = None) -> bool:
        """One commit of ``files`` and ``txns`` built on ``table``'s snapshot, tagged with
        ``marker`` (and ``info``) in its commit info; False when a concurrent commit conflicts."""
        now = int(time.time() * 1000)
        adds = [AddAction(f.path, f.size, dict(f.partition_values), now, True, f.stats) for f in files]
        properties = CommitProperties(app_transactions=txns,
                                      custom_metadata={**(info or {}), COMMIT_MARKER: marker})
        widened = self._widened(table) if files else None
        try:
            if widened is None:
                table.create_write_transaction(adds, "append", self.schema, self.partition_by or None,
                                               commit_properties=properties)
            else:  # the new schema's metadata action, the adds, and no file removed (NOTHING_REPLACED)
                table.create_write_transaction(adds, "overwrite", widened, self.partition_by or None,
                                               partition_filters=NOTHING_REPLACED, commit_properties=properties)
        except CommitFailedError:
            return False
        except OSError as exc:
            raise StorageUnavailable(self.path, exc) from None
        return True

    def _widened(self, table: DeltaTable) -> DeltaSchema | None:
        """The snapshot's schema with the columns of :attr:`schema` it lacks, or None when it has
        them all. Raises SchemaIncompatible when a column changed type, or when the files have
        columns the table lacks and it was not opened with ``add_columns`` (they would be written
        and never read)."""
        current = json.loads(table.schema().to_json())
        ours = self.file_delta_schema()
        try:
            widened = widen(current, ours)
        except ColumnTypeChanged as changed:
            raise SchemaIncompatible(self.path, str(changed), type_text(current), type_text(ours)) from None
        if widened is current:
            return None
        if not self.add_columns:
            raise SchemaIncompatible(
                self.path, f"the batch has columns the table lacks: {', '.join(added_columns(current, widened))}, "
                "and its schema may not change (sink.schema_evolution is fail: set it to add_columns to add them)",
                type_text(current), type_text(ours))
        return DeltaSchema.from_json(json.dumps(widened))

    @staticmethod
    def _committed_version(table: DeltaTable, marker: str, base: int | None = None) -> int | None:
        """The version our commit became: other members' commits may follow it at once, so it is
        found by its marker among the versions after the snapshot it was built on (``base``;
        default ``table``'s version, for a commit that leaves ``table`` on its snapshot)."""
        base = table.version() if base is None else base
        table.update_incremental()
        for entry in table.history(limit=max(table.version() - base, 1)):
            if entry.get(COMMIT_MARKER) == marker:
                return int(entry["version"])
        return None

    def _create(self) -> None:
        try:
            write_deltalake(self.path, self.schema.empty_table(), mode="ignore",
                            partition_by=self.partition_by or None,
                            storage_options=self.storage_options or None,
                            configuration={"delta.checkpointInterval": str(CHECKPOINT_INTERVAL)})
        except CommitFailedError:
            pass  # another member created it first

    @staticmethod
    def _txn(app_id: str, version: int) -> Transaction:
        return Transaction(app_id, int(version), int(time.time() * 1000))


def offset_app_id(app_id: str, tp: TopicPartition) -> str:
    """The Delta application-transaction id holding ``tp``'s next offset in a table of ``app_id``."""
    return f"{app_id}:offset:{tp.topic}:{tp.partition}"


def read_recorded_offsets(path: str, app_id: str, partitions: Iterable[TopicPartition],
                          storage_options: Mapping[str, str] | None = None) -> dict[TopicPartition, int | None]:
    """Recorded next offsets of ``partitions`` without creating the table ({} if it is missing)."""
    try:
        table = DeltaTable(str(path), storage_options=dict(storage_options or {}) or None)
    except TableNotFoundError:
        return {}
    return _versions(table, lambda tp: offset_app_id(app_id, tp), partitions)


def _versions(table: DeltaTable, app_id_of: Callable[[TopicPartition], str],
              partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
    """Each partition's version of its transaction ``app_id_of(tp)`` in ``table``'s snapshot
    (None: never recorded)."""
    return {tp: _transaction_version(table, app_id_of(tp)) for tp in partitions}


_ASKED: dict[int, tuple[weakref.ref, int, dict[str, int | None]]] = {}  # by id(snapshot): DeltaTable is unhashable
_ASKED_LOCK = threading.RLock()  # a snapshot collected while it is held forgets itself


def _transaction_version(table: DeltaTable, app_id: str) -> int | None:
    """``table.transaction_version(app_id)``, asked of delta-rs once per snapshot object and
    version: each call replays the log's transactions (about a millisecond on a small table,
    more behind a large checkpoint), and a batch looks up the same owner and offset
    transactions when it plans and again when it commits on the same snapshot. A version's
    transactions never change; a snapshot brought to a new version asks again. The answers go
    with the snapshot object: its entry is dropped when it is collected (a weak reference's
    callback, which runs before its id can be reused)."""
    version = table.version()
    with _ASKED_LOCK:
        entry = _ASKED.get(id(table))
        if entry is not None and entry[1] == version and app_id in entry[2]:
            return entry[2][app_id]
    found = table.transaction_version(app_id)
    if table.version() != version:  # brought up to date meanwhile: the answer is of either version
        return found
    with _ASKED_LOCK:
        entry = _ASKED.get(id(table))
        if entry is None:
            entry = (weakref.ref(table, functools.partial(_forget_asked, id(table))), version, {})
        elif entry[1] != version:
            entry = (entry[0], version, {})
        _ASKED[id(table)] = entry
        entry[2][app_id] = found
    return found


def _forget_asked(key: int, _gone: weakref.ref) -> None:
    with _ASKED_LOCK:
        _ASKED.pop(key, None)
