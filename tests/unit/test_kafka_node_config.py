"""Pure rendering of local Kafka node configs."""
from pathlib import Path

from pipelines.local.broker_config import NodePorts, new_cluster_id, render_server_properties


def test_cluster_ids_are_kafka_uuids_never_starting_with_dash():
    ids = [new_cluster_id() for _ in range(2000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert len(set(ids)) == len(ids)


def test_three_nodes_share_one_quorum_and_replicate():
    nodes = [NodePorts(i, 9000 + i, 9100 + i) for i in (1, 2, 3)]
    text = render_server_properties(nodes[1], nodes, Path("/data"))
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["auto.create.topics.enable"] == "false"
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_single_node_uses_replication_one():
    node = NodePorts(1, 9092, 9093)
    props = dict(l.split("=", 1) for l in render_server_properties(node, [node], Path("/d")).splitlines())
    assert props["default.replication.factor"] == "1" and props["transaction.state.log.min.isr"] == "1"
