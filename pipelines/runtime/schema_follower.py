"""The reader schema and output table each batch is written with, following the registry
subject's latest version (Avro, Protobuf with ``format.reader_schema: latest``).

Before every batch, once the batch's offsets are planned, the member asks the registry for the
subject's latest version. A producer registers its schema before it sends a record with it, so
every record of the batch was written with a version registered before that answer: the batch is
read with a reader schema at least as new as its writers'. When the latest version is not the
one followed so far, its output columns (as :func:`~pipelines.runtime.pipeline_tables.analyse_output`
derives them) are compared with the output table's current schema
(:func:`sinks.schema_widening.widen`):

* no new column (the same columns, or fewer: a removed field's column stays, null in new rows):
  the version is followed;
* new columns: with ``sink.schema_evolution: add_columns`` the version is followed and the batch's
  commit adds them to the table, in the same Delta commit as the batch's rows
  (:class:`~sinks.txn_table.TxnDeltaTable`'s ``add_columns``); with ``fail``,
  :class:`~sinks.txn_table.SchemaIncompatible`;
* a column of another type, or a ``sink.partition_by`` column missing: SchemaIncompatible.

SchemaIncompatible fails the batch before anything is read or written; it is transient, so the
query is retried with backoff and goes on by itself once the subject has a version the table can
take (or the member restarts with another setting). The first batch compares the table even when
the version is the one the member started with (a table written before a restart may lack its
columns). A registry that does not answer, or no longer has the subject, leaves the reader schema
as it is (a warning in the log): the batch's records of known writer schemas are read, and a new
writer schema fails the batch's tasks as ``SCHEMA_REGISTRY_UNAVAILABLE``. Runs on the driver;
thread-safe.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from pipelines.runtime.records import RecordFormat
from pipelines.runtime.registry_client import (RegistrySchemas, RegistryUnavailableError, SubjectNotFoundError,
                                               SubjectVersion)
from sinks.schema_widening import ColumnTypeChanged, added_columns, type_text, widen
from sinks.txn_table import SchemaIncompatible, TxnDeltaTable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchSchema:
    """What one batch is decoded and written with: the record format (its reader schema) and the
    output table, whose file schema is that reader's output columns (``routed``: the further
    output tables of a pipeline that routes records to several, likewise)."""

    fmt: RecordFormat
    table: TxnDeltaTable
    routed: tuple[TxnDeltaTable, ...] = ()

    @property
    def tables(self) -> tuple[TxnDeltaTable, ...]:
        return (self.table, *self.routed)


class SchemaFollower:
    """:meth:`for_batch` gives each batch its :class:`BatchSchema` (rules in the module docstring).

    ``start`` is what the member started with; ``reader_of(text)`` is the record format of a
    reader schema text, ``tables_for(fmt)`` the output tables written with that format's columns."""

    def __init__(self, registry: RegistrySchemas, subject: str, add_columns: bool, start: BatchSchema,
                 reader_of: Callable[[str], RecordFormat],
                 tables_for: Callable[[RecordFormat], tuple[TxnDeltaTable, ...]]):
        self.registry, self.subject, self.add_columns = registry, subject, add_columns
        self._reader_of, self._tables_for = reader_of, tables_for
        self._current = start
        self._version: SubjectVersion | None = None  # the version followed; None before the first batch
        self._lock = threading.Lock()

    def for_batch(self) -> BatchSchema:
        """The BatchSchema of the next batch. Raises SchemaIncompatible."""
        with self._lock:
            try:
                latest = self.registry.subject_version(self.subject, None)
            except (RegistryUnavailableError, SubjectNotFoundError) as exc:
                log.warning("the reader schema stays as it is: %s", exc)
                return self._current
            if self._version is not None and latest.schema_id == self._version.schema_id:
                return self._current
            candidate = self._candidate(latest)
            self._check(latest, candidate)
            log.info("batches are read with version %d of subject %s (schema id %d)",
                     latest.version, self.subject, latest.schema_id)
            self._current, self._version = candidate, latest
            return candidate

    def _candidate(self, latest: SubjectVersion) -> BatchSchema:
        """The BatchSchema of ``latest``; SchemaIncompatible when it has no table columns (a
        type no column can take, a transform that does not analyse over it)."""
        try:
            fmt = self._reader_of(latest.text)
            if fmt == self._current.fmt:
                return self._current
            table, *routed = self._tables_for(fmt)
            return BatchSchema(fmt, table, tuple(routed))
        except ValueError as exc:
            table = self._current.table
            raise SchemaIncompatible(table.path, f"{_version_text(latest)} cannot be read into table "
                                     f"columns: {exc}", type_text(table.delta_schema()), "(none)") from None

    def _check(self, latest: SubjectVersion, candidate: BatchSchema) -> None:
        """Raise SchemaIncompatible when an output table cannot take ``candidate``'s columns."""
        for table in candidate.tables:
            self._check_table(latest, table)

    def _check_table(self, latest: SubjectVersion, table: TxnDeltaTable) -> None:
        current = table.delta_schema()
        ours = table.file_delta_schema()
        which = _version_text(latest)
        missing = [c for c in table.partition_by if c not in table.schema.names]
        if missing:
            raise SchemaIncompatible(table.path, f"{which} has no field for partition column(s) "
                                     f"{', '.join(missing)}", type_text(current), type_text(ours))
        try:
            added = added_columns(current, widen(current, ours))
        except ColumnTypeChanged as changed:
            raise SchemaIncompatible(table.path, f"{which} cannot be written: {changed}",
                                     type_text(current), type_text(ours)) from None
        if added and not self.add_columns:
            raise SchemaIncompatible(
                table.path, f"{which} adds column(s) {', '.join(added)} the table lacks, and "
                "sink.schema_evolution is fail (set it to add_columns to add them)",
                type_text(current), type_text(ours))


def _version_text(version: SubjectVersion) -> str:
    return f"version {version.version} of subject {version.subject} (schema id {version.schema_id})"
