"""Change events merged into an upsert table (pipelines.runtime.changes, sinks.upsert_table), with
the real Spark classification, real Delta tables and the batch writer in between: each batch's
last change per key is inserted, updated or deleted in the commit that records the batch's
offsets; a replayed batch changes nothing (not even the table version); a partly replayed one
applies only what the table lacks; a fenced writer changes nothing. Tables are read back with
delta-spark and compared with a plain-Python model of the same events."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.batch_writer import BatchWriter, TableTargets
from pipelines.runtime.changes import ChangeSpec, RowColumnClash, classified_changes
from pipelines.runtime.pipeline_tables import arrow_schema, upsert_schema
from pipelines.runtime.records import KAFKA_ROW_DDL, RecordFormat, classify, dead_letters
from sinks.txn_table import FencedWriterError, TxnDeltaTable
from sinks.upsert_table import UpsertDeltaTable

pytestmark = pytest.mark.integration
ROW = "STRUCT<id: BIGINT, name: STRING>"
FMT = RecordFormat("json", f"before {ROW}, after {ROW}, op STRING, source STRUCT<lsn: BIGINT>", 1000)
SPEC = ChangeSpec(key=("id",), order_by="source.lsn", delete_on_tombstone=True, envelope="debezium")
TP0, TP1 = TopicPartition("cdc", 0), TopicPartition("cdc", 1)
WHEN = datetime(2026, 1, 1, tzinfo=timezone.utc)


def event(op: str, key: int, name: str | None, lsn: int) -> tuple[bytes, bytes]:
    row = {"id": key, "name": name}
    value = {"before": row if op in ("u", "d") else None, "after": None if op == "d" else row, "op": op,
             "source": {"lsn": lsn}}
    return json.dumps({"id": key}).encode(), json.dumps(value).encode()


def tombstone(key: int) -> tuple[bytes, None]:
    return json.dumps({"payload": {"id": key}}).encode(), None


class Log:
    """The planned ranges of each batch, as the query's offset log gives them."""

    def __init__(self):
        self.planned: dict[int, tuple[OffsetRange, ...]] = {}

    def ranges(self, batch_id):
        return self.planned[batch_id]


def kafka_rows(spark, records: dict[TopicPartition, list], start: dict[TopicPartition, int]):
    rows = [(key, value, tp.topic, tp.partition, start.get(tp, 0) + i, WHEN, 0)
            for tp, items in records.items() for i, (key, value) in enumerate(items)]
    return spark.createDataFrame(rows, KAFKA_ROW_DDL)


def open_targets(spark, tmp_path, partitions=(TP0, TP1), fmt: RecordFormat = FMT,
                 spec: ChangeSpec = SPEC) -> TableTargets:
    classified = classify(spark.createDataFrame([], KAFKA_ROW_DDL), fmt)
    table = UpsertDeltaTable(str(tmp_path / "table"), "p", upsert_schema(classified, fmt, spec), spec.key)
    dead = TxnDeltaTable(str(tmp_path / "dead"), "p",
                         arrow_schema(dead_letters(classified_changes(classified, fmt, spec), fmt)), count_by="reason")
    return TableTargets(table, dead, table.claim(partitions), dead.claim(partitions))


class Stream:
    """Batches written one after the other through a BatchWriter, as a query would."""

    def __init__(self, spark, targets: TableTargets, fmt: RecordFormat = FMT, spec: ChangeSpec = SPEC):
        self.spark, self.targets, self.log, self.reports = spark, targets, Log(), []
        self.next: dict[TopicPartition, int] = {}
        self.batch_id = 0
        self.writer = BatchWriter(fmt, None, targets, self.log, commit_kafka=lambda offsets, meta: True,
                                  report=self.reports.append, refused=lambda batch_id, err: None, changes=spec)

    def write(self, records: dict[TopicPartition, list], start: dict[TopicPartition, int] | None = None,
              writer: BatchWriter | None = None) -> None:
        start = dict(self.next) if start is None else start
        ranges = tuple(OffsetRange(tp.topic, tp.partition, start.get(tp, 0), start.get(tp, 0) + len(items))
                       for tp, items in records.items())
        self.log.planned[self.batch_id] = ranges
        (writer or self.writer)(kafka_rows(self.spark, records, start), self.batch_id)
        self.batch_id += 1
        for rng in ranges:
            self.next[rng.tp] = max(self.next.get(rng.tp, 0), rng.end)


