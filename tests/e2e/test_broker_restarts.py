"""Transient is never fatal (issue 10, item 1; docs/DESIGN.md invariant 9): three `scg run`
members on a 3-broker cluster while records are produced; every broker is SIGKILLed and started
again in turn. Every member process stays alive from start to end (nothing restarts them) and the
table holds every record of the log exactly once (read through deltalake). Right after the second
restart the topic grows, so every member is assigned again while leaders move back."""
from __future__ import annotations

import time

import pytest

from pipelines.config import load_pipeline
from pipelines.local.local_kafka import LocalKafka
from tests.e2e.harness import BrokerNode, ClusterView, MemberProcess, SteadyProducer, wait_until
from tests.support.kafka_data import create_topic, log_end_offsets, table_reached, write_pipeline

pytestmark = pytest.mark.e2e
PARTITIONS = 6
GROWN = 9  # partitions after the growth right after the second broker restart
MEMBERS = ("a", "b", "c")


@pytest.fixture
def cluster(tmp_path):
    state_dir = tmp_path / "kafka"
    local = LocalKafka(state_dir)
    state = local.start(brokers=3)
    yield state_dir, state
    local.stop()  # reads the state file, which BrokerNode.start keeps up to date


def _log_coordinates(bootstrap: str, topic: str) -> set[tuple[str, int, int]]:
    """Every (topic, partition, offset) in the topic's log (no compaction, no transactions: every
    offset from the low to the high watermark is a record)."""
    from confluent_kafka import Consumer, TopicPartition as CkTopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks-only", "log_level": 3})
    try:
        found = set()
        for p in range(GROWN):
            low, high = consumer.get_watermark_offsets(CkTopicPartition(topic, p), timeout=30)
            found |= {(topic, p, o) for o in range(low, high)}
        return found
    finally:
        consumer.close()


def _table_coordinates(path) -> list[tuple[str, int, int]]:
    from deltalake import DeltaTable

    table = DeltaTable(str(path)).to_pyarrow_table(columns=["topic", "partition", "offset"]).to_pydict()
    return list(zip(table["topic"], table["partition"], table["offset"]))


def _grow(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_partitions([NewPartitions(topic, count)])[topic].result(timeout=60)


def _owned_once(members, count: int) -> bool:
    _all_alive(members)
    owned = [tp for m in members for tp in m.owned()]
    return len(owned) == count and len(set(owned)) == count


def _batches(member: MemberProcess) -> int:
    return member.count(r"\] batch \d+:")


def _all_alive(members) -> None:
    for m in members:
        assert m.proc.poll() is None, f"member {m.name} exited ({m.proc.returncode}):\n{m.tail(40)}"


def test_every_broker_killed_and_restarted_in_turn(cluster, tmp_path, unique_name):
    state_dir, state = cluster
    bootstrap = state.bootstrap_servers
    create_topic(bootstrap, unique_name, PARTITIONS, replication=3)
    # one task thread per driver: three Spark drivers and three brokers share a loaded 2-core machine
    path = write_pipeline(tmp_path / "pipeline.yaml", bootstrap, unique_name, unique_name, tmp_path,
                          extra='format: {type: json, schema: "id BIGINT, name STRING"}\n'
                                'spark: {spark.master: "local[1]"}\n')
    # the leader re-reads partition counts every 2 s, so a growth is a prompt rebalance
    path.write_text(path.read_text().replace("  heartbeat_interval: 500ms\n",
                                             "  heartbeat_interval: 500ms\n  metadata_max_age: 2s\n"))
    config = load_pipeline(path)
    view = ClusterView(bootstrap)
    producer = SteadyProducer(bootstrap, unique_name, rate_per_s=60,
                              settings={"enable.idempotence": True}).start()
    members = [MemberProcess(n, path, tmp_path) for n in MEMBERS]

    def all_owned_and_writing() -> bool:
        return _owned_once(members, PARTITIONS) and all(_batches(m) > 0 for m in members)

    wait_until(all_owned_and_writing, 480, "three members sharing the partitions and writing")
    started = time.monotonic()
    timings = []
    for node_id in sorted(n.node_id for n in state.nodes):
        t0 = time.monotonic()
        node = BrokerNode(state_dir, node_id)
        node.kill()
        wait_until(lambda: view.leads_nothing(node_id), 90, f"leaders moved off broker {node_id}")
        _all_alive(members)
        node.start()
        wait_until(lambda: view.in_every_isr(node_id), 120, f"broker {node_id} back and in every ISR")
        if node_id == 2:
            # a rebalance right after a restart: every member is assigned again while leaders and
            # their epochs move, and the new partitions need ListOffsets (the failure)
            _grow(bootstrap, unique_name, GROWN)
            wait_until(lambda: _owned_once(members, GROWN), 180, f"the group owning all {GROWN} partitions")
        # the group still makes progress: every member commits a batch after the restart
        seen = {m.name: _batches(m) for m in members}
        wait_until(lambda: (_all_alive(members) or True) and all(_batches(m) > seen[m.name] for m in members),
                   180, f"every member writing again after broker {node_id} restarted")
        timings.append((node_id, round(time.monotonic() - t0, 1)))

    acked = producer.stop()
    log = _log_coordinates(bootstrap, unique_name)
    assert acked <= log, f"{len(acked - log)} acknowledged records are not in the log"
    ends = log_end_offsets(log)
    wait_until(lambda: (_all_alive(members) or True) and table_reached(config.sink.path, config.name, ends), 180,
               "the table to hold every record of the log")
    _all_alive(members)
    retries = {m.name: m.count(r"restarting from the table's offsets") for m in members}
    for m in members:
        assert m.stop() == 0, m.tail(40)
    rows = _table_coordinates(config.sink.path)
    assert len(rows) == len(set(rows)), "duplicate (topic, partition, offset) rows"
    assert set(rows) == log, f"missing {len(log - set(rows))}, extra {len(set(rows) - log)}"
    print(f"\nbroker cycles (node, s): {timings}; kills+restarts took {time.monotonic() - started:.0f}s; "
          f"records {len(log)}; retry lines per member {retries}")
