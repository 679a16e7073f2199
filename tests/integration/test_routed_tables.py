"""One micro-batch routed to several output tables (pipelines.runtime.routing), with the real Spark
classification, real Delta tables and the batch writer in between: each record lands in the
tables its route takes or in the dead-letter table (``unrouted``, ``ambiguous_route``), each table
records its own offsets, and a batch that stopped between two tables' commits is written again
with every table skipping what it already holds."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.batch_writer import BatchHooks, BatchWriter, RoutedTable, TableTargets, apply_transform
from pipelines.runtime.pipeline_tables import arrow_schema
from pipelines.runtime.records import KAFKA_ROW_DDL, RecordFormat, classify, dead_letters, good_rows
from pipelines.runtime.routing import Routing
from sinks.txn_table import TxnDeltaTable

pytestmark = pytest.mark.integration
FMT = RecordFormat("json", "id BIGINT, kind STRING", 1000)
ORDERS, EVENTS = TopicPartition("orders", 0), TopicPartition("events", 1)
# (partition, kind) per offset: which table each record's route takes is in EXPECTED
RECORDS = {ORDERS: ["order", "order", "refund", "order"], EVENTS: ["refund", "note", "note", "other", None]}
ROUTES = Routing(conditions=("topic = 'orders'", "kind = 'refund'", "kind = 'note' AND id > 10"),
                 transforms=(None, None, "SELECT topic, partition, offset, id FROM input"))


class PlannedLog:
    def ranges(self, batch_id):
        return tuple(OffsetRange(tp.topic, tp.partition, 0, len(kinds)) for tp, kinds in RECORDS.items())


def _kafka_rows(spark, bad_value_at: tuple[TopicPartition, int] | None = None):
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = []
    for tp, kinds in RECORDS.items():
        for offset, kind in enumerate(kinds):
            value = json.dumps({"id": tp.partition * 10 + offset, "kind": kind}).encode()
            rows.append((b"k", b"not json" if (tp, offset) == bad_value_at else value,
                         tp.topic, tp.partition, offset, when, 0))
    return spark.createDataFrame(rows, KAFKA_ROW_DDL)


def _tables(spark, tmp_path, routing: Routing) -> TableTargets:
    empty = classify(spark.createDataFrame([], KAFKA_ROW_DDL), FMT)
    outputs = [TxnDeltaTable(str(tmp_path / f"out{i}"), "p", arrow_schema(apply_transform(good_rows(empty, FMT), t)))
               for i, t in enumerate(routing.transforms)]
    dead = TxnDeltaTable(str(tmp_path / "dead"), "p", arrow_schema(dead_letters(empty, FMT)))
    tps = list(RECORDS)
    return TableTargets(outputs[0], dead, outputs[0].claim(tps), dead.claim(tps),
                        tuple(RoutedTable(t, t.claim(tps)) for t in outputs[1:]))


def _writer(targets, routing, hooks=BatchHooks(), reports=None):
    return BatchWriter(FMT, None, targets, PlannedLog(), commit_kafka=lambda offsets, meta: True,
                       report=(reports.append if reports is not None else lambda report: None),
                       refused=lambda batch_id, err: None, hooks=hooks, routing=routing)


def _rows(spark, table: TxnDeltaTable) -> set[tuple[str, int, int]]:
    rows = [(r.topic, r.partition, r.offset) for r in spark.read.format("delta").load(table.path).collect()]
    assert len(rows) == len(set(rows)), f"duplicate rows in {table.path}"
    return set(rows)


def _dead(spark, targets) -> dict[tuple[str, int, int], str]:
    return {(r.topic, r.partition, r.offset): r.reason
            for r in spark.read.format("delta").load(targets.dead_table.path).collect()}


def test_each_record_lands_in_the_tables_its_route_takes_or_is_a_dead_letter(spark, tmp_path):
    targets, reports = _tables(spark, tmp_path, ROUTES), []
    _writer(targets, ROUTES, reports=reports)(_kafka_rows(spark, bad_value_at=(EVENTS, 0)), 0)

    orders, refunds, notes = (table for table, _ in targets.outputs)
    assert _rows(spark, orders) == {("orders", 0, 0), ("orders", 0, 1), ("orders", 0, 3)}
    assert _rows(spark, refunds) == set()
    assert _rows(spark, notes) == {("events", 1, 1), ("events", 1, 2)}
    assert [f.name for f in notes.snapshot().schema().fields] == ["topic", "partition", "offset", "id"]
    assert _dead(spark, targets) == {("orders", 0, 2): "ambiguous_route", ("events", 1, 0): "malformed_json",
                                     ("events", 1, 3): "unrouted", ("events", 1, 4): "unrouted"}
    for table, _ in (*targets.outputs, (targets.dead_table, None)):
        assert table.recorded_offsets(list(RECORDS)) == {ORDERS: 4, EVENTS: 5}
    assert reports[0].rows_written == 5 and reports[0].dead_letters == 4


def test_with_every_match_a_record_lands_in_each_table_its_routes_take(spark, tmp_path):
    routing = Routing(ROUTES.conditions, ROUTES.transforms, every_match=True)
    targets = _tables(spark, tmp_path, routing)
    _writer(targets, routing)(_kafka_rows(spark), 0)
    orders, refunds, _ = (table for table, _ in targets.outputs)
    assert ("orders", 0, 2) in _rows(spark, orders) and _rows(spark, refunds) == {("orders", 0, 2), ("events", 1, 0)}
    assert set(_dead(spark, targets).values()) == {"unrouted"}


class StopAfterTable:
    """``table_committed`` hook: the batch stops once ``path`` has committed, as a driver that
    died between two tables' commits would (once)."""

    def __init__(self, path: str):
        self.path, self.fired = path, False

    def __call__(self, batch_id, ranges, path):
        if path == self.path and not self.fired:
            self.fired = True
            raise OSError("injected: stopped between two tables' commits")


@pytest.mark.parametrize("stop_after", [0, 1])
def test_a_batch_stopped_between_two_tables_commits_is_written_again_once_everywhere(spark, tmp_path, stop_after):
    targets = _tables(spark, tmp_path, ROUTES)
    tables = [table for table, _ in targets.outputs]
    with pytest.raises(OSError, match="injected"):
        _writer(targets, ROUTES, BatchHooks(table_committed=StopAfterTable(tables[stop_after].path)))(
            _kafka_rows(spark), 0)
    committed = tables[:stop_after + 1]
    for table in tables:
        held = table.recorded_offsets(list(RECORDS))
        assert held == ({ORDERS: 4, EVENTS: 5} if table in committed else {ORDERS: None, EVENTS: None})
    before = {table.path: table.snapshot().version() for table in committed}

    reports = []
    _writer(targets, ROUTES, reports=reports)(_kafka_rows(spark), 0)
    assert {table.path: table.snapshot().version() for table in committed} == before  # nothing again
    assert _rows(spark, tables[0]) == {("orders", 0, 0), ("orders", 0, 1), ("orders", 0, 3)}
    assert _rows(spark, tables[1]) == {("events", 1, 0)}
    assert _rows(spark, tables[2]) == {("events", 1, 1), ("events", 1, 2)}
    assert _dead(spark, targets) == {("orders", 0, 2): "ambiguous_route", ("events", 1, 3): "unrouted",
                                     ("events", 1, 4): "unrouted"}
    assert reports[0].rows_skipped == sum(len(_rows(spark, t)) for t in committed)
