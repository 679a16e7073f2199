"""A bad partition stays contained, on a real broker, Spark and Delta.

* Records deleted through the admin API (what retention does) before the query read them: Spark
  stops the query at the gap, the restart's partition checks find the partition; with
  ``on_data_loss: fail`` it stays stopped and reported (progress line, ``scg describe``) while the
  other partitions flow; with ``skip`` a ``data_loss`` marker row records the lost range and the
  partition moves on. Nothing vanishes without a trace.
* A topic deleted and created again under the same name is a new incarnation: its records land
  exactly once, never taken for a replay of the old offsets.
"""
from __future__ import annotations

import json
import threading
from contextlib import contextmanager

import pytest
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from groupmgr.core import TopicPartition
from pipelines.cli.describe_pipeline import describe_command
from pipelines.config import load_pipeline
from pipelines.runtime.batch_writer import BatchHooks
from pipelines.runtime.membership import group_member_factory
from pipelines.runtime.runner import PipelineRunner
from tests.support.kafka_data import create_topic, table_ids, write_pipeline
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
WAIT_S = 180


@contextmanager
def running(config, spark, lines, hooks=BatchHooks()):
    """A runner in a thread for the block; stopped (and joined) after it."""
    runner = PipelineRunner.open(config, spark, out=lines.append, hooks=hooks,
                                 member_factory=lambda c, l: group_member_factory(c, l, metadata_max_age_ms=1000))
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield runner
    finally:
        stop.set()
        thread.join(120)
    assert not thread.is_alive()


def test_records_deleted_before_they_were_read(bootstrap, spark, tmp_path, unique_name, capsys):
    topic = unique_name
    create_topic(bootstrap, topic, 3)
    first = _produce_to(bootstrap, topic, {p: range(p * 1000, p * 1000 + 10) for p in range(3)})
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path)
    config = load_pipeline(path)
    lines: list[str] = []
    batch_zero_done, deleted = threading.Event(), threading.Event()
    first_batch: list[int] = []

    def hold_second_batch(batch_id, ranges):
        """The batch after the first (the new records) waits, before it reads them, until records
        were deleted."""
        if not first_batch or first_batch == [batch_id]:
            first_batch[:] = [batch_id]
            batch_zero_done.set()
        elif not deleted.is_set():
            deleted.wait(WAIT_S)

    hooks = BatchHooks(before_commit=hold_second_batch)
    with running(config, spark, lines, hooks) as runner:
        assert batch_zero_done.wait(WAIT_S)
        wait_until(lambda: table_ids(config.sink.path) >= first, WAIT_S, "first records")
        # While the query runs: more records, then partition 1 loses offsets 10..24 (retention).
        more = _produce_to(bootstrap, topic, {p: range(p * 1000 + 10, p * 1000 + 30) for p in range(3)})
        _delete_records(bootstrap, topic, 1, 25)
        deleted.set()
        wait_until(lambda: any("stopped: [KAFKA_DATA_LOSS]" in line for line in lines), WAIT_S, "partition 1 stopped")
        expected = first | {i for i in more if i // 1000 != 1}
        wait_until(lambda: table_ids(config.sink.path) >= expected, WAIT_S, "partitions 0 and 2 flow on")
        assert TopicPartition(topic, 1) in runner.owned.stopped and runner.member.raise_if_failed() is None
        capsys.readouterr()
        assert describe_command(_Args(str(path))) == 0
        described = json.loads(capsys.readouterr().out)
        status = {p["partition"]: p["status"] for p in described["partitions"]}
        assert status[1].startswith("stopped: KAFKA_DATA_LOSS") and status[0] == status[2] == ""
    line = next(line for line in lines if "stopped: [KAFKA_DATA_LOSS]" in line)
    assert f"offsets 10..24 of {topic}-1 were deleted" in line
    assert table_ids(config.sink.path) == expected  # nothing of partition 1 after the gap was written

    # The same pipeline with on_data_loss: skip: a marker for 10..24, then 25..29 flow.
    path.write_text(path.read_text().replace("  starting_offsets: earliest", "  starting_offsets: earliest\n"
                                                                            "  on_data_loss: skip"))
    config = load_pipeline(path)
    with running(config, spark, lines):
        wait_until(lambda: table_ids(config.sink.path) >= expected | set(range(1025, 1030)), WAIT_S,
                   "partition 1 skips the gap")
    rows = spark.read.format("delta").load(config.sink.path).select("id").collect()
    assert sorted(r.id for r in rows) == sorted(expected | set(range(1025, 1030)))  # exactly once
    dead = spark.read.format("delta").load(config.sink.dead_letter_path).collect()
    markers = [r for r in dead if r.reason == "data_loss"]
    assert len(markers) == 1 and (markers[0].partition, markers[0].offset) == (1, 10)
    assert json.loads(markers[0].value)["lost_until"] == 25


def test_a_recreated_topic_is_read_again_exactly_once(bootstrap, spark, tmp_path, unique_name):
    topic = unique_name
    create_topic(bootstrap, topic, 2)
    old = _produce_to(bootstrap, topic, {p: range(p * 1000, p * 1000 + 20) for p in range(2)})
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path)
    config = load_pipeline(path)
    lines: list[str] = []
    with running(config, spark, lines):
        wait_until(lambda: table_ids(config.sink.path) >= old, WAIT_S, "the first incarnation")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([topic])[topic].result(timeout=30)
        wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, WAIT_S, "topic deleted")
        wait_until(lambda: _create(bootstrap, topic), WAIT_S, "topic created again")
        new = _produce_to(bootstrap, topic, {p: range(5000 + p * 1000, 5000 + p * 1000 + 8) for p in range(2)})
        wait_until(lambda: table_ids(config.sink.path) >= old | new, WAIT_S, "the new incarnation")
    rows = spark.read.format("delta").load(config.sink.path).select("id").collect()
    assert sorted(r.id for r in rows) == sorted(old | new)  # every record exactly once, none skipped
    assert any("TOPIC_RECREATED" in line for line in lines)
    history = DeltaTable(config.sink.path).history()
    assert any("TOPIC_RECREATED" in str(entry.get("scg.event", "")) for entry in history)


class _Args:
    def __init__(self, pipeline):
        self.pipeline, self.json, self.group, self.bootstrap = pipeline, True, None, None


def _produce_to(bootstrap, topic, ids_by_partition) -> set[int]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    try:
        for partition, ids in ids_by_partition.items():
            for i in ids:
                producer.produce(topic, key=f"k{i}", value=json.dumps({"id": i, "name": "n"}), partition=partition)
        assert producer.flush(60) == 0
    finally:
        producer = None
    return {i for ids in ids_by_partition.values() for i in ids}


def _delete_records(bootstrap, topic, partition, before):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([CkTopicPartition(topic, partition, before)])
    for future in futures.values():
        assert future.result(timeout=30).low_watermark == before


def _create(bootstrap, topic) -> bool:
    try:
        create_topic(bootstrap, topic, 2)
        return True
    except Exception:  # noqa: BLE001 - the deletion may still be in progress
        return False
