"""Confluent-framed Avro values → output rows and dead letters (pure: the registry is a dict)."""
from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid

import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_writer

from pipelines.runtime.arrow_records import FramedBlockDecoder
from pipelines.runtime.avro_records import INCOMPATIBLE_SCHEMA, NOT_FRAMED, UNDECODABLE, UNKNOWN_SCHEMA_ID, AvroValues
from pipelines.runtime.avro_types import AvroFormat, UnsupportedAvroType, record_schema
from pipelines.runtime.kafka_range_reader import KAFKA_ROW_ARROW
from pipelines.runtime.records import NULL_VALUE, VALUE_TOO_LARGE, RecordFormat
from pipelines.runtime.registry_client import RegistrySchemas, RegistrySettings, RegistryUnavailableError

V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "note", "type": ["null", "string"], "default": None}]}
RETYPED = {**V1, "fields": [{"name": "id", "type": "string"}, {"name": "item", "type": "string"}]}


class _Registry:
    """A registry's answers by id: a schema dict, or an exception to raise."""

    def __init__(self, schemas):
        self.schemas, self.asked = schemas, []

    def get_schema(self, schema_id):
        from confluent_kafka.schema_registry import Schema
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        self.asked.append(schema_id)
        answer = self.schemas.get(schema_id)
        if isinstance(answer, Exception):
            raise answer
        if answer is None:
            raise SchemaRegistryError(404, 40403, "Schema not found")
        return Schema(json.dumps(answer), "AVRO")


def framed(schema, record, schema_id):
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def decoder(reader, registry, limit=1 << 20):
    settings = RegistrySettings("http://registry.invalid")
    fmt = RecordFormat("avro", None, limit, framed=AvroFormat(json.dumps(reader), settings))
    return FramedBlockDecoder(fmt, AvroValues(fmt.framed, RegistrySchemas(settings, registry)))


def block(values):
    n = len(values)
    ts = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    return pa.table({"key": pa.array([b"k"] * n, pa.binary()), "value": pa.array(values, pa.binary()),
                     "topic": ["t"] * n, "partition": pa.array([0] * n, pa.int32()),
                     "offset": pa.array(range(n), pa.int64()),
                     "timestamp": pa.array([ts] * n, pa.timestamp("us", tz="UTC")),
                     "timestampType": pa.array([0] * n, pa.int32())}).select(KAFKA_ROW_ARROW.names)


def test_records_of_each_writer_version_are_read_into_the_reader_schema():
    registry = _Registry({1: V1, 2: V2})
    split = decoder(V2, registry).split(block([framed(V1, {"id": 1, "item": "a"}, 1),
                                               framed(V2, {"id": 2, "item": "b", "note": "n"}, 2)]))
    assert split.dead_letters.num_rows == 0
    assert split.output.select(["offset", "id", "item", "note"]).to_pylist() == [
        {"offset": 0, "id": 1, "item": "a", "note": None}, {"offset": 1, "id": 2, "item": "b", "note": "n"}]
    assert split.output.column_names[:6] == ["topic", "partition", "offset", "timestamp", "key", "key_bytes"]


def test_a_writer_field_the_reader_lacks_is_dropped():
    split = decoder(V1, _Registry({2: V2})).split(block([framed(V2, {"id": 2, "item": "b", "note": "n"}, 2)]))
    assert split.output.select(["id", "item"]).to_pylist() == [{"id": 2, "item": "b"}]
    assert "note" not in split.output.column_names


