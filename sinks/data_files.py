"""Delta data files written where the rows are, described to the committer by metadata only.

A :class:`DataFileWriter` runs inside a Spark task (an executor's Python worker) or in any
process: it streams Arrow record batches into Parquet files under the table's location, through
deltalake's own object store (:class:`deltalake.fs.DeltaStorageHandler`, so every scheme and
storage option the commit uses works the same: local paths, ``file://``, ``s3://``/``s3a://``,
``gs://``, ``abfss://``, ``hdfs://``), and returns one :class:`DataFile` per file: relative path,
size, partition values, record count and Delta statistics. Nothing is committed here: a file
becomes part of the table only when the driver commits its ``add`` action (see
:mod:`sinks.txn_table`). A retried or speculative task therefore leaves at most an unreferenced
file, never a row twice; a full vacuum (delta-spark's ``VACUUM``, deltalake's
``vacuum(full=True)``) removes unreferenced files once they are older than the table's retention.

Rows are filtered by ``keep_from`` while they are written: only rows of the listed partitions at
or above the partition's offset are kept (a partial replay), and the skipped rows are counted.
Memory per task is bounded by one row group per open file (``row_group_bytes``), not by the
batch. Not thread safe; one writer per task.
"""
from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from groupmgr.core import TopicPartition
from sinks.table_file_systems import FILE_SYSTEMS

ROW_GROUP_BYTES = 64 * 1024 * 1024
STRING_STATS_PREFIX = 32          # like delta-spark's dataSkippingStringPrefixLength
DECIMAL_STATS_MAX_PRECISION = 15  # beyond this a JSON float would not round-trip exactly

# What a Spark task returns per file: metadata only.
METADATA_SCHEMA = pa.schema([
    ("path", pa.string()), ("size", pa.int64()), ("partition_values", pa.string()),
    ("num_records", pa.int64()), ("stats", pa.string()), ("rows_skipped", pa.int64()),
    ("table", pa.string()), ("counts", pa.string()),
])
METADATA_DDL = ("path STRING, size BIGINT, partition_values STRING, num_records BIGINT, "
                "stats STRING, rows_skipped BIGINT, table STRING, counts STRING")


@dataclass(frozen=True)
class DataFile:
    """One written Parquet file: ``path`` is relative to the table root and not URI-encoded
    (deltalake encodes it in the log); ``stats`` is Delta's per-file statistics JSON."""

    path: str
    size: int
    partition_values: tuple[tuple[str, str | None], ...]
    num_records: int
    stats: str
    counts: tuple[tuple[str, int], ...] = ()  # rows per value of the writer's ``count_by`` column


@dataclass(frozen=True)
class WrittenFiles:
    """What one write of a batch produced: its files and how many rows it skipped as replays."""

    files: tuple[DataFile, ...] = ()
    rows_skipped: int = 0

    @property
    def rows_written(self) -> int:
        return sum(f.num_records for f in self.files)

    @property
    def counts(self) -> dict[str, int]:
        """Rows written per value of the writer's ``count_by`` column, over every file."""
        total: dict[str, int] = {}
        for f in self.files:
            for value, n in f.counts:
                total[value] = total.get(value, 0) + n
        return total

    @classmethod
    def from_metadata(cls, rows: Iterable[Mapping], table: str | None = None) -> "WrittenFiles":
        """Collect the metadata rows of every task (rows without a path only carry a skip count);
        with ``table``, only the rows of that table."""
        files, skipped = [], 0
        for row in rows:
            if table is not None and row.get("table") != table:
                continue
            skipped += int(row["rows_skipped"] or 0)
            if row["path"] is not None:
                values = tuple(sorted(json.loads(row["partition_values"]).items()))
                counts = tuple(sorted(json.loads(row.get("counts") or "{}").items()))
                files.append(DataFile(row["path"], int(row["size"]), values, int(row["num_records"]),
                                      row["stats"], counts))
        return cls(tuple(sorted(files, key=lambda f: f.path)), skipped)


