"""Protobuf in the Confluent wire format, end to end on real components: messages produced with
confluent-kafka's own ``ProtobufSerializer`` against a real schema registry (Apicurio's
Confluent-compatible API, which answers a schema as a serialized descriptor), in two versions and
two message types of one file, next to values no reader can use; read by the Arrow path and the
Spark SQL path into real Delta tables that agree row for row; and a pipeline file run by
``bin/scg`` with a local ``.proto`` reader schema."""
from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.schema_registry import topic_subject_name_strategy
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import message_factory

from pipelines.runtime.protobuf_types import ProtobufFormat, compile_schema, message_descriptor
from pipelines.runtime.records import RecordFormat
from pipelines.runtime.registry_client import RegistrySettings
from tests.integration.test_arrow_path import _rows
from tests.integration.test_avro_pipeline import (CLIENT_TIMEOUT_S, _allow_any_change, _produce, both_paths,
                                                  run_to_the_end)
from tests.support.kafka_data import create_topic

pytestmark = pytest.mark.integration
V1 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  string item = 2;
  google.protobuf.Timestamp at = 3;
  repeated string tags = 4;
}
message Refund { int64 id = 1; string reason = 2; }
"""
V2 = V1.replace("  repeated string tags = 4;\n", "  repeated string tags = 4;\n  Address address = 5;\n"
                "  message Address { string city = 1; }\n")
RETYPED = V1.replace("string item = 2;", "int32 item = 2;")
AT = datetime.datetime(2026, 11, 27, 10, 0, tzinfo=datetime.timezone.utc)


def _class(text, name="shop.Order"):
    return message_factory.GetMessageClass(message_descriptor(compile_schema(text), name))


def _serializer(registry, cls) -> ProtobufSerializer:
    return ProtobufSerializer(cls, SchemaRegistryClient({"url": registry.url, "timeout": CLIENT_TIMEOUT_S}),
                              {"use.deprecated.format": False, "subject.name.strategy": topic_subject_name_strategy})


def _order(cls, n, item="tea", **fields):
    message = cls(id=n, item=item, tags=["a"], **fields)
    message.at.FromDatetime(AT)
    return message


def test_both_paths_read_each_writer_version_into_the_reader_message_and_name_every_bad_value(
        spark, bootstrap, schema_registry, unique_name, tmp_path):
    topic, context = unique_name, SerializationContext(unique_name, MessageField.VALUE)
    v1, v2 = _class(V1), _class(V2)
    first = _serializer(schema_registry, v1)(_order(v1, 1), context)
    newer = _order(v2, 2, item="cup")
    newer.address.city = "Oslo"
    cases = [(first, None), (_serializer(schema_registry, v2)(newer, context), None)]
    _allow_any_change(schema_registry, f"{topic}-value")
    retyped_class = _class(RETYPED)
    retyped = _serializer(schema_registry, retyped_class)(retyped_class(id=3, item=7), context)
    refund_class = _class(V1, "shop.Refund")
    refund = _serializer(schema_registry, refund_class)(refund_class(id=4, reason="late"),
                                                        SerializationContext(f"{topic}-refunds", MessageField.VALUE))
    cases += [(retyped, "incompatible_schema"), (refund, "incompatible_schema"), (b"\x00\x7f\xff\xff\xf0\x00\x08\x01", "unknown_schema_id"),
              (b'{"id": 4}', "not_schema_registry_framed"), (first[:-2] + b"\xff\xff", "undecodable"), (None, "null_value")]
    fmt = RecordFormat("protobuf", None, 1 << 20, framed=ProtobufFormat(V2, "shop.Order", RegistrySettings(schema_registry.url)))
    output_path, dead_path = both_paths(spark, bootstrap, topic, fmt, [v for v, _ in cases] * 2, tmp_path)

    _, output = _rows(output_path)
    assert sorted((r["id"], r["item"], r["at"], r["tags"], r["address"]) for r in output) == sorted(
        [(1, "tea", AT, ["a"], None), (2, "cup", AT, ["a"], {"city": "Oslo"})] * 2)
    _, dead = _rows(dead_path)
    assert sorted((r["value"] or b"", r["reason"]) for r in dead) == sorted(
        [(v or b"", reason) for v, reason in cases if reason is not None] * 2)


def test_scg_run_reads_with_a_local_proto_file(bootstrap, schema_registry, unique_name, tmp_path):
    topic, context = unique_name, SerializationContext(unique_name, MessageField.VALUE)
    create_topic(bootstrap, topic, 2)
    v1, v2 = _class(V1), _class(V2)
    values = [_serializer(schema_registry, v1)(_order(v1, n), context) for n in range(10)]
    newer = [_order(v2, 100 + n) for n in range(10)]
    for message in newer:
        message.address.city = "Oslo"
    values += [_serializer(schema_registry, v2)(message, context) for message in newer]
    _produce(bootstrap, topic, values + [b"not protobuf"])
    (tmp_path / "order.proto").write_text(V2)
    rows, dead = run_to_the_end(bootstrap, topic, tmp_path,
                                f'format:\n  type: protobuf\n  schema_registry: {{url: "{schema_registry.url}"}}\n'
                                f'  reader_schema: order.proto\n  message: Order\n')
    assert sorted(r["id"] for r in rows) == list(range(10)) + list(range(100, 110))
    assert {r["id"]: r["address"] for r in rows}[100] == {"city": "Oslo"}
    assert [(r["value"], r["reason"]) for r in dead] == [(b"not protobuf", "not_schema_registry_framed")]


def test_a_table_follows_a_new_protobuf_version_with_add_columns(spark, bootstrap, schema_registry, unique_name,
                                                                 tmp_path):
    """The driver's side of schema evolution with Protobuf and the real registry: the member opens
    its tables with version 1, version 2 adds a message field, and the next batch's table takes
    it as a STRUCT column in the commit of that batch's rows."""
    from deltalake import DeltaTable

    from groupmgr.core import OffsetRange, TopicPartition
    from pipelines.config import load_pipeline
    from pipelines.runtime.pipeline_tables import open_tables
    from tests.support.kafka_data import write_pipeline

    topic, context = unique_name, SerializationContext(unique_name, MessageField.VALUE)
    v1, v2 = _class(V1), _class(V2)
    _serializer(schema_registry, v1)(_order(v1, 1), context)
    extra = f'format:\n  type: protobuf\n  schema_registry: {{url: "{schema_registry.url}"}}\n'
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, topic, topic, tmp_path, extra=extra)
    path.write_text(path.read_text().replace("dead_letter_path:", "schema_evolution: add_columns\n  dead_letter_path:"))
    tables = open_tables(load_pipeline(path), spark)
    assert tables.schema_follower.for_batch().table.schema == tables.table.schema
    assert "address" not in tables.table.schema.names

    _serializer(schema_registry, v2)(_order(v2, 2), context)
    batch = tables.schema_follower.for_batch()
    assert batch.fmt.framed.reader_schema != tables.record_format.framed.reader_schema
    tp = TopicPartition(topic, 0)
    epochs = batch.table.claim([tp])
    row = {name: None for name in batch.table.schema.names} | {"topic": topic, "partition": 0, "offset": 0,
                                                                "id": 2, "address": {"city": "Oslo"}}
    batch.table.commit(pa.Table.from_pylist([row], schema=batch.table.schema), [OffsetRange(topic, 0, 0, 1)], epochs)
    table = DeltaTable(tables.table.path)
    assert [f.name for f in table.schema().fields][-1] == "address"
    assert table.to_pyarrow_table().to_pylist()[0]["address"] == {"city": "Oslo"}
