"""Avro in the Confluent wire format, end to end on real components: records produced with
confluent-kafka's own ``AvroSerializer`` against a real schema registry (Apicurio's
Confluent-compatible API), in two schema versions, next to values no reader can use; read by the
Arrow path and by the Spark SQL path into real Delta tables that agree row for row; keys in
Avro; a registry that is down while ``bin/scg`` runs. A pipeline whose reader schema is the
subject's latest version, run by two members, is tests/e2e/test_schema_evolution.py."""
from __future__ import annotations

import datetime
import json
import subprocess
import threading
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable

from groupmgr.core import OffsetRange
from pipelines.runtime.arrow_batches import ArrowKafkaBatch, arrow_batches
from pipelines.runtime.avro_types import AvroFormat
from pipelines.runtime.install_paths import PROJECT_ROOT
from pipelines.runtime.records import RecordFormat
from pipelines.runtime.registry_client import RegistrySettings
from tests.integration.test_arrow_path import _rows, _tables, _write
from tests.support.kafka_data import create_topic, partition_statuses, write_pipeline
from tests.support.switchable_proxy import SwitchableProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
V2 = {**V1, "fields": V1["fields"] + [
    {"name": "address", "type": ["null", {"type": "record", "name": "Address", "fields": [
        {"name": "city", "type": "string"}, {"name": "tags", "type": {"type": "array", "items": "string"}}]}],
     "default": None}]}
