"""A TxnDeltaTable with ``add_columns``: a commit whose files carry new columns adds them to the
table in that same commit, removes no file, and keeps its exactly-once transactions; without it
such files are refused with nothing written, and so is a changed column type either way. Real Delta tables, read back with deltalake (and
delta-spark for nested fields older files lack)."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from groupmgr.core import OffsetRange, TopicPartition
from sinks.txn_table import FencedWriterError, SchemaIncompatible, TxnDeltaTable

pytestmark = pytest.mark.delta_only
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
COORDINATES = [("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())]
V1 = pa.schema(COORDINATES + [("v", pa.string()), ("address", pa.struct([("city", pa.string())]))])
V2 = pa.schema(COORDINATES + [("v", pa.string()), ("address", pa.struct([("city", pa.string()), ("zip", pa.string())])),
                              ("email", pa.string())])


def rows(schema: pa.Schema, tp: TopicPartition, offsets) -> pa.Table:
    offsets = list(offsets)
    n = len(offsets)
    columns = {"topic": [tp.topic] * n, "partition": [tp.partition] * n, "offset": offsets,
               "v": [f"v{o}" for o in offsets]}
    if "email" in schema.names:
        columns["address"] = [{"city": f"c{o}", "zip": f"z{o}"} for o in offsets]
        columns["email"] = [f"e{o}" for o in offsets]
    else:
        columns["address"] = [{"city": f"c{o}"} for o in offsets]
    return pa.table(columns, schema=schema)


def last_commit(path: str) -> list[dict]:
    version = DeltaTable(path).version()
    with open(f"{path}/_delta_log/{version:020d}.json", encoding="utf-8") as log:
        return [json.loads(line) for line in log]


@pytest.mark.parametrize("partition_by", [(), ("partition",)])
def test_new_columns_join_the_table_in_the_commit_of_the_rows_that_carry_them(tmp_path, partition_by):
    old = TxnDeltaTable(str(tmp_path / "t"), "app", V1, partition_by, add_columns=True)
    epochs = old.claim([T0, T1])
    old.commit(pa.concat_tables([rows(V1, T0, range(3)), rows(V1, T1, range(2))]),
               [OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 0, 2)], epochs)
    new = old.with_schema(V2, add_columns=True)
    result = new.commit(rows(V2, T0, range(3, 5)), [OffsetRange("t", 0, 3, 5)], epochs)

    actions = last_commit(new.path)
    assert DeltaTable(new.path).version() == result.table_version
    assert [next(iter(a)) for a in actions].count("add") == 1 and any("metaData" in a for a in actions)
    assert not any("remove" in a for a in actions)
    assert {a["txn"]["appId"]: a["txn"]["version"] for a in actions if "txn" in a}["app:offset:t:0"] == 5
    table = DeltaTable(new.path)
    data = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: (r["partition"], r["offset"]))
    assert [(r["partition"], r["offset"], r["email"], r["address"]) for r in data] == [
        (0, 0, None, {"city": "c0", "zip": None}), (0, 1, None, {"city": "c1", "zip": None}),
        (0, 2, None, {"city": "c2", "zip": None}), (0, 3, "e3", {"city": "c3", "zip": "z3"}),
        (0, 4, "e4", {"city": "c4", "zip": "z4"}), (1, 0, None, {"city": "c0", "zip": None}),
        (1, 1, None, {"city": "c1", "zip": None})]
    assert new.recorded_offsets([T0, T1]) == {T0: 5, T1: 2}


def test_a_writer_of_the_old_columns_appends_after_the_table_gained_new_ones(tmp_path):
    old = TxnDeltaTable(str(tmp_path / "t"), "app", V1, add_columns=True)
    epochs = old.claim([T0, T1])
    old.with_schema(V2, add_columns=True).commit(rows(V2, T0, range(2)), [OffsetRange("t", 0, 0, 2)], epochs)
    old.commit(rows(V1, T1, range(2)), [OffsetRange("t", 1, 0, 2)], epochs)  # a member not yet following
    table = DeltaTable(old.path)
    assert [f.name for f in table.schema().fields][-1] == "email"
    emails = {(r["partition"], r["offset"]): r["email"] for r in table.to_pyarrow_table().to_pylist()}
    assert emails == {(0, 0): "e0", (0, 1): "e1", (1, 0): None, (1, 1): None}
    assert not any("metaData" in a for a in last_commit(old.path))  # the append left the schema alone


def test_without_add_columns_files_with_new_columns_are_refused_and_nothing_is_written(tmp_path):
    """Committed, their new columns would be in the files and in no reader's view of the table."""
    old = TxnDeltaTable(str(tmp_path / "t"), "app", V1)
    epochs = old.claim([T0])
    old.commit(rows(V1, T0, range(2)), [OffsetRange("t", 0, 0, 2)], epochs)
    version = DeltaTable(old.path).version()
    with pytest.raises(SchemaIncompatible) as refused:
        old.with_schema(V2, add_columns=False).commit(rows(V2, T0, range(2, 4)), [OffsetRange("t", 0, 2, 4)], epochs)
    assert "columns the table lacks: address.zip, email" in str(refused.value)
    assert "schema_evolution is fail" in str(refused.value)
    assert [f.name for f in DeltaTable(old.path).schema().fields] == V1.names
    assert DeltaTable(old.path).version() == version and old.recorded_offsets([T0]) == {T0: 2}


