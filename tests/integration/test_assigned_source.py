"""The ``scg-kafka`` source against a real broker and a real Spark session: exact ranges, committed
reads across aborted transactions, data loss, and an assignment that changes between micro-batches
of one running query (no restart)."""
from __future__ import annotations

import threading
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.errors import StreamingQueryException

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.assigned_offsets import Assignment, Claim, RateLimits, SourceOffset, batch_ranges
from pipelines.runtime.assigned_source import SOURCE_NAME, AssignedKafkaSource, AssignmentFile, source_options
from pipelines.runtime.kafka_range_reader import KEPT_CONSUMERS, KafkaDataLoss, RangeConsumers, read_range
from tests.support.kafka_data import create_topic, produce

WAIT_S = 120.0


@pytest.fixture(autouse=True)
def _no_consumer_outlives_its_test():
    """The reads in this process keep their consumers (kafka_range_reader.KEPT_CONSUMERS): close
    them before the broker goes, or they retry its port until the process ends."""
    yield
    KEPT_CONSUMERS.close_all()


def _rows(bootstrap, rng, **config):
    batches = list(read_range({"bootstrap.servers": bootstrap, **config}, rng))
    return [(r["offset"], r["value"]) for b in batches for r in b.to_pylist()]


def test_a_range_is_read_exactly_with_spark_s_kafka_columns(bootstrap, unique_name):
    create_topic(bootstrap, unique_name, 1)
    produce(bootstrap, unique_name, [(f"k{i}", f"v{i}") for i in range(50)])
    batches = list(read_range({"bootstrap.servers": bootstrap}, OffsetRange(unique_name, 0, 10, 40)))
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(10, 40))
    first = rows[0]
    assert (first["key"], first["value"], first["topic"], first["partition"]) == (b"k10", b"v10", unique_name, 0)
    assert first["timestampType"] == 0 and first["timestamp"] is not None
    assert list(read_range({"bootstrap.servers": bootstrap}, OffsetRange(unique_name, 0, 7, 7))) == []


def test_a_kept_consumer_reads_each_next_range_exactly(bootstrap, unique_name):
    """One consumer reads range after range (as a Spark Python worker does, task after task):
    nothing it prefetched for one range reaches the next, whichever partition or offset."""
    create_topic(bootstrap, unique_name, 2)
    # idempotent: a retried batch (the new topic's leader not yet known) keeps its place in the log
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(3000):
        for partition in (0, 1):
            producer.produce(unique_name, value=f"p{partition}-{i}".encode(), partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0
    made = []
    kept = RangeConsumers(lambda config: made.append(config) or Consumer(config))
    config = {"bootstrap.servers": bootstrap}
    for partition, start, end in ((0, 0, 10), (1, 5, 2500), (0, 2, 4), (0, 2990, 3000), (1, 0, 3000), (0, 11, 12)):
        batches = list(read_range(config, OffsetRange(unique_name, partition, start, end), consumers=kept))
        rows = [(r["partition"], r["offset"], r["value"]) for b in batches for r in b.to_pylist()]
        assert rows == [(partition, o, f"p{partition}-{o}".encode()) for o in range(start, end)]
    assert len(made) == 1
    kept.close_all()


def test_read_committed_skips_aborted_records_and_ends_across_markers(bootstrap, unique_name):
    create_topic(bootstrap, unique_name, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name})
    producer.init_transactions(30)
    for values, commit in ((["a0", "a1"], True), (["x0", "x1", "x2"], False), (["b0"], True)):
        producer.begin_transaction()
        for v in values:
            producer.produce(unique_name, value=v.encode(), partition=0)
        assert producer.flush(30) == 0  # on the log before the abort (else librdkafka drops them unsent)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    # a0 0, a1 1, commit marker 2, x0-x2 3-5, abort marker 6, b0 7, commit marker 8: log end 9
    everything = OffsetRange(unique_name, 0, 0, 9)
    uncommitted = _rows(bootstrap, everything, **{"isolation.level": "read_uncommitted"})
    assert [v for _, v in uncommitted] == [b"a0", b"a1", b"x0", b"x1", b"x2", b"b0"]
    committed = _rows(bootstrap, everything, **{"isolation.level": "read_committed"})
    assert committed == [(0, b"a0"), (1, b"a1"), (7, b"b0")]
    assert _rows(bootstrap, OffsetRange(unique_name, 0, 3, 7), **{"isolation.level": "read_committed"}) == []
    assert _rows(bootstrap, OffsetRange(unique_name, 0, 2, 8), **{"isolation.level": "read_committed"}) == [(7, b"b0")]


