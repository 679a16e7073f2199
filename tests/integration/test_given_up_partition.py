"""A partition an scg-kafka member gave up after a batch over it was planned (BatchGate.allow):
that batch, beginning later, writes none of its records to either table, commits none of its
offsets and counts none of its records (not even as replayed), and the partition's next owner
writes each of them once (docs/DESIGN.md, invariant 3). Real Spark rows (records.classify,
without_partitions), real Delta tables."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.batch_writer import BatchWriter, TableTargets, apply_transform
from pipelines.runtime.pipeline_tables import arrow_schema
from pipelines.runtime.records import KAFKA_ROW_DDL, RecordFormat, classify, dead_letters, good_rows
from sinks.txn_table import TxnDeltaTable
from tests.support.kafka_data import delta_coordinates

pytestmark = pytest.mark.integration
SCHEMA = "id BIGINT, name STRING"
KEPT, GIVEN_UP = TopicPartition("t", 0), TopicPartition("t", 1)
OFFSETS = range(4)  # per partition; offset 2 is not JSON (a dead letter)


class Planned:
    def __init__(self, *partitions):
        self.partitions = partitions

    def ranges(self, batch_id):
        return tuple(OffsetRange(tp.topic, tp.partition, 0, len(OFFSETS)) for tp in self.partitions)


def _rows(spark, *partitions):
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return spark.createDataFrame(
        [(b"k", b"nope" if o == 2 else json.dumps({"id": o, "name": "n"}).encode(), tp.topic, tp.partition, o,
          when, 0) for tp in partitions for o in OFFSETS], KAFKA_ROW_DDL)


@pytest.mark.parametrize("transform", [None, "SELECT * FROM input"])  # one pass, two passes
def test_a_batch_leaves_out_a_partition_given_up_after_it_was_planned(spark, tmp_path, transform):
    fmt = RecordFormat("json", SCHEMA, 1000)
    empty = classify(spark.createDataFrame([], KAFKA_ROW_DDL), fmt)
    table = TxnDeltaTable(str(tmp_path / "out"), "p", arrow_schema(apply_transform(good_rows(empty, fmt), transform)))
    dead = TxnDeltaTable(str(tmp_path / "dead"), "p", arrow_schema(dead_letters(empty, fmt)))
    kafka, reports = [], []

    def writer(targets, planned):
        return BatchWriter(fmt, transform, targets, planned,
                           commit_kafka=lambda offsets, meta: kafka.append(offsets) or True,
                           report=reports.append, refused=lambda batch_id, err: None)

    member = writer(TableTargets(table, dead, table.claim([KEPT, GIVEN_UP]), dead.claim([KEPT, GIVEN_UP])),
                    Planned(KEPT, GIVEN_UP))
    member.gate.allow([KEPT])  # GIVEN_UP was revoked between the batch's planning and its start
    member(_rows(spark, KEPT, GIVEN_UP), 0)
    everything = sorted(delta_coordinates(spark, table.path) + delta_coordinates(spark, dead.path))
    assert everything == [(KEPT.topic, KEPT.partition, o) for o in OFFSETS]
    assert kafka == [{KEPT: len(OFFSETS)}]
    assert [(r.rows_written, r.rows_skipped, r.dead_letters) for r in reports] == [(3, 0, 1)]
    assert table.recorded_offsets([GIVEN_UP]) == dead.recorded_offsets([GIVEN_UP]) == {GIVEN_UP: None}

    next_owner = TableTargets(table, dead, table.claim([GIVEN_UP]), dead.claim([GIVEN_UP]))
    writer(next_owner, Planned(GIVEN_UP))(_rows(spark, GIVEN_UP), 0)
    everything = sorted(delta_coordinates(spark, table.path) + delta_coordinates(spark, dead.path))
    assert everything == [(tp.topic, tp.partition, o) for tp in (KEPT, GIVEN_UP) for o in OFFSETS]
    assert [o for _, p, o in delta_coordinates(spark, dead.path)] == [2, 2]