@pytest.mark.parametrize("add_columns", [True, False])
def test_a_changed_column_type_is_refused_and_nothing_is_written(tmp_path, add_columns):
    old = TxnDeltaTable(str(tmp_path / "t"), "app", V1, add_columns=add_columns)
    epochs = old.claim([T0])
    old.commit(rows(V1, T0, range(2)), [OffsetRange("t", 0, 0, 2)], epochs)
    version = DeltaTable(old.path).version()
    changed = pa.schema(COORDINATES + [("v", pa.int64())])
    batch = pa.table({"topic": ["t"], "partition": [0], "offset": [2], "v": [7]}, schema=changed)
    with pytest.raises(SchemaIncompatible) as refused:
        old.with_schema(changed, add_columns=add_columns).commit(batch, [OffsetRange("t", 0, 2, 3)], epochs)
    assert refused.value.condition == "SCHEMA_INCOMPATIBLE"
    assert "column v: the table has string, the batch long" in str(refused.value)
    assert "address:struct<city:string>" in refused.value.table_schema
    assert DeltaTable(old.path).version() == version
    assert old.recorded_offsets([T0]) == {T0: 2}


@pytest.mark.integration
def test_delta_spark_reads_a_nested_field_older_files_lack_as_null(tmp_path, spark):
    old = TxnDeltaTable(str(tmp_path / "t"), "app", V1, add_columns=True)
    epochs = old.claim([T0])
    old.commit(rows(V1, T0, range(2)), [OffsetRange("t", 0, 0, 2)], epochs)
    old.with_schema(V2, add_columns=True).commit(rows(V2, T0, range(2, 3)), [OffsetRange("t", 0, 2, 3)], epochs)
    seen = spark.read.format("delta").load(old.path).select("offset", "address.zip", "email").collect()
    assert sorted(tuple(r) for r in seen) == [(0, None, None), (1, None, None), (2, "z2", "e2")]


def test_a_commit_that_adds_columns_loses_to_a_new_claim_and_writes_nothing(tmp_path):
    """docs/DESIGN.md invariant 3 on the schema-changing commit (an overwrite that replaces no
    file): another member claims the partition between the decision and the commit; the commit
    fails, decides again, is fenced, and neither its rows nor its columns reach the table."""
    from tests.integration.test_txn_table import RacedTable

    other = TxnDeltaTable(str(tmp_path / "t"), "app", V1, add_columns=True)
    epochs = other.claim([T0])
    other.commit(rows(V1, T0, range(2)), [OffsetRange("t", 0, 0, 2)], epochs)
    loser = RacedTable(str(tmp_path / "t"), "app", V2, add_columns=True, race=lambda: other.claim([T0]))
    with pytest.raises(FencedWriterError):
        loser.commit(rows(V2, T0, range(2, 4)), [OffsetRange("t", 0, 2, 4)], epochs)
    assert loser.raced and loser.decisions == 1
    table = DeltaTable(other.path)
    assert [f.name for f in table.schema().fields] == V1.names
    assert sorted(table.to_pyarrow_table(columns=["offset"])["offset"].to_pylist()) == [0, 1]
    assert other.recorded_offsets([T0]) == {T0: 2}