@pytest.mark.parametrize("value, reason", [
    (b"", NOT_FRAMED), (b"\x00\x00\x00", NOT_FRAMED), (b"\x01\x00\x00\x00\x01\x02", NOT_FRAMED),
    (b'{"id": 1}', NOT_FRAMED),
    (b"\x00\x00\x00\x00\x09\x02", UNKNOWN_SCHEMA_ID),
    (b"\x00\x00\x00\x00\x01", UNDECODABLE),                    # no record bytes
    (b"\x00\x00\x00\x00\x01\x02\x02a\x00", UNDECODABLE),       # a byte after the record
    (b"\x00\x00\x00\x00\x01\x02\x10a", UNDECODABLE),           # a string longer than the bytes left
    (b"\x00\x00\x00\x00\x03\x02\x02a", INCOMPATIBLE_SCHEMA),   # id: string where the reader has long
])
def test_each_bad_value_is_a_dead_letter_with_its_reason_and_bytes(value, reason):
    good = framed(V1, {"id": 1, "item": "a"}, 1)
    split = decoder(V1, _Registry({1: V1, 3: RETYPED})).split(block([good, value, good]))
    assert split.output.column("offset").to_pylist() == [0, 2]
    assert split.dead_letters.select(["offset", "value", "reason"]).to_pylist() == [
        {"offset": 1, "value": value, "reason": reason}]


def test_null_and_too_large_values_keep_their_reasons():
    big = framed(V1, {"id": 1, "item": "x" * 100}, 1)
    split = decoder(V1, _Registry({1: V1}), limit=50).split(block([None, big]))
    assert split.dead_letters.column("reason").to_pylist() == [NULL_VALUE, VALUE_TOO_LARGE]


def test_each_schema_id_is_asked_once_and_a_missing_one_is_remembered():
    registry = _Registry({1: V1})
    values = [framed(V1, {"id": i, "item": "a"}, 1) for i in range(3)] + [b"\x00\x00\x00\x00\x07\x00"] * 2
    split = decoder(V1, registry).split(block(values))
    assert (split.output.num_rows, split.dead_letters.num_rows) == (3, 2)
    assert registry.asked == [1, 7]


def test_a_registry_that_does_not_answer_fails_the_block_and_is_asked_again_later():
    registry = _Registry({1: ConnectionError("refused")})
    avro = decoder(V1, registry)
    value = framed(V1, {"id": 1, "item": "a"}, 1)
    with pytest.raises(RegistryUnavailableError) as failure:
        avro.split(block([value]))
    assert failure.value.condition == "SCHEMA_REGISTRY_UNAVAILABLE"
    registry.schemas[1] = V1
    assert avro.split(block([value])).output.num_rows == 1


def test_refused_credentials_are_named_and_not_retried_as_unavailable():
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from pipelines.runtime.failure_rules import classify_failure
    from pipelines.runtime.registry_client import RegistryRefusedError

    with pytest.raises(RegistryRefusedError) as refused:
        decoder(V1, _Registry({1: SchemaRegistryError(401, 40101, "Unauthorized")})).split(
            block([framed(V1, {"id": 1, "item": "a"}, 1)]))
    assert classify_failure(refused.value).kind.value == "permanent"


def test_a_registry_5xx_is_unavailable_not_a_dead_letter():
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    with pytest.raises(RegistryUnavailableError):
        decoder(V1, _Registry({1: SchemaRegistryError(503, 50301, "busy")})).split(
            block([framed(V1, {"id": 1, "item": "a"}, 1)]))


def test_nested_and_logical_types_become_arrow_columns():
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "clock", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "address", "type": ["null", {"type": "record", "name": "Address", "fields": [
            {"name": "city", "type": "string"}, {"name": "ids", "type": {"type": "array", "items": {
                "type": "string", "logicalType": "uuid"}}}]}]},
    ]}
    at = datetime.datetime(2026, 11, 27, 9, 30, 1, 123000, tzinfo=datetime.timezone.utc)
    ref = uuid.UUID("12345678-1234-5678-1234-567812345678")
    record = {"at": at, "day": datetime.date(2026, 11, 27), "price": decimal.Decimal("12.34"), "ref": ref,
              "clock": datetime.time(1, 2, 3, 4000), "tags": ["x", "y"], "attrs": {"a": 1},
              "kind": "B", "address": {"city": "Oslo", "ids": [ref]}}
    split = decoder(schema, _Registry({5: schema})).split(block([framed(schema, record, 5)]))
    assert split.dead_letters.num_rows == 0
    row = split.output.to_pylist()[0]
    assert (row["at"], row["day"], row["price"], row["ref"]) == (at, datetime.date(2026, 11, 27),
                                                                 decimal.Decimal("12.34"), str(ref))
    assert row["clock"] == ((1 * 60 + 2) * 60 + 3) * 1_000_000 + 4000
    assert (row["tags"], row["attrs"], row["kind"]) == (["x", "y"], [("a", 1)], "B")
    assert row["address"] == {"city": "Oslo", "ids": [str(ref)]}
    types = dict(zip(split.output.column_names, split.output.schema.types))
    assert types["at"] == pa.timestamp("us", tz="UTC") and types["price"] == pa.decimal128(9, 2)


