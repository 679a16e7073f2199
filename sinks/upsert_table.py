"""A Delta table holding one row per key, changed exactly once per Kafka partition by merges.

The same per-partition ``txn`` protocol as :class:`sinks.txn_table.TxnDeltaTable` (owner epochs,
next offsets, one CAS commit per batch), with a merge instead of an append: a batch's changes
(at most one per key, collapsed by the caller) are merged into the table by deltalake's MERGE —
a matched key is updated or deleted, an unmatched one inserted unless its change is a delete —
and that merge's commit carries the batch's offset and owner transactions. So the table's rows
and its recorded offsets change together or not at all: a batch replayed after its commit finds
its offsets recorded, merges nothing and commits nothing (the table version stays), and a
partially replayed one merges only the changes at or above the recorded offsets (the caller's
``changes`` gets the plan's ``keep_from``).

deltalake's MERGE runs in this process (the Spark driver): it reads the files holding the keys
it may match and writes them again with the changed rows (copy on write), so a merge costs about
the size of the files it touches, not only the number of changes. It commits on the snapshot it
read, and fails on any concurrent commit that added or removed data or set one of its
transactions: a stale writer and a concurrent merge of another member both make it re-read,
re-check the owners and merge again (:data:`MERGE_ATTEMPTS` times with backoff). Keeps no state
between calls; any number of processes may share the table.
"""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from groupmgr.core import OffsetRange, TopicPartition
from sinks.schema_widening import type_text
from sinks.txn_table import (COMMIT_MARKER, CommitPlan, CommitResult, SchemaIncompatible, SinkError,
                             StorageUnavailable, TxnDeltaTable)

MERGE_ATTEMPTS = 10
DELETE = "_change_delete"   # the column of a change that says it deletes its key
SOURCE, TARGET = "s", "t"   # the merge's aliases
MERGED = ("inserted", "updated", "deleted")  # what a merge did to the table's rows (CommitResult.counts)

Changes = Callable[[CommitPlan], pa.Table]


def quoted(name: str) -> str:
    """A column name as a DataFusion SQL identifier (case and any character kept)."""
    return '"' + name.replace('"', '""') + '"'


class UpsertDeltaTable(TxnDeltaTable):
    """A Delta table at ``path`` holding the last row of each ``key`` (module docstring). Its
    ``schema`` is the row's; a batch's changes carry one more boolean column, :data:`DELETE`."""

    def __init__(self, path: str, app_id: str, schema: pa.Schema, key: Sequence[str],
                 partition_by: Sequence[str] = (), storage_options: Mapping[str, str] | None = None):
        super().__init__(path, app_id, schema, partition_by, storage_options)
        self.key = tuple(key)

    def with_schema(self, schema: pa.Schema, add_columns: bool) -> "UpsertDeltaTable":
        """The same table with rows of ``schema`` (its schema never changes by itself: ``add_columns``
        is not taken)."""
        return UpsertDeltaTable(self.path, self.app_id, schema, self.key, self.partition_by, self.storage_options)

    def commit_changes(self, ranges: Sequence[OffsetRange], epochs: Mapping[TopicPartition, int],
                       changes: Changes) -> CommitResult:
        """Decide on a snapshot as :meth:`commit_files` does, have ``changes`` give the plan's
        changes (at most one per key; the table's columns and :data:`DELETE`), and merge them
        with the offset and owner transactions in one commit on that snapshot. A full replay
        merges and commits nothing. Raises FencedWriterError or OffsetGapError without writing;
        SchemaIncompatible when the changes' columns are not the table's; SinkError when
        conflicts persist."""
        plan, rows = None, None
        for attempt in range(MERGE_ATTEMPTS):
            table = self.snapshot()
            self._check_owner(table, ranges, epochs)
            decided = self._plan(table, ranges)
            if not decided.new_versions:
                return CommitResult(None, 0, 0, decided.replayed)
            if rows is None or decided.keep_from != plan.keep_from:
                plan, rows = decided, changes(decided)
            txns = [self._txn(self.offset_app_id(tp), v) for tp, v in decided.new_versions.items()]
            txns += [self._txn(self.owner_app_id(tp), epochs[tp]) for tp in decided.new_versions]
            marker = uuid.uuid4().hex
            base, started = table.version(), time.monotonic()
            merged = self._try_merge(table, rows, txns, marker)
            if merged is not None:
                return CommitResult(self._committed_version(table, marker, base), rows.num_rows, 0,
                                    decided.replayed, time.monotonic() - started, merged)
            time.sleep(min(0.05 * 2 ** attempt, 2.0))
        raise SinkError(f"{self.path}: the merge kept conflicting after {MERGE_ATTEMPTS} attempts")

    def _try_merge(self, table: DeltaTable, rows: pa.Table, txns, marker: str) -> dict[str, int] | None:
        """One merge of ``rows`` with ``txns`` on ``table``'s snapshot: the rows inserted, updated
        and deleted; None when a concurrent commit conflicts. A batch without changes commits
        the transactions alone."""
        if rows.num_rows == 0:
            return dict.fromkeys(MERGED, 0) if self._try_commit(table, (), txns, marker) else None
        self._check_columns(table, rows)
        columns = {quoted(c): f"{SOURCE}.{quoted(c)}" for c in self.schema.names}
        matches = " AND ".join(f"{TARGET}.{quoted(k)} = {SOURCE}.{quoted(k)}" for k in self.key)
        deletes = f"{SOURCE}.{quoted(DELETE)}"
        properties = CommitProperties(app_transactions=txns, custom_metadata={COMMIT_MARKER: marker})
        try:
            metrics = (table.merge(rows, matches, SOURCE, TARGET, commit_properties=properties)
                       .when_matched_delete(predicate=deletes)  # the first clause that matches a row wins
                       .when_matched_update(columns)
                       .when_not_matched_insert(columns, predicate=f"NOT {deletes}")
                       .execute())
        except CommitFailedError:
            return None
        except OSError as exc:
            raise StorageUnavailable(self.path, exc) from None
        except DeltaError as exc:
            raise SinkError(f"{self.path}: the merge failed: {exc}") from None
        return {name: int(metrics.get(f"num_target_rows_{name}", 0)) for name in MERGED}

    def _check_columns(self, table: DeltaTable, rows: pa.Table) -> None:
        """The changes' columns are the table's (and :data:`DELETE`), else SchemaIncompatible."""
        if [c for c in rows.column_names if c != DELETE] != self.schema.names:
            raise SchemaIncompatible(self.path, "the changes' columns are not the table's",
                                     type_text(json.loads(table.schema().to_json())),
                                     ", ".join(rows.column_names))
        self._widened(table)