@dataclass(frozen=True)
class DataFileWriter:
    """Writes a table's data files; picklable (it travels to executors with its storage options,
    which only the executors' object-store clients read)."""

    table_uri: str
    schema: pa.Schema                          # the table's schema, partition columns included
    partition_by: tuple[str, ...] = ()
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    file_prefix: str = "part"
    row_group_bytes: int = ROW_GROUP_BYTES
    count_by: str | None = None                # a column whose values each file counts (DataFile.counts)

    @property
    def file_schema(self) -> pa.Schema:
        """The schema inside the Parquet files: partition columns live in the log, not the files."""
        return pa.schema([f for f in self.schema if f.name not in self.partition_by])

    def write(self, batches: Iterable[pa.RecordBatch],
              keep_from: Mapping[TopicPartition, int] | None = None) -> WrittenFiles:
        """Write ``batches`` (rows carrying ``topic``, ``partition``, ``offset``) into new files.

        ``keep_from``: when given, only rows of those partitions at or above their offset are
        written; the others are counted as skipped. Returns the files written (none for no rows)."""
        files = self.open(keep_from)
        try:
            for batch in batches:
                files.add(batch)
            return files.finish()
        except BaseException:
            files.abandon()
            raise

    def open(self, keep_from: Mapping[TopicPartition, int] | None = None) -> "OpenFileSet":
        """Start a write that is fed batch by batch (:meth:`write` is open, add each, finish)."""
        return OpenFileSet(self, keep_from)

    def write_metadata(self, batches: Iterator[pa.RecordBatch],
                       keep_from: Mapping[TopicPartition, int] | None = None) -> Iterator[pa.RecordBatch]:
        """:meth:`write` shaped for ``DataFrame.mapInArrow``: yields the files' metadata rows
        (plus one path-less row carrying the skip count)."""
        yield metadata_batch(self.write(batches, keep_from))

    def split_by_partition(self, table: pa.Table) -> Iterator[tuple[tuple[tuple[str, str | None], ...], pa.Table]]:
        """``table``'s rows grouped by their partition values (Delta's text form)."""
        if table.num_rows == 0:
            return
        if not self.partition_by:
            yield (), table
            return
        keys = table.select(list(self.partition_by))
        for group in keys.group_by(list(self.partition_by), use_threads=False).aggregate([]).to_pylist():
            mask = None
            for column, value in group.items():
                test = pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
                mask = test if mask is None else pc.and_(mask, test)
            values = tuple((c, partition_value_text(group[c])) for c in self.partition_by)
            yield values, table.filter(mask)

    def new_file_path(self, values: tuple[tuple[str, str | None], ...]) -> str:
        """A new file's path relative to the table root, under its partition directories."""
        directory = "".join(f"{column}={_escape(value)}/" for column, value in values)
        return f"{directory}{self.file_prefix}-{uuid.uuid4().hex}.snappy.parquet"


class OpenFileSet:
    """One write of a table's files in progress, fed batch by batch (one per task; several may be
    open in one task, e.g. both tables of a micro-batch written in one pass). :meth:`finish`
    closes the files and describes them; :meth:`abandon` leaves them unreferenced."""

    def __init__(self, writer: DataFileWriter, keep_from: Mapping[TopicPartition, int] | None):
        self.writer, self.keep_from = writer, keep_from
        self._fs = None
        self.open_files: dict[tuple[tuple[str, str | None], ...], _OpenFile] = {}
        self.skipped = 0

    @property
    def fs(self):
        """The table's file system, taken with the first file (a write that keeps no row, the
        runner's warm-up, needs neither a connection nor the table's directory to exist yet) from
        those this process keeps (:data:`sinks.table_file_systems.FILE_SYSTEMS`)."""
        if self._fs is None:
            self._fs = FILE_SYSTEMS.get(self.writer.table_uri, self.writer.storage_options)
        return self._fs

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Write ``batch``'s rows (those ``keep_from`` keeps) into the file of their partition values."""
        writer = self.writer
        table = (batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])).cast(writer.schema)
        if self.keep_from is not None:
            kept = _kept(table, self.keep_from)
            self.skipped += table.num_rows - kept.num_rows
            table = kept
        for values, part in writer.split_by_partition(table):
            if values not in self.open_files:
                self.open_files[values] = _OpenFile(self.fs, writer.new_file_path(values), writer.file_schema,
                                                    writer.row_group_bytes, writer.count_by)
            self.open_files[values].add(part.select(writer.file_schema.names))

    def finish(self) -> WrittenFiles:
        """Close every file (each then holds whole row groups and a footer) and describe them."""
        return WrittenFiles(tuple(sorted((f.close(values) for values, f in self.open_files.items()),
                                         key=lambda f: f.path)), self.skipped)

    def abandon(self) -> None:
        """Close what can be closed; no file of this set will ever be committed."""
        for f in self.open_files.values():
            f.abandon()


