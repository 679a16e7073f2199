"""A micro-batch larger than the driver could ever hold commits exactly once (docs/DESIGN.md
invariant 8): spark-submit on a standalone master with two workers, Spark's default driver heap
and ``spark.driver.maxResultSize=32m``, one batch of more than 1 GiB of record values. The
executors write the files; the driver only receives their metadata and commits."""
from __future__ import annotations

import re

import pytest

from tests.integration.test_spark_submit import submit
from tests.support.kafka_data import create_topic, write_pipeline
from tests.support.standalone import StandaloneCluster

pytestmark = pytest.mark.integration

PARTITIONS = 4
RECORDS = 1_100_000
VALUE_BYTES = 1_000            # 1.1e9 bytes of values > 1 GiB
SCHEMA = "id BIGINT, name STRING, payload STRING"


def produce_fast(bootstrap: str, topic: str, records: int) -> dict[int, int]:
    """``records`` JSON values of exactly VALUE_BYTES bytes; returns each partition's log-end offset."""
    from confluent_kafka import Producer

    ends: dict[int, int] = {}

    def on_delivery(err, msg):
        assert err is None, err
        ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 50,
                         "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                         "log_level": 3})
    for i in range(records):
        head = f'{{"id": {i}, "name": "n{i}", "payload": "'
        value = head + "x" * (VALUE_BYTES - len(head) - 2) + '"}'
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    return ends


def test_a_batch_larger_than_the_driver_commits_exactly_once(bootstrap, spark, tmp_path, unique_name):
    create_topic(bootstrap, unique_name, PARTITIONS)
    ends = produce_fast(bootstrap, unique_name, RECORDS)
    assert sum(ends.values()) == RECORDS
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, unique_name, unique_name, tmp_path,
                          extra=f'format: {{type: json, schema: "{SCHEMA}"}}\n')
    text = path.read_text().replace("processing_time: 500ms", "available_now: true")
    path.write_text(text.replace("  starting_offsets: earliest",
                                 f"  starting_offsets: earliest\n  max_offsets_per_trigger: {RECORDS * 2}"))
    with StandaloneCluster(tmp_path, cores=1, memory="2g", workers=2) as cluster:
        result = submit(cluster.url, path, timeout_s=1500, conf={
            "spark.driver.maxResultSize": "32m", "spark.executor.memory": "1g",
            "spark.executor.cores": "1", "spark.cores.max": "2"})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    batches = [int(m.group(1)) for m in re.finditer(r"batch \d+: (\d+) records", result.stdout)]
    assert batches == [RECORDS], f"expected one batch of every record, got {batches}"

    table = spark.read.format("delta").load(str(tmp_path / "table"))
    per_partition = {r["partition"]: r for r in table.groupBy("partition").agg(
        {"offset": "min", "*": "count"}).withColumnRenamed("min(offset)", "low")
        .withColumnRenamed("count(1)", "rows").collect()}
    distinct = table.select("topic", "partition", "offset").distinct().count()
    assert distinct == table.count() == RECORDS
    assert {p: (r["low"], r["rows"]) for p, r in per_partition.items()} == {p: (0, e) for p, e in ends.items()}
