"""Every record in exactly one of the output and dead-letter tables (docs/DESIGN.md invariant 6)
when a batch is retried after its dead-letter commit with other classification settings: the
real Spark classification (records.classify), real Delta tables, the batch writer in between."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.batch_writer import BatchHooks, BatchWriter, TableTargets, apply_transform, warm_up
from pipelines.runtime.pipeline_tables import arrow_schema
from pipelines.runtime.records import KAFKA_ROW_DDL, RecordFormat, classify, dead_letters, good_rows, record_columns
from sinks.txn_table import TxnDeltaTable
from tests.support.batch_faults import FailSecondTableOnce
from tests.support.kafka_data import delta_coordinates

pytestmark = pytest.mark.integration
SCHEMA = "id BIGINT, name STRING"
TP = TopicPartition("t", 0)
SIZES = [5, 40, 5, 40, 80, 5]  # name lengths: the values are ~25 bytes longer


class PlannedLog:
    def ranges(self, batch_id):
        return (OffsetRange(TP.topic, TP.partition, 0, len(SIZES)),)


def _kafka_rows(spark):
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [(b"k", json.dumps({"id": o, "name": "x" * n}).encode(), TP.topic, TP.partition, o, when, 0)
            for o, n in enumerate(SIZES)]
    return spark.createDataFrame(rows, KAFKA_ROW_DDL)


def _writer(targets, limit, hooks, transform=None):
    writer = BatchWriter(RecordFormat("json", SCHEMA, limit), transform, targets, PlannedLog(),
                         commit_kafka=lambda offsets, meta: True, report=lambda report: None,
                         refused=lambda batch_id, err: None, hooks=hooks)
    return writer


def test_a_formats_columns_are_built_once_and_serve_every_batch(spark):
    """One set of column expressions per format in a driver (records.RecordColumns), applied to
    each batch's DataFrame; another size limit is another format, with its own columns."""
    fmt = RecordFormat("json", SCHEMA, 50)
    assert record_columns(fmt) is record_columns(RecordFormat("json", SCHEMA, 50))
    assert record_columns(fmt) is not record_columns(RecordFormat("json", SCHEMA, 100))
    too_large = {o for o, n in enumerate(SIZES) if len(json.dumps({"id": o, "name": "x" * n})) > 50}
    assert too_large and len(too_large) < len(SIZES)
    for _ in range(2):  # a second batch through the same columns
        assert {r.offset for r in dead_letters(classify(_kafka_rows(spark), fmt), fmt).collect()} == too_large


@pytest.mark.parametrize("first_limit, retry_limit", [(50, 100), (100, 50)])
def test_a_batch_retried_with_a_new_size_limit_lands_each_record_once(spark, tmp_path, first_limit, retry_limit):
    fmt = RecordFormat("json", SCHEMA, 1)
    empty = classify(spark.createDataFrame([], KAFKA_ROW_DDL), fmt)
    table = TxnDeltaTable(str(tmp_path / "out"), "p", arrow_schema(good_rows(empty, fmt)))
    dead = TxnDeltaTable(str(tmp_path / "dead"), "p", arrow_schema(dead_letters(empty, fmt)))
    targets = TableTargets(table, dead, table.claim([TP]), dead.claim([TP]))
    batch = _kafka_rows(spark)

    with pytest.raises(Exception, match="injected"):
        _writer(targets, first_limit, BatchHooks(files_written=FailSecondTableOnce()))(batch, 0)
    first_fmt = RecordFormat("json", SCHEMA, first_limit)
    first_dead = {r.offset for r in dead_letters(classify(batch, first_fmt), first_fmt).collect()}
    _writer(targets, retry_limit, BatchHooks())(batch, 0)

    out_rows, dead_rows = delta_coordinates(spark, table.path), delta_coordinates(spark, dead.path)
    assert {o for _, _, o in dead_rows} == first_dead          # the first attempt's decision stands
    assert sorted(out_rows + dead_rows) == [(TP.topic, TP.partition, o) for o in range(len(SIZES))]
    names = {r.offset: r.name for r in spark.read.format("delta").load(table.path).collect()}
    assert all(names[o] == "x" * SIZES[o] for o in names)      # output rows parsed in full


@pytest.mark.parametrize("transform", [None, "SELECT * FROM input WHERE id >= 0"])
def test_without_a_transform_one_spark_job_writes_both_tables(spark, tmp_path, transform):
    """One pass (no transform): the batch is read once, by one Spark job that writes both tables'
    files; a transform's output rows are Spark SQL's, so those batches take two jobs. Either way
    every record lands in exactly one table."""
    import uuid

    fmt = RecordFormat("json", SCHEMA, 50)
    empty = classify(spark.createDataFrame([], KAFKA_ROW_DDL), fmt)
    table = TxnDeltaTable(str(tmp_path / "out"), "p", arrow_schema(apply_transform(good_rows(empty, fmt), transform)))
    dead = TxnDeltaTable(str(tmp_path / "dead"), "p", arrow_schema(dead_letters(empty, fmt)))
    targets = TableTargets(table, dead, table.claim([TP]), dead.claim([TP]))
    batch = _kafka_rows(spark)
    group = f"batch-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "one batch")
    try:
        _writer(targets, 50, BatchHooks(), transform)(batch, 0)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))
    assert jobs == 1 if transform is None else jobs >= 2
    out_rows, dead_rows = delta_coordinates(spark, table.path), delta_coordinates(spark, dead.path)
    assert {o for _, _, o in dead_rows} == {1, 3, 4}  # values of 61 and 101 bytes
    assert sorted(out_rows + dead_rows) == [(TP.topic, TP.partition, o) for o in range(len(SIZES))]


@pytest.mark.parametrize("transform", [None, "SELECT *, upper(name) AS shout FROM input"])
def test_the_warm_up_runs_the_batch_path_and_writes_nothing(spark, tmp_path, transform):
    """pipelines.runtime.batch_writer.warm_up: a made-up record goes through classification, the
    transform and both tables' executor-side writers; no file is written, no version committed."""

    fmt = RecordFormat("json", SCHEMA, 100)
    empty = classify(spark.createDataFrame([], KAFKA_ROW_DDL), fmt)
    table = TxnDeltaTable(str(tmp_path / "out"), "p", arrow_schema(apply_transform(good_rows(empty, fmt), transform)))
    dead = TxnDeltaTable(str(tmp_path / "dead"), "p", arrow_schema(dead_letters(empty, fmt)))
    table.snapshot(), dead.snapshot()  # created, as the runner's start-up does
    before = {p: sorted(q.relative_to(p) for q in p.rglob("*")) for p in (tmp_path / "out", tmp_path / "dead")}
    warm_up(spark, fmt, transform, TableTargets(table, dead, {}, {}))
    after = {p: sorted(q.relative_to(p) for q in p.rglob("*")) for p in before}
    assert after == before  # no data file, no log entry
    with pytest.raises(Exception):  # a transform that does not analyse fails here, not silently
        warm_up(spark, fmt, "SELECT nope FROM input", TableTargets(table, dead, {}, {}))