def metadata_batch(written: WrittenFiles, table: str | None = None) -> pa.RecordBatch:
    """The metadata rows a Spark task returns for ``written``: one per file plus one path-less row
    carrying the skip count; ``table`` names the table when a task writes several."""
    rows = [{"path": f.path, "size": f.size, "partition_values": json.dumps(dict(f.partition_values)),
             "num_records": f.num_records, "stats": f.stats, "rows_skipped": 0, "table": table,
             "counts": json.dumps(dict(f.counts)) if f.counts else None}
            for f in written.files]
    rows.append({"path": None, "size": None, "partition_values": None, "num_records": None,
                 "stats": None, "rows_skipped": written.rows_skipped, "table": table, "counts": None})
    return pa.RecordBatch.from_pylist(rows, schema=METADATA_SCHEMA)


class _OpenFile:
    """One Parquet file being written: buffers up to one row group, keeps running statistics."""

    def __init__(self, fs, path: str, schema: pa.Schema, row_group_bytes: int, count_by: str | None = None):
        self.fs, self.path, self.row_group_bytes, self.count_by = fs, path, row_group_bytes, count_by
        self.counts: dict[str, int] = {}
        self.stream = fs.open_output_stream(path)
        self.writer = pq.ParquetWriter(self.stream, schema, compression="snappy")
        self.buffer: list[pa.Table] = []
        self.buffered = 0
        self.stats = StatsCollector(schema)

    def add(self, table: pa.Table) -> None:
        self.stats.add(table)
        if self.count_by is not None:
            for entry in pc.value_counts(table[self.count_by]).to_pylist():  # a few distinct values
                key = "" if entry["values"] is None else str(entry["values"])
                self.counts[key] = self.counts.get(key, 0) + entry["counts"]
        self.buffer.append(table)
        self.buffered += table.nbytes
        if self.buffered >= self.row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if self.buffer:
            self.writer.write_table(pa.concat_tables(self.buffer))
            self.buffer, self.buffered = [], 0

    def close(self, values) -> DataFile:
        """Write the footer and close; the file's size is what the stream wrote (no round trip to
        the store to ask)."""
        self._flush()
        self.writer.close()
        size = self.stream.tell()
        self.stream.close()
        return DataFile(self.path, int(size), values, self.stats.num_records, self.stats.to_json(),
                        tuple(sorted(self.counts.items())))

    def abandon(self) -> None:
        try:
            self.writer.close()
            self.stream.close()
        except Exception:  # noqa: BLE001 - the file is unreferenced either way; vacuum removes it
            pass


def _kept(table: pa.Table, keep_from: Mapping[TopicPartition, int]) -> pa.Table:
    """The rows of ``table`` that ``keep_from`` keeps: those of its partitions at or above their
    offset. A table of one partition (a block read from one range) is compared with that
    partition's offset alone, and returned as it is when every row is kept."""
    if table.num_rows == 0:
        return table
    topics, partitions = pc.unique(table["topic"]), pc.unique(table["partition"])
    one = len(topics) == 1 and len(partitions) == 1 and topics[0].is_valid and partitions[0].is_valid
    if one and table["offset"].null_count == 0:
        first = keep_from.get(TopicPartition(topics[0].as_py(), partitions[0].as_py()))
        if first is None:
            return table.slice(0, 0)
        if pc.min(table["offset"]).as_py() >= first:
            return table
        return table.filter(pc.greater_equal(table["offset"], first))
    return table.filter(_keep_mask(table, keep_from))


def _keep_mask(table: pa.Table, keep_from: Mapping[TopicPartition, int]) -> pa.Array:
    mask = pa.repeat(False, table.num_rows)
    for tp, first in keep_from.items():
        in_partition = pc.and_(pc.equal(table["topic"], tp.topic), pc.equal(table["partition"], tp.partition))
        mask = pc.or_(mask, pc.and_(in_partition, pc.greater_equal(table["offset"], first)))
    return mask


def _escape(value: str | None) -> str:
    """A partition value as a directory name (Hive style; null is ``__HIVE_DEFAULT_PARTITION__``)."""
    if value is None:
        return "__HIVE_DEFAULT_PARTITION__"
    return quote(value, safe="-_.~")


