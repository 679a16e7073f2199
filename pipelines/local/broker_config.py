"""Pure rendering of a local KRaft cluster's per-node ``server.properties``.

Every node runs in combined mode (``process.roles=broker,controller``) and is a voter of a static
controller quorum, so N nodes form one cluster with replication factor min(N, 3). Defaults suit
development and tests: no rebalance delay, no topic auto-creation, short minimum session timeout.
"""
from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NodePorts:
    """The loopback ports of one local broker node (client and controller listeners)."""

    node_id: int
    client_port: int
    controller_port: int


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid format).

    Like Kafka's ``Uuid.randomUuid`` it never starts with ``-``, which command-line parsers
    (``kafka-storage format -t``) would read as an option."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def quorum_voters(nodes: list[NodePorts], host: str) -> str:
    return ",".join(f"{n.node_id}@{host}:{n.controller_port}" for n in nodes)


def render_server_properties(node: NodePorts, nodes: list[NodePorts], log_dir: Path,
                             host: str = "127.0.0.1") -> str:
    """The server.properties text for ``node`` in a cluster of ``nodes``."""
    replication = min(len(nodes), 3)
    min_isr = 1 if replication < 3 else 2
    settings = {
        "node.id": node.node_id,
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://{host}:{node.client_port},CONTROLLER://{host}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{node.client_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": quorum_voters(nodes, host),
        "log.dirs": str(log_dir),
        "num.partitions": 1,
        "default.replication.factor": replication,
        "min.insync.replicas": 1,
        "offsets.topic.replication.factor": replication,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": min_isr,
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": 0,
        "group.min.session.timeout.ms": 1000,
        "log.flush.interval.messages": 9223372036854775807,
        "num.network.threads": 2,
        "num.io.threads": 4,
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())
