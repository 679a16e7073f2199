"""Schema changes that never stop the stream: two `scg run` members read one topic of Avro records
with Avro keys (confluent-kafka's own AvroSerializer, a real schema registry) as their producers
move through three versions. A top-level field added (a producer still on the first version, and
a value no reader can use, next to it), then a field added inside a nested record: the table
gains each as a nullable column in the commit of the first batch that carries it, and the members
go on in the same query. Then a version that changes a column's type: the members stop their
batches under SCHEMA_INCOMPATIBLE (progress lines, `scg describe`), write none of its records,
and keep running. Exactly once is checked through delta-spark."""
from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable

from pipelines.config import load_pipeline
from tests.e2e.harness import MemberProcess
from tests.integration.test_avro_pipeline import _allow_any_change, _serializer
from tests.support.kafka_data import (create_topic, log_end_offsets, partition_statuses, table_reached,
                                      write_pipeline)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e
PARTITIONS = 4
PER_VERSION = 24
ADDRESS = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"}, {"name": "address", "type": ADDRESS}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "note", "type": ["null", "string"], "default": None}]}
V3 = {**V2, "fields": [V2["fields"][0], V2["fields"][1],
                       {"name": "address", "type": {**ADDRESS, "fields": ADDRESS["fields"] + [
                           {"name": "zip", "type": ["null", "string"], "default": None}]}},
                       V2["fields"][3]]}
KEY = {"type": "record", "name": "OrderKey", "namespace": "shop", "fields": [{"name": "n", "type": "long"}]}
RETYPED = {**V3, "fields": [V3["fields"][0], {"name": "item", "type": "long"}, *V3["fields"][2:]]}


def _produce(bootstrap, topic, keys, values) -> set[tuple[str, int, int]]:
    """``values`` with ``keys`` spread over the partitions; their (topic, partition, offset)."""
    acked: set[tuple[str, int, int]] = set()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for n, (key, value) in enumerate(zip(keys, values)):
        producer.produce(topic, key=key, value=value, partition=n % PARTITIONS,
                         on_delivery=lambda err, msg: acked.add((msg.topic(), msg.partition(), msg.offset()))
                         if err is None else None)
    assert producer.flush(60) == 0
    assert len(acked) == len(values)
    return acked


def _all_stopped(statuses: list[str]) -> bool:
    return len(statuses) == PARTITIONS and all(s.startswith("stopped: SCHEMA_INCOMPATIBLE") for s in statuses)


def _columns(path) -> str:
    return DeltaTable(str(path)).schema().to_json()


def test_the_table_follows_added_fields_and_stops_at_a_changed_type(bootstrap, spark, schema_registry,
                                                                    unique_name, tmp_path):
    topic = unique_name
    create_topic(bootstrap, topic, PARTITIONS)
    context = SerializationContext(topic, MessageField.VALUE)
    key_of = _serializer(schema_registry, KEY)
    keys = [key_of({"n": n}, SerializationContext(topic, MessageField.KEY)) for n in range(PER_VERSION)]
    acked = _produce(bootstrap, topic, keys, [_serializer(schema_registry, V1)(
        {"id": n, "item": "tea", "address": {"city": "Oslo"}}, context) for n in range(PER_VERSION)])
    extra = (f'format:\n  type: avro\n  schema_registry: {{url: "{schema_registry.url}"}}\n  key: {{type: avro}}\n')
    path = write_pipeline(tmp_path / "pipeline.yaml", bootstrap, topic, topic, tmp_path, extra=extra)
    path.write_text(path.read_text().replace("dead_letter_path:", "schema_evolution: add_columns\n  dead_letter_path:"))
    config = load_pipeline(path)
    members = [MemberProcess(name, path, tmp_path) for name in ("a", "b")]
    wait_until(lambda: table_reached(config.sink.path, config.name, log_end_offsets(acked)), 240,
               "the table to hold the first version's records")

    v1 = _serializer(schema_registry, V1)  # a producer still on version 1, and a value no reader can use
    dead = _produce(bootstrap, topic, keys[:1], [b"not avro"])
    acked |= _produce(bootstrap, topic, keys, [_serializer(schema_registry, V2)(
        {"id": 100 + n, "item": "cup", "address": {"city": "Rome"}, "note": f"n{n}"}, context) if n % 4 else
        v1({"id": 100 + n, "item": "cup", "address": {"city": "Rome"}}, context) for n in range(PER_VERSION)])
    wait_until(lambda: table_reached(config.sink.path, config.name, log_end_offsets(acked | dead)), 120,
               "the table to hold the second version's records")
    assert '"name":"note"' in _columns(config.sink.path)

    acked |= _produce(bootstrap, topic, keys, [_serializer(schema_registry, V3)(
        {"id": 200 + n, "item": "pot", "address": {"city": "Lima", "zip": f"z{n}"}, "note": None}, context)
        for n in range(PER_VERSION)])
    wait_until(lambda: table_reached(config.sink.path, config.name, log_end_offsets(acked)), 120,
               "the table to hold the third version's records")
    assert '"name":"zip"' in _columns(config.sink.path)
    for member in members:
        assert member.count("query started over reader scg-kafka") == 1, member.tail()
        assert member.count("SCHEMA_INCOMPATIBLE") == 0, member.tail()

    _allow_any_change(schema_registry, f"{topic}-value")
    changed = _produce(bootstrap, topic, keys, [_serializer(schema_registry, RETYPED)(
        {"id": 300 + n, "item": n, "address": {"city": "Kyiv", "zip": None}, "note": None}, context)
        for n in range(PARTITIONS)])
    for member in members:
        member.wait_for(r"SCHEMA_INCOMPATIBLE.*column item: the table has string, the batch long", 120)
    wait_until(lambda: _all_stopped(partition_statuses(path)), 120,
               lambda: f"scg describe to show every partition stopped: {partition_statuses(path)}")
    assert all(member.proc.poll() is None for member in members)
    for member in members:
        member.stop()

    rows = spark.read.format("delta").load(config.sink.path).collect()
    coordinates = [(r.topic, r.partition, r.offset) for r in rows]
    assert len(coordinates) == len(set(coordinates)), "duplicate (topic, partition, offset) rows"
    assert set(coordinates) == acked and not changed & set(coordinates)
    by_id = {r.id: r for r in rows}
    assert sorted(by_id) == [*range(PER_VERSION), *range(100, 100 + PER_VERSION), *range(200, 200 + PER_VERSION)]
    assert all(r.key.n == r.id % 100 for r in rows)
    assert (by_id[0].note, by_id[0].address.zip) == (None, None)
    assert (by_id[101].note, by_id[101].address.city, by_id[101].address.zip) == ("n1", "Rome", None)
    assert (by_id[104].note, by_id[104].address.city) == (None, "Rome")  # version 1 read as version 2
    dead_letters = spark.read.format("delta").load(config.sink.dead_letter_path).collect()
    assert [(r.value, r.reason) for r in dead_letters] == [(b"not avro", "not_schema_registry_framed")]
    assert (by_id[202].address.city, by_id[202].address.zip) == ("Lima", "z2")
