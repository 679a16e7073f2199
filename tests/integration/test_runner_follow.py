"""``source.reader: scg-kafka`` with real group members: two runners in one Spark
session share a cooperative group. When the second joins, partitions move from the first to the
second without either query restarting (same query id, batch ids go on), each partition is
released only after its last batch in the old owner ended, and the table holds every record
exactly once (delta-spark). Before joining, a member warms up in its own query and leaves nothing
behind."""
from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from groupmgr.core import TopicPartition
from pipelines.config import load_pipeline
from pipelines.runtime.membership import group_member_factory
from pipelines.runtime.query_supervisor import QueryState
from pipelines.runtime.runner import PipelineRunner
from tests.support.kafka_data import (create_topic, delta_coordinates, json_events, log_end_offsets, produce,
                                      table_reached, write_pipeline)
from tests.support.static_member import StaticMember
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
PARTITIONS = 4


class Member:
    """One runner on its own thread, its progress lines kept."""

    def __init__(self, config, spark):
        self.lines: list[str] = []
        self.runner = PipelineRunner.open(config, spark, out=self.lines.append,
                                          member_factory=lambda c, l: group_member_factory(c, l, metadata_max_age_ms=1000))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.runner.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def owned(self):
        return set(self.runner.owned.partitions)

    def close(self):
        self.stop.set()
        self.thread.join(120)
        assert not self.thread.is_alive()


def test_partitions_move_between_following_queries_without_a_restart(bootstrap, spark, tmp_path, unique_name):
    create_topic(bootstrap, unique_name, PARTITIONS)
    produced = produce(bootstrap, unique_name, json_events(400))
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, unique_name, unique_name, tmp_path, reader="scg-kafka")
    path.write_text(path.read_text()
                    .replace("  heartbeat_interval: 500ms\n", "  heartbeat_interval: 500ms\n  assignor: cooperative-sticky\n"))
    config = load_pipeline(path)
    first = Member(config, spark)
    second = None
    try:
        wait_until(lambda: table_reached(config.sink.path, config.name, log_end_offsets(produced)), 180,
                   "the table to reach every produced offset")
        query_id = first.runner.reader.query.id
        second = Member(config, spark)
        wait_until(lambda: len(first.owned()) == len(second.owned()) == PARTITIONS // 2, 180,
                   "the two members to own half the partitions each")
        produced |= produce(bootstrap, unique_name, json_events(400, start=400))
        wait_until(lambda: table_reached(config.sink.path, config.name, log_end_offsets(produced)), 180,
                   "the table to reach every produced offset")
        assert first.runner.reader.query.id == query_id  # the same query read before and after
        for member in (first, second):
            assert sum("query started over reader" in line for line in member.lines) == 1, member.lines
            assert not any("starting query" in line for line in member.lines), member.lines
        # the first joined an empty group at once; the second rehearsed while the first read on
        assert any("joining without a rehearsal (the group has no member" in line for line in first.lines), first.lines
        assert any("warmed up" in line and "through reader scg-kafka" in line for line in second.lines), second.lines
        assert any("revoked 2 partition(s); the query reads them no more" in line for line in first.lines), first.lines
    finally:
        for member in (second, first):
            if member is not None:
                member.close()
    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)), "duplicate (topic, partition, offset) rows"
    assert set(rows) == produced