def table_rows(spark, table) -> dict[int, str | None]:
    rows = spark.read.format("delta").load(table.path).collect()
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)), f"two rows of one key in {table.path}"
    return {r.id: r.name for r in rows}


def model(batches: list[dict[TopicPartition, list]]) -> dict[int, str | None]:
    """The table a plain-Python reader expects: per batch, each key's event with the highest lsn
    (ties: the later offset) applied; a tombstone deletes."""
    table: dict[int, str | None] = {}
    for records in batches:
        last: dict[int, tuple] = {}
        for tp, items in records.items():
            for offset, (key, value) in enumerate(items):
                ident = json.loads(key).get("id", json.loads(key).get("payload", {}).get("id"))
                change = json.loads(value) if value is not None else None
                order = (change["source"]["lsn"] if change else -1, offset)
                if ident not in last or order > last[ident][0]:
                    last[ident] = (order, change)
        for ident, (_, change) in last.items():
            if change is None or change["op"] == "d":
                table.pop(ident, None)
            else:
                table[ident] = change["after"]["name"]
    return table


def test_changes_are_inserted_updated_and_deleted_as_the_events_say(spark, tmp_path):
    targets = open_targets(spark, tmp_path)
    stream = Stream(spark, targets)
    first = {TP0: [event("c", 1, "a", 10), event("c", 2, "b", 11), event("u", 1, "a2", 12)],
             TP1: [event("c", 3, "c", 5), event("r", 4, "d", 6)]}
    second = {TP0: [event("d", 2, None, 13), event("u", 1, "a3", 14)],
              TP1: [tombstone(3), event("u", 4, "d2", 8), event("u", 4, "d-old", 7)]}
    stream.write(first)
    stream.write(second)
    assert table_rows(spark, targets.table) == model([first, second]) == {1: "a3", 4: "d2"}
    assert targets.table.recorded_offsets([TP0, TP1]) == {TP0: 5, TP1: 5}
    assert stream.reports[1].rows_written == 4  # one change per key of the batch
    assert stream.reports[1].merged == {"inserted": 0, "updated": 2, "deleted": 2}


def test_a_change_without_its_key_is_a_dead_letter(spark, tmp_path):
    targets = open_targets(spark, tmp_path)
    no_image = json.dumps({"before": None, "after": None, "op": "t", "source": {"lsn": 1}}).encode()
    Stream(spark, targets).write({TP0: [event("c", 1, "a", 1), (b"{}", no_image), (b"not json", None)]})
    assert table_rows(spark, targets.table) == {1: "a"}
    dead = {r.offset: r.reason for r in spark.read.format("delta").load(targets.dead_table.path).collect()}
    assert dead == {1: "missing_key", 2: "missing_key"}


def test_a_replayed_batch_leaves_the_table_version_unchanged(spark, tmp_path):
    targets = open_targets(spark, tmp_path)
    stream = Stream(spark, targets)
    batch = {TP0: [event("c", 1, "a", 1), event("c", 2, "b", 2)]}
    stream.write(batch)
    version = targets.table.snapshot().version()
    stream.write({TP0: [event("c", 1, "changed on replay", 1), event("d", 2, None, 2)]}, start={TP0: 0})
    assert targets.table.snapshot().version() == version
    assert table_rows(spark, targets.table) == {1: "a", 2: "b"}


