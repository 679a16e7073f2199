"""Confluent-framed Protobuf values → output rows and dead letters (pure: the registry is a dict)."""
from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pytest
from google.protobuf import message_factory

from pipelines.runtime.arrow_records import FramedBlockDecoder
from pipelines.runtime.avro_records import INCOMPATIBLE_SCHEMA, NOT_FRAMED, UNDECODABLE, UNKNOWN_SCHEMA_ID
from pipelines.runtime.protobuf_records import ProtobufValues
from pipelines.runtime.protobuf_types import (ProtobufFormat, UnsupportedProtobufType, compile_schema,
                                              message_descriptor)
from pipelines.runtime.records import RecordFormat
from pipelines.runtime.registry_client import RegistrySchemas, RegistrySettings
from tests.unit.test_avro_records import block

V1 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
  map<string, int32> attrs = 4;
  Address address = 5;
  google.protobuf.Timestamp at = 6;
  Kind kind = 7;
  uint64 big = 8;
  message Address { string city = 1; }
}
enum Kind { A = 0; B = 1; }
message Refund { int64 id = 1; string reason = 2; }
"""
V2 = V1.replace("  uint64 big = 8;\n", "  uint64 big = 8;\n  optional string note = 9;\n")
RETYPED = V1.replace("string item = 2;", "int32 item = 2;")


class _Registry:
    def __init__(self, schemas):
        self.schemas = schemas

    def get_schema(self, schema_id):
        from confluent_kafka.schema_registry import Schema
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        if schema_id not in self.schemas:
            raise SchemaRegistryError(404, 40403, "Schema not found")
        return Schema(self.schemas[schema_id], "PROTOBUF")


def message_class(text, name="shop.Order"):
    return message_factory.GetMessageClass(message_descriptor(compile_schema(text), name))


def framed(message, schema_id, indexes=b"\x00"):
    return b"\x00" + schema_id.to_bytes(4, "big") + indexes + message.SerializeToString()


def decoder(reader_text, schemas):
    settings = RegistrySettings("http://registry.invalid")
    fmt = RecordFormat("protobuf", None, 1 << 20, framed=ProtobufFormat(reader_text, None, settings))
    return FramedBlockDecoder(fmt, ProtobufValues(fmt.framed, RegistrySchemas(settings, _Registry(schemas))))


def test_messages_of_each_writer_version_become_the_reader_messages_columns():
    order = message_class(V1)(id=7, item="tea", tags=["a", "b"], kind=1, big=2 ** 64 - 1)
    order.attrs["x"] = 3
    order.address.city = "Oslo"
    order.at.seconds, order.at.nanos = 1_795_000_000, 123_456_000
    newer = message_class(V2)(id=8, item="cup", note="n")
    split = decoder(V2, {1: V1, 2: V2}).split(block([framed(order, 1), framed(newer, 2)]))
    assert split.dead_letters.num_rows == 0
    first, second = split.output.to_pylist()
    assert (first["id"], first["item"], first["tags"], first["attrs"]) == (7, "tea", ["a", "b"], [("x", 3)])
    assert first["address"] == {"city": "Oslo"} and first["kind"] == "B"
    assert first["big"] == decimal.Decimal(2 ** 64 - 1) and first["note"] is None
    assert first["at"] == datetime.datetime.fromtimestamp(1_795_000_000.123456, datetime.timezone.utc)
    assert (second["id"], second["note"], second["address"], second["at"], second["kind"]) == (8, "n", None, None, "A")
    assert second["tags"] == [] and second["big"] == 0
    types = dict(zip(split.output.column_names, split.output.schema.types))
    assert types["big"] == pa.decimal128(20, 0) and types["at"] == pa.timestamp("us", tz="UTC")


def test_message_indexes_pick_the_writers_message():
    refund = message_class(V1, "shop.Refund")(id=3, reason="late")
    reader = """syntax = "proto3"; package shop; message Refund { int64 id = 1; string reason = 2; }"""
    split = decoder(reader, {1: V1}).split(block([framed(refund, 1, indexes=b"\x02\x02")]))  # [1]
    assert split.output.select(["id", "reason"]).to_pylist() == [{"id": 3, "reason": "late"}]


@pytest.mark.parametrize("value, reason", [
    (b"", NOT_FRAMED), (b"\x00\x00\x00\x00\x01", NOT_FRAMED), (b"\x01\x00\x00\x00\x01\x00\x08\x01", NOT_FRAMED),
    (b"\x00\x00\x00\x00\x01\xff", NOT_FRAMED),                  # the index count's varint never ends
    (b"\x00\x00\x00\x00\x09\x00\x08\x01", UNKNOWN_SCHEMA_ID),
    (b"\x00\x00\x00\x00\x01\x02\x10\x08\x01", INCOMPATIBLE_SCHEMA),  # index [8]: no such message
    (b"\x00\x00\x00\x00\x01\x02\x02\x08\x01", INCOMPATIBLE_SCHEMA),  # index [1]: a Refund, not an Order
    (b"\x00\x00\x00\x00\x03\x00\x08\x01", INCOMPATIBLE_SCHEMA),      # item: int32 where the reader has string
    (b"\x00\x00\x00\x00\x04\x00\x08\x01", INCOMPATIBLE_SCHEMA),      # a writer schema protoc refuses
    (b"\x00\x00\x00\x00\x01\x00\x12\x05ab", UNDECODABLE),            # a string longer than the bytes left
    (b"\x00\x00\x00\x00\x01\x00\x12\x02\xff\xfe", UNDECODABLE),      # a string that is not UTF-8
])
def test_each_bad_value_is_a_dead_letter_with_its_reason_and_bytes(value, reason):
    good = framed(message_class(V1)(id=1), 1)
    split = decoder(V1, {1: V1, 3: RETYPED, 4: "syntax = nonsense"}).split(block([good, value, good]))
    assert split.output.column("offset").to_pylist() == [0, 2]
    assert split.dead_letters.select(["offset", "value", "reason"]).to_pylist() == [
        {"offset": 1, "value": value, "reason": reason}]


def test_schemas_protoc_refuses_or_no_column_holds_are_named():
    with pytest.raises(UnsupportedProtobufType, match="protoc refused"):
        ProtobufFormat("syntax = nonsense", None, None).arrow_schema()
    recursive = 'syntax = "proto3"; message Node { Node next = 1; }'
    with pytest.raises(UnsupportedProtobufType) as refused:
        ProtobufFormat(recursive, None, None).arrow_schema()
    assert refused.value.path == "next"
    with pytest.raises(UnsupportedProtobufType, match="no message"):
        ProtobufFormat(V1, "shop.Nope", None).arrow_schema()