@pytest.mark.parametrize("schema, path", [
    ({"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]}, "u"),
    ({"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}, "next"),
])
def test_schemas_no_column_can_hold_are_refused_naming_the_field(schema, path):
    with pytest.raises(UnsupportedAvroType) as refused:
        record_schema(schema)
    assert refused.value.path == path


def test_settings_never_show_their_secrets():
    settings = RegistrySettings("https://r", username="u", password="hunter2", bearer_token="tok")
    assert "hunter2" not in repr(settings) and "tok" not in repr(settings)
    assert "hunter2" not in repr(AvroFormat("{}", settings))


def test_named_types_are_found_by_full_or_short_name_in_the_enclosing_namespace():
    address = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"},
                                                              {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}}]}
    schema = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "ship_to", "type": address},
        {"name": "bill_to", "type": ["null", "shop.Address"]},
        {"name": "pick_up", "type": ["null", "Address"]}]}
    arrow = record_schema(schema)
    assert arrow.field("bill_to").type == arrow.field("ship_to").type == arrow.field("pick_up").type
    ref = uuid.UUID(int=5)
    split = decoder(schema, _Registry({1: schema})).split(block([framed(schema, {
        "ship_to": {"city": "Oslo", "ref": ref}, "bill_to": {"city": "Bergen", "ref": ref}, "pick_up": None}, 1)]))
    row = split.output.to_pylist()[0]
    assert row["bill_to"] == {"city": "Bergen", "ref": str(ref)} and row["pick_up"] is None


KEY = {"type": "record", "name": "OrderKey", "namespace": "shop", "fields": [{"name": "shop", "type": "string"},
                                                                             {"name": "n", "type": "long"}]}


def test_framed_keys_become_the_key_column_and_a_bad_key_makes_a_dead_letter_after_the_value_s_reason():
    settings = RegistrySettings("http://registry.invalid")
    registry = RegistrySchemas(settings, _Registry({1: V1, 5: KEY}))
    fmt = RecordFormat("avro", None, 1 << 20, framed=AvroFormat(json.dumps(V1), settings),
                       key_framed=AvroFormat(json.dumps(KEY), settings))
    split = FramedBlockDecoder(fmt, AvroValues(fmt.framed, registry), AvroValues(fmt.key_framed, registry))
    good, key = framed(V1, {"id": 1, "item": "a"}, 1), framed(KEY, {"shop": "oslo", "n": 7}, 5)
    rows = block([good, good, good, None, good])
    rows = rows.set_column(rows.schema.get_field_index("key"), "key",
                           pa.array([key, None, b"plain", b"plain", b"\x00\x00\x00\x00\x09\x02"], pa.binary()))
    out = split.split(rows)
    assert out.output.select(["offset", "key", "key_bytes", "id"]).to_pylist() == [
        {"offset": 0, "key": {"shop": "oslo", "n": 7}, "key_bytes": key, "id": 1},
        {"offset": 1, "key": None, "key_bytes": None, "id": 1}]
    assert out.dead_letters.select(["offset", "key", "reason"]).to_pylist() == [
        {"offset": 2, "key": b"plain", "reason": "key_not_schema_registry_framed"},
        {"offset": 3, "key": b"plain", "reason": NULL_VALUE},
        {"offset": 4, "key": b"\x00\x00\x00\x00\x09\x02", "reason": "key_unknown_schema_id"}]