def test_records_deleted_before_they_were_read_are_data_loss(bootstrap, unique_name):
    create_topic(bootstrap, unique_name, 1)
    produce(bootstrap, unique_name, [(None, f"v{i}") for i in range(30)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_records([CkTopicPartition(unique_name, 0, 20)])[CkTopicPartition(unique_name, 0, 20)].result(30)
    with pytest.raises(KafkaDataLoss, match=r"KAFKA_DATA_LOSS.*from 5 .*starts at 20.*Some data may have been lost"):
        _rows(bootstrap, OffsetRange(unique_name, 0, 5, 30))
    assert [o for o, _ in _rows(bootstrap, OffsetRange(unique_name, 0, 20, 30))] == list(range(20, 30))


class _Batches:
    """foreachBatch that records each batch's planned ranges (from the checkpoint, as the batch
    writer reads them) and the offsets of its rows."""

    def __init__(self, checkpoint: str):
        self.checkpoint = checkpoint
        self.seen: list[tuple[int, tuple[OffsetRange, ...], list[tuple[str, int, int]]]] = []
        self.cond = threading.Condition()

    def __call__(self, df, batch_id: int) -> None:
        current = _planned(self.checkpoint, batch_id)
        previous = _planned(self.checkpoint, batch_id - 1) if batch_id > 0 else SourceOffset()
        rows = sorted((r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect())
        with self.cond:
            self.seen.append((batch_id, batch_ranges(previous, current), rows))
            self.cond.notify_all()

    def wait_for(self, predicate, what: str):
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self.seen), WAIT_S), f"no {what} in {self.seen}"


def _planned(checkpoint: str, batch_id: int) -> SourceOffset:
    """The offset Spark logged for ``batch_id`` (line 3 of ``offsets/<id>``: the one source's)."""
    with open(f"{checkpoint}/offsets/{batch_id}") as f:
        return SourceOffset.from_json(f.read().splitlines()[2])


def _produce_to(bootstrap: str, topic: str, partition: int, values) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})  # in order, retries too
    for v in values:
        producer.produce(topic, value=v.encode(), partition=partition)
    assert producer.flush(30) == 0


def _read_rows(seen, tp: TopicPartition) -> list[int]:
    return sorted(o for _, _, rows in seen for t, p, o in rows if (t, p) == tp)


def test_the_assignment_changes_between_batches_of_one_running_query(spark, bootstrap, unique_name, tmp_path):
    create_topic(bootstrap, unique_name, 2)
    a, b = TopicPartition(unique_name, 0), TopicPartition(unique_name, 1)
    _produce_to(bootstrap, unique_name, 0, [f"a{i}" for i in range(20)])
    _produce_to(bootstrap, unique_name, 1, [f"b{i}" for i in range(20)])
    spark.dataSource.register(AssignedKafkaSource)
    assignment = AssignmentFile(tmp_path / "assignment.json")
    assignment.write(Assignment({a: Claim(1, 5)}))
    checkpoint = str(tmp_path / f"checkpoint-{uuid.uuid4().hex[:6]}")
    batches = _Batches(checkpoint)
    options = source_options({"bootstrap.servers": bootstrap}, assignment.path, RateLimits(max_rows=10))
    query = (spark.readStream.format(SOURCE_NAME).options(**options).load()
             .writeStream.foreachBatch(batches).option("checkpointLocation", checkpoint)
             .trigger(processingTime="200 milliseconds").start())
    try:
        batches.wait_for(lambda seen: _read_rows(seen, a) == list(range(5, 20)), "partition 0 from 5")
        assert all(sum(r.count for r in ranges) <= 10 for _, ranges, _ in batches.seen)  # maxOffsetsPerTrigger
        assignment.write(Assignment({b: Claim(2, 12)}))  # a leaves, b joins at 12
        batches.wait_for(lambda seen: _read_rows(seen, b) == list(range(12, 20)), "partition 1 from 12")
        _produce_to(bootstrap, unique_name, 0, [f"a{i}" for i in range(20, 25)])
        _produce_to(bootstrap, unique_name, 1, [f"b{i}" for i in range(20, 23)])
        batches.wait_for(lambda seen: _read_rows(seen, b) == list(range(12, 23)), "partition 1 to 23")
        assert _read_rows(batches.seen, a) == list(range(5, 20))  # nothing of a after it left
        for _, ranges, rows in batches.seen:  # rows are exactly the planned ranges
            assert rows == sorted((r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end))
        assert query.isActive and query.exception() is None
    finally:
        query.stop()