def partition_value_text(value) -> str | None:
    """Delta's string form of a partition value (protocol: partition value serialization; an
    empty string is null)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None) if value.tzinfo else value
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return str(value)


class StatsCollector:
    """Delta per-file statistics (numRecords, minValues, maxValues, nullCount), accumulated over
    the chunks of one file, in the JSON form delta-rs and delta-spark write and read.

    Min/max are kept for numbers, booleans, dates, timestamps, strings (min cut to a 32-character
    prefix; max dropped when longer, since a cut max would be too small) and decimals up to
    precision 15; nested structs recurse; binary, list and map columns get no statistics.
    Timestamps are written in milliseconds, min rounded down and max up, so the bounds hold."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.num_records = 0
        self._min: dict[tuple[str, ...], object] = {}
        self._max: dict[tuple[str, ...], object] = {}
        self._nulls: dict[tuple[str, ...], int] = {}
        self._no_max: set[tuple[str, ...]] = set()

    def add(self, table: pa.Table) -> None:
        self.num_records += table.num_rows
        for fld in self.schema:
            self._column((fld.name,), fld.type, table[fld.name].combine_chunks())

    def _column(self, name: tuple[str, ...], type_: pa.DataType, array: pa.Array) -> None:
        if pa.types.is_struct(type_):
            for index, child in enumerate(array.flatten()):
                self._column(name + (type_.field(index).name,), type_.field(index).type, child)
            return
        if not _has_stats(type_):
            return
        self._nulls[name] = self._nulls.get(name, 0) + array.null_count
        if pa.types.is_floating(type_):
            array = pc.filter(array, pc.invert(pc.is_nan(array)))
        if len(array) == array.null_count:
            return
        bounds = pc.min_max(array).as_py()
        low, high = bounds["min"], bounds["max"]
        if name not in self._min or low < self._min[name]:
            self._min[name] = low
        if name not in self._max or high > self._max[name]:
            self._max[name] = high

    def to_json(self) -> str:
        mins, maxs, nulls = {}, {}, {}
        for name, count in self._nulls.items():
            _put(nulls, name, count)
        for name, value in self._min.items():
            text = _stat_value(value, upper=False)
            if text is not None:
                _put(mins, name, text)
        for name, value in self._max.items():
            text = _stat_value(value, upper=True)
            if text is not None:
                _put(maxs, name, text)
        return json.dumps({"numRecords": self.num_records, "minValues": mins, "maxValues": maxs,
                           "nullCount": nulls}, separators=(",", ":"))


def _has_stats(type_: pa.DataType) -> bool:
    if pa.types.is_decimal(type_):
        return type_.precision <= DECIMAL_STATS_MAX_PRECISION
    return (pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_boolean(type_)
            or pa.types.is_date(type_) or pa.types.is_string(type_) or pa.types.is_large_string(type_)
            or (pa.types.is_timestamp(type_) and type_.tz is not None))


def _stat_value(value, upper: bool):
    if isinstance(value, dt.datetime):
        value = value.astimezone(dt.timezone.utc)
        millis = value.replace(microsecond=value.microsecond // 1000 * 1000)
        if upper and millis != value:
            millis += dt.timedelta(milliseconds=1)
        return millis.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis.microsecond // 1000:03d}Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, str):
        if len(value) <= STRING_STATS_PREFIX:
            return value
        return None if upper else value[:STRING_STATS_PREFIX]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, float) and math.isinf(value):
        return None
    return value


def _put(tree: dict, name: Sequence[str], value) -> None:
    for part in name[:-1]:
        tree = tree.setdefault(part, {})
    tree[name[-1]] = value


@dataclass(frozen=True)
class UnreferencedFiles:
    """Data files under a table that its current version does not reference: left by a retried
    task or by a driver that stopped between writing and committing (and, after an OPTIMIZE, the
    files it replaced). A full vacuum deletes them once they are older than the retention period."""

    count: int
    bytes: int


def unreferenced_files(table_uri: str, storage_options: Mapping[str, str] | None = None) -> UnreferencedFiles:
    """List the table's location and compare it with the current version's files. Lists the
    whole location: an on-demand report (``scg describe``), never on the write path."""
    from urllib.parse import unquote

    from deltalake import DeltaTable
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import FileSelector, FileType, PyFileSystem

    options = dict(storage_options or {}) or None
    actions = pa.table(DeltaTable(table_uri, storage_options=options).get_add_actions(flatten=True))
    referenced = {unquote(path) for path in actions["path"].to_pylist()}  # the log holds URIs
    fs = PyFileSystem(DeltaStorageHandler(table_uri, options))
    orphans = [info for info in fs.get_file_info(FileSelector("", recursive=True))
               if info.type == FileType.File and info.path.endswith(".parquet")
               and not info.path.startswith("_delta_log") and info.path not in referenced]
    return UnreferencedFiles(len(orphans), sum(info.size or 0 for info in orphans))