def test_a_partly_replayed_batch_applies_only_the_changes_the_table_lacks(spark, tmp_path):
    targets = open_targets(spark, tmp_path)
    stream = Stream(spark, targets)
    stream.write({TP0: [event("c", 1, "a", 1), event("c", 2, "b", 2)]})
    # offsets 0-1 again (now saying otherwise), then 2-3: only 2-3 may change the table
    stream.write({TP0: [event("u", 1, "replayed", 1), event("d", 2, None, 2), event("u", 2, "b2", 3),
                        event("c", 5, "e", 4)]}, start={TP0: 0})
    assert table_rows(spark, targets.table) == {1: "a", 2: "b2", 5: "e"}
    assert targets.table.recorded_offsets([TP0]) == {TP0: 4}


def test_a_fenced_writer_changes_nothing(spark, tmp_path):
    targets = open_targets(spark, tmp_path)
    stream = Stream(spark, targets)
    stream.write({TP0: [event("c", 1, "a", 1)]})
    targets.table.claim([TP0])  # another member took the partition over
    version = targets.table.snapshot().version()
    with pytest.raises(FencedWriterError):
        stream.write({TP0: [event("u", 1, "stale", 2)]})
    assert targets.table.snapshot().version() == version
    assert table_rows(spark, targets.table) == {1: "a"}


def test_a_tombstone_wins_over_the_changes_before_it_and_loses_to_those_after_it(spark, tmp_path):
    targets = open_targets(spark, tmp_path)
    Stream(spark, targets).write({TP0: [event("c", 1, "a", 9), tombstone(1), event("c", 2, "b", 5), tombstone(2),
                                        event("c", 2, "b2", 6)]})
    assert table_rows(spark, targets.table) == {2: "b2"}


def test_events_under_payload_as_debeziums_json_converter_with_schemas_writes_them(spark, tmp_path):
    fmt = RecordFormat("json", f"schema STRING, payload STRUCT<before: {ROW}, after: {ROW}, op: STRING, "
                               "source: STRUCT<lsn: BIGINT>>", 1000)
    spec = ChangeSpec(key=("id",), order_by="payload.source.lsn", envelope="debezium")
    targets = open_targets(spark, tmp_path, [TP0], fmt, spec)
    wrapped = [(key, json.dumps({"schema": "...", "payload": json.loads(value)}).encode())
               for key, value in (event("c", 1, "a", 1), event("c", 2, "b", 2), event("d", 1, None, 3))]
    Stream(spark, targets, fmt, spec).write({TP0: wrapped})
    assert table_rows(spark, targets.table) == {2: "b"}
    assert [f.name for f in targets.table.snapshot().schema().fields][-2:] == ["id", "name"]


def test_a_row_field_named_like_a_record_column_is_refused(spark):
    row = "STRUCT<id: BIGINT, offset: BIGINT>"
    fmt = RecordFormat("json", f"before {row}, after {row}, op STRING", 1000)
    with pytest.raises(RowColumnClash, match="offset"):
        classified_changes(classify(spark.createDataFrame([], KAFKA_ROW_DDL), fmt), fmt,
                           ChangeSpec(key=("id",), envelope="debezium"))


def test_raw_records_keyed_by_their_kafka_key_mirror_a_compacted_topic(spark, tmp_path):
    fmt = RecordFormat("raw", None, 1000)
    spec = ChangeSpec(key=("key",), delete_on_tombstone=True)
    targets = open_targets(spark, tmp_path, [TP0], fmt, spec)
    records = [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"b", None), (None, b"keyless")]
    Stream(spark, targets, fmt, spec).write({TP0: records})
    got = spark.read.format("delta").load(targets.table.path).collect()
    assert [(r.key, bytes(r.value)) for r in got] == [("a", b"3")]
    reasons = [r.reason for r in spark.read.format("delta").load(targets.dead_table.path).collect()]
    assert reasons == ["missing_key"]