def test_data_loss_fails_the_query_with_spark_s_wording(spark, bootstrap, unique_name, tmp_path):
    create_topic(bootstrap, unique_name, 1)
    tp = TopicPartition(unique_name, 0)
    produce(bootstrap, unique_name, [(None, f"v{i}") for i in range(10)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_records([CkTopicPartition(unique_name, 0, 6)])[CkTopicPartition(unique_name, 0, 6)].result(30)
    spark.dataSource.register(AssignedKafkaSource)
    assignment = AssignmentFile(tmp_path / "assignment.json")
    assignment.write(Assignment({tp: Claim(1, 2)}))
    options = source_options({"bootstrap.servers": bootstrap}, assignment.path, RateLimits())
    query = (spark.readStream.format(SOURCE_NAME).options(**options).load()
             .writeStream.foreachBatch(lambda df, i: df.count())
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="200 milliseconds").start())
    try:
        with pytest.raises(StreamingQueryException, match="Some data may have been lost"):
            query.awaitTermination(WAIT_S)  # raises the query's failure when it ends with one
        assert "KAFKA_DATA_LOSS" in str(query.exception())
    finally:
        query.stop()


HEADERS = [None, [("trace", b"t-1")], [("dup", b"1"), ("dup", b"2"), ("empty", None)],
           [("bytes", bytes(range(256))), ("clé", "é".encode())]]


def test_rows_and_headers_are_spark_s_kafka_source_s(spark, bootstrap, unique_name, tmp_path):
    """With includeHeaders the rows (headers included: order, repeated keys, null values, none)
    equal Spark's Kafka source's, column for column."""
    create_topic(bootstrap, unique_name, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})  # in order, retries too
    for i, headers in enumerate(HEADERS * 3):
        producer.produce(unique_name, key=None if i % 4 == 0 else f"k{i}".encode(), value=f"v{i}".encode(),
                         partition=0, headers=headers)
    assert producer.flush(30) == 0
    count = len(HEADERS) * 3
    spark.dataSource.register(AssignedKafkaSource)
    assignment = AssignmentFile(tmp_path / "assignment.json")
    assignment.write(Assignment({TopicPartition(unique_name, 0): Claim(1, 0)}))
    seen, cond = [], threading.Condition()

    def collect(df, _batch_id):
        rows = df.collect()
        with cond:
            seen.extend(rows)
            cond.notify_all()

    options = source_options({"bootstrap.servers": bootstrap}, assignment.path, RateLimits(), include_headers=True)
    query = (spark.readStream.format(SOURCE_NAME).options(**options).load().writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="200 milliseconds").start())
    try:
        with cond:
            assert cond.wait_for(lambda: len(seen) >= count, WAIT_S), f"{len(seen)} of {count} rows"
    finally:
        query.stop()
    spark_s = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", unique_name).option("includeHeaders", "true").load().collect())
    assert sorted(seen, key=lambda r: r.offset) == sorted(spark_s, key=lambda r: r.offset)
    assert [r.headers for r in sorted(seen, key=lambda r: r.offset)][:4] == [
        None, [("trace", b"t-1")], [("dup", b"1"), ("dup", b"2"), ("empty", None)],
        [("bytes", bytes(range(256))), ("clé", "é".encode())]]


def test_a_small_batch_over_many_partitions_runs_in_one_task_per_slot(spark, bootstrap, unique_name, tmp_path):
    """Six partitions' ranges, two task slots: the batch is two Spark tasks, and its rows are
    exactly the planned ranges (each range read whole, by one task)."""
    create_topic(bootstrap, unique_name, 6)
    for partition in range(6):
        _produce_to(bootstrap, unique_name, partition, [f"p{partition}-{i}" for i in range(3 + partition)])
    spark.dataSource.register(AssignedKafkaSource)
    assignment = AssignmentFile(tmp_path / "assignment.json")
    assignment.write(Assignment({TopicPartition(unique_name, p): Claim(1, 0) for p in range(6)}))
    seen, cond = [], threading.Condition()

    def collect(df, _batch_id):
        tasks, rows = df.rdd.getNumPartitions(), df.select("partition", "offset").collect()
        with cond:
            seen.append((tasks, sorted((r.partition, r.offset) for r in rows)))
            cond.notify_all()

    options = source_options({"bootstrap.servers": bootstrap}, assignment.path, RateLimits(), task_slots=2)
    query = (spark.readStream.format(SOURCE_NAME).options(**options).load().writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="200 milliseconds").start())
    try:
        with cond:
            assert cond.wait_for(lambda: seen, WAIT_S), "no batch"
    finally:
        query.stop()
    assert seen[0] == (2, [(p, o) for p in range(6) for o in range(3 + p)])