RETYPED = {**V1, "fields": [{"name": "id", "type": "string"}, {"name": "item", "type": "string"},
                            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
AT = datetime.datetime(2026, 11, 27, 10, 0, tzinfo=datetime.timezone.utc)
CLIENT_TIMEOUT_S = 30  # a registry request that takes longer fails the test instead of hanging it


@pytest.fixture
def registry(schema_registry):
    return schema_registry


def _serializer(registry, schema) -> AvroSerializer:
    """confluent-kafka's serializer with Confluent's classic subject naming (``<topic>-value``, or
    ``<topic>-key`` in a key's context): its default asks the registry for topic associations
    first, an API Apicurio does not have."""
    return AvroSerializer(SchemaRegistryClient({"url": registry.url, "timeout": CLIENT_TIMEOUT_S}), json.dumps(schema),
                          conf={"subject.name.strategy": topic_subject_name_strategy})


def _allow_any_change(registry, subject: str) -> None:
    request = urllib.request.Request(f"{registry.url}/config/{subject}", method="PUT",
                                     data=json.dumps({"compatibility": "NONE"}).encode(),
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def _produce(bootstrap, topic, values, keys=None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for n, value in enumerate(values):
        producer.produce(topic, key=f"k{n}".encode() if keys is None else keys[n], value=value, partition=n % 2)
    assert producer.flush(60) == 0


def _avro_values(registry, topic):
    """Good records of both versions and bad values, each with the reason it must get (None: good)."""
    context = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = _serializer(registry, V1), _serializer(registry, V2)
    first = v1({"id": 1, "item": "tea", "at": AT}, context)
    records = [(first, None),
               (v2({"id": 2, "item": "cup", "at": AT, "address": {"city": "Oslo", "tags": ["a", "b"]}}, context), None),
               (v2({"id": 3, "item": "pot", "at": AT, "address": None}, context), None)]
    _allow_any_change(registry, f"{topic}-value")
    retyped = _serializer(registry, RETYPED)({"id": "x", "item": "mug", "at": AT}, context)
    unknown_id = b"\x00\x7f\xff\xff\xf0" + first[5:]
    return records + [(b'{"id": 4}', "not_schema_registry_framed"), (b"\x00\x00", "not_schema_registry_framed"),
                      (unknown_id, "unknown_schema_id"), (first[:-3], "undecodable"), (first + b"\x00", "undecodable"),
                      (retyped, "incompatible_schema"), (None, "null_value")]


def both_paths(spark, bootstrap, topic, fmt, values, tmp_path, keys=None) -> tuple[str, str]:
    """``values`` produced to ``topic`` (2 partitions; with ``keys``, else keys of their own) and
    written by the Arrow path and by the Spark SQL path; asserts both output tables and both
    dead-letter tables are equal row for row and returns the Arrow path's (output, dead-letter)
    table paths."""
    create_topic(bootstrap, topic, 2)
    _produce(bootstrap, topic, values, keys)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    ends = {p: consumer.get_watermark_offsets(KafkaTP(topic, p), timeout=30)[1] for p in (0, 1)}
    consumer.close()
    ranges = tuple(OffsetRange(topic, p, 0, ends[p]) for p in (0, 1))
    batch_df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("assign", json.dumps({topic: [0, 1]}))
                .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    arrow_out, arrow_dead = _tables(spark, tmp_path, "arrow", fmt)
    prepared = _write(arrow_out, arrow_dead, fmt, ranges, batch_df,
                      prepare=arrow_batches(spark, fmt, None, {"bootstrap.servers": bootstrap}, lambda: 2))
    assert [type(b) for b in prepared] == [ArrowKafkaBatch]
    sql_out, sql_dead = _tables(spark, tmp_path, "sql", fmt)
    _write(sql_out, sql_dead, fmt, ranges, batch_df, transform="SELECT * FROM input")
    for arrow_path, sql_path in ((arrow_out.path, sql_out.path), (arrow_dead.path, sql_dead.path)):
        assert _rows(arrow_path) == _rows(sql_path)
    return arrow_out.path, arrow_dead.path


def test_both_paths_read_each_writer_version_into_the_reader_schema_and_name_every_bad_value(
        spark, bootstrap, registry, unique_name, tmp_path):
    cases = _avro_values(registry, unique_name) * 3
    fmt = RecordFormat("avro", None, 1 << 20, framed=AvroFormat(json.dumps(V2), RegistrySettings(registry.url)))
    output_path, dead_path = both_paths(spark, bootstrap, unique_name, fmt, [value for value, _ in cases], tmp_path)
    _, output = _rows(output_path)
    assert sorted((r["id"], r["item"], r["at"], r["address"]) for r in output) == sorted(
        [(1, "tea", AT, None), (2, "cup", AT, {"city": "Oslo", "tags": ["a", "b"]}), (3, "pot", AT, None)] * 3)
    _, dead = _rows(dead_path)
    expected = sorted(((value or b"", reason) for value, reason in cases if reason is not None))
    assert sorted((r["value"] or b"", r["reason"]) for r in dead) == expected


def test_avro_keys_are_read_into_the_key_column_on_both_paths_and_a_bad_key_is_a_dead_letter(
        spark, bootstrap, registry, unique_name, tmp_path):
    key_schema = {"type": "record", "name": "OrderKey", "namespace": "shop", "fields": [
        {"name": "shop", "type": "string"}, {"name": "n", "type": "long"}]}
    keys = _serializer(registry, key_schema)
    key_context = SerializationContext(unique_name, MessageField.KEY)
    value = _serializer(registry, V1)({"id": 1, "item": "tea", "at": AT}, SerializationContext(unique_name, MessageField.VALUE))
    good_keys = [keys({"shop": "oslo", "n": n}, key_context) for n in range(4)]
    settings = RegistrySettings(registry.url)
    fmt = RecordFormat("avro", None, 1 << 20, framed=AvroFormat(json.dumps(V1), settings),
                       key_framed=AvroFormat(json.dumps(key_schema), settings))
    output_path, dead_path = both_paths(spark, bootstrap, unique_name, fmt, [value] * 6, tmp_path,
                                        keys=[*good_keys, None, b"k-not-avro"])
    _, output = _rows(output_path)
    assert sorted((r["key"] or {}).get("n", -1) for r in output) == [-1, 0, 1, 2, 3]
    assert {r["key"]["shop"] for r in output if r["key"]} == {"oslo"}
    _, dead = _rows(dead_path)
    assert [(r["key"], r["reason"]) for r in dead] == [(b"k-not-avro", "key_not_schema_registry_framed")]


def run_to_the_end(bootstrap, topic, tmp_path, format_yaml: str) -> tuple[list[dict], list[dict]]:
    """A pipeline over ``topic`` whose format section is ``format_yaml``, run by ``bin/scg run``
    with ``available_now``; the output table's rows and the dead-letter table's."""
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, topic, topic, tmp_path, extra=format_yaml)
    path.write_text(path.read_text().replace("processing_time: 500ms", "available_now: true"))
    run = subprocess.run([str(PROJECT_ROOT / "bin" / "scg"), "run", str(path)], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return (DeltaTable(str(tmp_path / "table")).to_pyarrow_table().to_pylist(),
            DeltaTable(str(tmp_path / "dead")).to_pyarrow_table().to_pylist())


def test_a_registry_that_is_down_holds_the_batch_until_it_answers(bootstrap, schema_registry, unique_name, tmp_path):
    """The registry behind a proxy that refuses connections: the member retries the batch under
    SCHEMA_REGISTRY_UNAVAILABLE (a progress line, and `scg describe` names it for both partitions
    although the tables hold nothing yet), no record becomes a dead letter, and once the registry
    answers every record lands and the run ends."""
    topic = unique_name
    create_topic(bootstrap, topic, 2)
    context = SerializationContext(topic, MessageField.VALUE)
    serialize = _serializer(schema_registry, V1)
    _produce(bootstrap, topic, [serialize({"id": n, "item": "tea", "at": AT}, context) for n in range(20)])
    proxy = SwitchableProxy(("127.0.0.1", schema_registry.port))
    proxy.down()
    (tmp_path / "order.avsc").write_text(json.dumps(V1))
    url = schema_registry.url.replace(f":{schema_registry.port}/", f":{proxy.port}/")
    extra = f'format:\n  type: avro\n  schema_registry: {{url: "{url}"}}\n  reader_schema: order.avsc\n'
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, topic, topic, tmp_path, extra=extra)
    path.write_text(path.read_text().replace("processing_time: 500ms", "available_now: true"))
    run = subprocess.Popen([str(PROJECT_ROOT / "bin" / "scg"), "run", str(path)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True).start()
    try:
        wait_until(lambda: any("SCHEMA_REGISTRY_UNAVAILABLE" in line and "retry" in line for line in lines), 300,
                   lambda: "a retry under SCHEMA_REGISTRY_UNAVAILABLE; output:\n" + "".join(lines[-30:]))
        wait_until(lambda: [s.split(":")[:2] for s in partition_statuses(path)] ==
                   [["stopped", " SCHEMA_REGISTRY_UNAVAILABLE"]] * 2, 120,
                   lambda: f"scg describe to name the registry's fault: {partition_statuses(path)}")
        proxy.up = True
        assert run.wait(timeout=300) == 0, "".join(lines[-50:])
    finally:
        proxy.close()
        if run.poll() is None:
            run.kill()
    rows = DeltaTable(str(tmp_path / "table")).to_pyarrow_table().to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(20))
    assert DeltaTable(str(tmp_path / "dead")).to_pyarrow_table().num_rows == 0


DEBEZIUM_VALUE = {"type": "record", "name": "Envelope", "namespace": "shop.customers", "fields": [
    {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "op", "type": "string"},
    {"name": "source", "type": {"type": "record", "name": "Source", "fields": [{"name": "lsn", "type": "long"}]}}]}
DEBEZIUM_KEY = {"type": "record", "name": "Key", "namespace": "shop.customers", "fields": [
    {"name": "id", "type": "long"}]}


def test_debezium_avro_changes_with_avro_keys_are_merged_into_an_upsert_table(
        spark, bootstrap, registry, unique_name, tmp_path):
    from pipelines.runtime.batch_writer import BatchWriter, TableTargets
    from pipelines.runtime.changes import ChangeSpec, classified_changes
    from pipelines.runtime.pipeline_tables import arrow_schema, upsert_schema
    from pipelines.runtime.records import KAFKA_ROW_DDL, classify, dead_letters
    from sinks.txn_table import TxnDeltaTable
    from sinks.upsert_table import UpsertDeltaTable

    values = SerializationContext(unique_name, MessageField.VALUE)
    keys = SerializationContext(unique_name, MessageField.KEY)
    value_of, key_of = _serializer(registry, DEBEZIUM_VALUE), _serializer(registry, DEBEZIUM_KEY)

    def change(op, ident, name, lsn):
        row = {"id": ident, "name": name}
        return key_of({"id": ident}, keys), value_of({"before": None if op == "c" else row,
                                                      "after": None if op == "d" else row, "op": op,
                                                      "source": {"lsn": lsn}}, values)

    records = [change("c", 1, "a", 1), change("c", 2, "b", 2), change("c", 3, "c", 3), change("u", 1, "a2", 4),
               change("d", 2, "b", 5), (key_of({"id": 3}, keys), None)]
    create_topic(bootstrap, unique_name, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for key, value in records:
        producer.produce(unique_name, key=key, value=value)
    assert producer.flush(60) == 0
    settings = RegistrySettings(registry.url)
    fmt = RecordFormat("avro", None, 1 << 20, framed=AvroFormat(json.dumps(DEBEZIUM_VALUE), settings),
                       key_framed=AvroFormat(json.dumps(DEBEZIUM_KEY), settings))
    spec = ChangeSpec(("id",), "source.lsn", delete_on_tombstone=True, envelope="debezium")
    classified = classify(spark.createDataFrame([], KAFKA_ROW_DDL), fmt)
    table = UpsertDeltaTable(str(tmp_path / "table"), "p", upsert_schema(classified, fmt, spec), spec.key)
    dead = TxnDeltaTable(str(tmp_path / "dead"), "p",
                         arrow_schema(dead_letters(classified_changes(classified, fmt, spec), fmt)))
    tp = OffsetRange(unique_name, 0, 0, len(records))
    targets = TableTargets(table, dead, table.claim([tp.tp]), dead.claim([tp.tp]))

    class Log:
        def ranges(self, batch_id):
            return (tp,)

    writer = BatchWriter(fmt, None, targets, Log(), commit_kafka=lambda offsets, meta: True,
                         report=lambda report: None, refused=lambda batch_id, err: None, changes=spec)
    batch_df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("assign", json.dumps({unique_name: [0]}))
                .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    writer(batch_df, 0)
    got = DeltaTable(table.path).to_pyarrow_table().to_pylist()
    assert [(r["id"], r["name"], r["key"]) for r in got] == [(1, "a2", {"id": 1})]
    assert DeltaTable(dead.path).to_pyarrow_table().num_rows == 0
