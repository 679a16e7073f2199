"""pipelines.runtime.schema_follower: which reader schema and output table each batch gets as the
registry subject's latest version moves, against real Delta tables. The registry here is a
stand-in that answers versions from a list (the real registry's answers are covered by
test_avro_pipeline.py and the schema-evolution end-to-end test)."""
from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.avro_types import AvroFormat
from pipelines.runtime.records import RecordFormat
from pipelines.runtime.registry_client import (RegistrySettings, RegistryUnavailableError, SubjectNotFoundError,
                                               SubjectVersion)
from pipelines.runtime.schema_follower import BatchSchema, SchemaFollower
from sinks.txn_table import SchemaIncompatible, TxnDeltaTable

pytestmark = pytest.mark.delta_only
COORDINATES = [("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())]
COLUMNS = {  # reader schema text -> its output columns
    "v1": pa.schema(COORDINATES + [("id", pa.int64())]),
    "v2": pa.schema(COORDINATES + [("id", pa.int64()), ("email", pa.string())]),
    "v2-fewer": pa.schema(COORDINATES),
    "v3-changed": pa.schema(COORDINATES + [("id", pa.string())]),
}
SETTINGS = RegistrySettings("http://registry.invalid")


class Registry:
    """Answers the subject's latest version from ``versions`` (the last one), or fails."""

    def __init__(self, *texts: str):
        self.versions = [SubjectVersion("orders-value", n, 100 + n, text) for n, text in enumerate(texts, 1)]
        self.down = False

    def publish(self, text: str) -> None:
        n = len(self.versions) + 1
        self.versions.append(SubjectVersion("orders-value", n, 100 + n, text))

    def subject_version(self, subject: str, version):
        assert subject == "orders-value" and version is None
        if self.down:
            raise RegistryUnavailableError(SETTINGS.url, "ConnectError: refused")
        if not self.versions:
            raise SubjectNotFoundError(SETTINGS.url, subject, version)
        return self.versions[-1]


def fmt_of(text: str) -> RecordFormat:
    if text not in COLUMNS:
        raise ValueError(f"{text}: a union of several non-null types has no column type")
    return RecordFormat("avro", None, 1_000_000, framed=AvroFormat(text, SETTINGS))


def follower(tmp_path, registry: Registry, add_columns: bool, partition_by=(), start: str = "v1"):
    table = TxnDeltaTable(str(tmp_path / "t"), "app", COLUMNS[start], partition_by, add_columns=add_columns)
    shaped = []

    def tables_for(fmt: RecordFormat) -> tuple[TxnDeltaTable]:
        shaped.append(fmt.framed.reader_schema)
        return (table.with_schema(COLUMNS[fmt.framed.reader_schema], add_columns),)

    return SchemaFollower(registry, "orders-value", add_columns, BatchSchema(fmt_of(start), table),
                          fmt_of, tables_for), table, shaped


def test_the_start_version_is_kept_and_shaped_once_while_the_subject_does_not_move(tmp_path):
    registry = Registry("v1")
    follow, table, shaped = follower(tmp_path, registry, add_columns=False)
    first = follow.for_batch()
    assert first.table is table and first.fmt == fmt_of("v1")
    assert follow.for_batch() is first
    assert shaped == []


def test_with_add_columns_a_version_with_a_new_field_is_followed(tmp_path):
    registry = Registry("v1")
    follow, table, shaped = follower(tmp_path, registry, add_columns=True)
    follow.for_batch()
    registry.publish("v2")
    batch = follow.for_batch()
    assert batch.fmt == fmt_of("v2") and batch.table.schema == COLUMNS["v2"] and batch.table.add_columns
    assert follow.for_batch() is batch and shaped == ["v2"]


def test_with_fail_a_version_with_a_new_field_stops_the_batch_naming_it_until_it_goes(tmp_path):
    registry = Registry("v1")
    follow, table, shaped = follower(tmp_path, registry, add_columns=False)
    start = follow.for_batch()
    registry.publish("v2")
    for _ in range(2):  # every retry asks again
        with pytest.raises(SchemaIncompatible) as stopped:
            follow.for_batch()
        assert "version 2 of subject orders-value (schema id 102) adds column(s) email" in str(stopped.value)
        assert "sink.schema_evolution is fail" in str(stopped.value)
        assert stopped.value.table_schema == "struct<topic:string,partition:integer,offset:long,id:long>"
        assert stopped.value.batch_schema.endswith(",id:long,email:string>")
        assert stopped.value.table == str(tmp_path / "t")
    registry.publish("v1")  # the producers went back to a version the table takes
    assert follow.for_batch().fmt == start.fmt


@pytest.mark.parametrize("add_columns", [False, True])
def test_a_changed_column_type_stops_the_batch_whatever_the_setting(tmp_path, add_columns):
    registry = Registry("v1")
    follow, _, _ = follower(tmp_path, registry, add_columns)
    follow.for_batch()
    registry.publish("v3-changed")
    with pytest.raises(SchemaIncompatible, match=r"version 2 .* column id: the table has long, the batch string") \
            as stopped:
        follow.for_batch()
    assert (stopped.value.table, stopped.value.table_schema, stopped.value.batch_schema) == (
        str(tmp_path / "t"), "struct<topic:string,partition:integer,offset:long,id:long>",
        "struct<topic:string,partition:integer,offset:long,id:string>")


def test_a_version_with_fewer_fields_is_followed_and_the_table_keeps_its_columns(tmp_path):
    registry = Registry("v1")
    follow, table, _ = follower(tmp_path, registry, add_columns=False)
    follow.for_batch()
    registry.publish("v2-fewer")
    assert follow.for_batch().table.schema == COLUMNS["v2-fewer"]
    assert [f.name for f in DeltaTable(table.path).schema().fields] == COLUMNS["v1"].names


@pytest.mark.parametrize("text, partition_by, reason", [
    ("v2-fewer", ("id",), "has no field for partition column.s. id"),
    ("v2-union", (), "cannot be read into table columns: .*union"),
])
def test_a_version_the_table_cannot_take_stops_the_batch_with_the_reason(tmp_path, text, partition_by, reason):
    registry = Registry("v1")
    follow, _, _ = follower(tmp_path, registry, add_columns=True, partition_by=partition_by)
    follow.for_batch()
    registry.publish(text)
    with pytest.raises(SchemaIncompatible, match=reason) as stopped:
        follow.for_batch()
    assert stopped.value.table == str(tmp_path / "t")
    assert stopped.value.table_schema == "struct<topic:string,partition:integer,offset:long,id:long>"
    assert stopped.value.batch_schema == {"v2-fewer": "struct<topic:string,partition:integer,offset:long>",
                                          "v2-union": "(none)"}[text]


def test_a_registry_that_does_not_answer_or_lost_the_subject_leaves_the_reader_schema_as_it_is(tmp_path):
    registry = Registry("v1")
    follow, _, _ = follower(tmp_path, registry, add_columns=True)
    start = follow.for_batch()
    registry.publish("v2")
    registry.down = True
    assert follow.for_batch() is start
    registry.down = False
    assert follow.for_batch().fmt == fmt_of("v2")
    registry.versions.clear()  # the subject was deleted
    assert follow.for_batch().fmt == fmt_of("v2")


def test_the_first_batch_compares_the_table_written_before_a_restart(tmp_path):
    """A table already holding fewer columns than the start version: fail stops, add_columns goes on."""
    old = TxnDeltaTable(str(tmp_path / "t"), "app", pa.schema(COORDINATES))
    old.claim([TopicPartition("t", 0)])
    registry = Registry("v1")
    with pytest.raises(SchemaIncompatible, match="adds column.s. id"):
        follower(tmp_path, registry, add_columns=False)[0].for_batch()
    follow, table, _ = follower(tmp_path, registry, add_columns=True)
    epochs = table.claim([TopicPartition("t", 0)])
    batch = follow.for_batch()
    batch.table.commit(pa.table({"topic": ["t"], "partition": [0], "offset": [0], "id": [7]}, schema=COLUMNS["v1"]),
                       [OffsetRange("t", 0, 0, 1)], epochs)
    assert DeltaTable(table.path).to_pyarrow_table().to_pylist() == [{"topic": "t", "partition": 0, "offset": 0, "id": 7}]