class GroupConsumer:
    """A confluent-kafka consumer that is a member of ``group`` while the block runs (it has
    joined when the block begins: its assignment arrived)."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        from confluent_kafka import Consumer

        self.assigned, self.stop = threading.Event(), threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "log_level": 0})
        self.consumer.subscribe([topic], on_assign=lambda consumer, partitions: self.assigned.set())
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.2)

    def __enter__(self) -> "GroupConsumer":
        self.thread.start()
        if not self.assigned.wait(60):
            self.__exit__()
            raise AssertionError("the consumer did not join its group")
        return self

    def commit(self, offsets: dict) -> None:
        """Commit ``offsets`` ({TopicPartition: offset}) for the group, synchronously, with the
        poll loop paused (a synchronous commit while another thread polled hung here)."""
        from confluent_kafka import TopicPartition as CKTopicPartition

        self.stop.set()
        self.thread.join(10)
        self.consumer.commit(offsets=[CKTopicPartition(tp.topic, tp.partition, offset) for tp, offset in offsets.items()],
                             asynchronous=False)
        self.stop.clear()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)
        self.consumer.close()


def test_the_warm_up_runs_in_the_member_s_own_query_and_leaves_nothing(bootstrap, spark, tmp_path, unique_name):
    """Before joining, the scg-kafka member's own query reads the last record of partition 0 under
    a claim of its own and hands the batches to the batch path without writing them: none while
    its group has no member (it joins at once); while another member is in the group, claimed
    again after each one until they stop getting faster or ``source.warm_up_limit`` is reached,
    while its committed offsets are caught up; more than a batch behind: one batch, to share
    them. No data file, no table version, no Kafka commit; the claim is dropped and the same
    query goes on. Its later claim of that partition reads every record from the start, exactly
    once."""
    create_topic(bootstrap, unique_name, 2)
    produced = produce(bootstrap, unique_name, json_events(40))
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, unique_name, unique_name, tmp_path, reader="scg-kafka",
                          warm_up_limit="4s")
    path.write_text(path.read_text().replace("  starting_offsets: earliest\n",
                                             "  starting_offsets: earliest\n  max_offsets_per_trigger: 10\n"))
    config = load_pipeline(path)
    partitions = [TopicPartition(unique_name, p) for p in range(2)]
    lines, members, readers = [], [], []

    def factory(cfg, listener):  # the group's offsets as the brokers have them, through a member that never joins
        readers.append(group_member_factory(cfg, listener))
        members.append(StaticMember(listener, partitions, group_offsets=readers[-1].group_offsets))
        return members[-1]

    def warmed_lines():
        return [line for line in lines if "batch path warmed up" in line]

    runner = PipelineRunner.open(config, spark, member_factory=factory, out=lines.append)
    tables = [Path(config.sink.path), Path(config.sink.dead_letter_path)]
    before = {t: sorted(p.relative_to(t) for p in t.rglob("*")) for t in tables}
    try:
        runner.reader.begin()          # run() starts the query over no partition before the warm-up
        query_id = runner.reader.query.id
        runner.reader.warm_up(threading.Event())     # the group has no member (the static member never joins it)
        assert any("joining without a rehearsal (the group has no member: nobody reads its partitions meanwhile)"
                   in line for line in lines), lines
        assert warmed_lines() == [] and runner.reader.claims == {}, lines
        with GroupConsumer(bootstrap, config.group.id, unique_name) as consumer:  # another member reads
            consumer.commit(log_end_offsets(produced))                           # ... and is caught up
            runner.reader.warm_up(threading.Event())
            assert any("the group's 1 member(s) read its partitions meanwhile" in line and "within 4s)" in line
                       for line in lines), lines
            assert f"read {unique_name}-0@" in warmed_lines()[0] and "in the member's query" in warmed_lines()[0]
            rehearsed = int(re.search(r"query, (\d+) batch", warmed_lines()[0]).group(1))
            assert rehearsed >= 2, warmed_lines()  # claimed again after the first (its trigger is well within 4 s)
            consumer.commit({p: 0 for p in partitions})  # 40 records behind, more than one batch reads (10)
            runner.reader.warm_up(threading.Event())
            assert any("the group is 40 records behind, more than its 1 member(s) read in a batch each (10): "
                       "one batch" in line for line in lines), lines
            assert "query, 1 batch," in warmed_lines()[1], warmed_lines()
        stopping = threading.Event()
        stopping.set()                 # a member stopped while warming up rehearses no further batch
        runner.reader.warm_up(stopping)
        assert len(warmed_lines()) == 2
        assert {t: sorted(p.relative_to(t) for p in t.rglob("*")) for t in tables} == before
        assert members[0].commits == [] and runner.reader.claims == {}
        assert runner.reader.query.isActive and runner.reader.query.id == query_id
        runner.member.start()  # the static member is assigned both partitions; run()'s loop:
        wait_until(lambda: runner.check() is QueryState.RUNNING
                   and table_reached(config.sink.path, config.name, log_end_offsets(produced)), 180,
                   "the query running and the table at every produced offset")
        assert runner.reader.query.id == query_id
    finally:
        try:
            runner.reader.stop(graceful=True)
        finally:
            readers[0].close(timeout_s=10)
    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)) and set(rows) == produced
