"""Pure rendering of a local KRaft cluster's per-node ``server.properties``.

Every node runs in combined mode (``process.roles=broker,controller``) and is a voter of a static
controller quorum, so N nodes form one cluster with replication factor min(N, 3). Defaults suit
development and tests: no rebalance delay, no topic auto-creation, short minimum session timeout.

A secured node (``security=BrokerSecurity(...)``) has no plaintext listener at all:

| listener | protocol | who |
|---|---|---|
| ``SASL_SSL`` (``client_port``) | SCRAM-SHA-512 over TLS, no client certificate | clients with a user name and password |
| ``SSL`` (``mtls_port``) | TLS, client certificate required | clients with a certificate; also the nodes among themselves (inter-broker listener) |
| ``CONTROLLER`` (``controller_port``) | TLS, client certificate required | the nodes' KRaft traffic |

A certificate ``CN=<name>[,...]`` is the principal ``User:<name>`` (``ssl.principal.mapping.rules``);
a SCRAM user ``<name>`` is ``User:<name>``. The StandardAuthorizer denies whatever no ACL allows,
except to the super users (the nodes' certificate principal and the admin user).
"""
from __future__ import annotations

import base64
import hashlib
import secrets
import uuid
from dataclasses import dataclass, field
from pathlib import Path

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# CN=<name> or CN=<name>,O=... -> <name>; anything else keeps Kafka's default (the whole DN).
PRINCIPAL_MAPPING_RULES = "RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT"


@dataclass(frozen=True)
class NodePorts:
    """The loopback ports of one local broker node (client and controller listeners).

    On a secured node ``client_port`` is the SASL_SSL listener and ``mtls_port`` the SSL listener
    that requires client certificates."""

    node_id: int
    client_port: int
    controller_port: int
    mtls_port: int | None = None


@dataclass(frozen=True)
class BrokerSecurity:
    """What a secured node needs: the CA file it trusts, its own certificate chain and private key
    (PEM text, given inline so the key needs no password) and the super-user principals."""

    truststore_file: Path
    certificate_chain: str = field(repr=False)
    private_key: str = field(repr=False)
    super_users: tuple[str, ...] = ()


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


def scram_credential(name: str, password: str, salt: bytes | None = None,
                     iterations: int = SCRAM_ITERATIONS) -> str:
    """A ``kafka-storage format --add-scram`` argument for a SCRAM-SHA-512 user.

    It carries the salted password (PBKDF2-HMAC-SHA-512, as Kafka's ScramFormatter computes it),
    never the password itself, so the password does not show in the process list."""
    salt = secrets.token_bytes(32) if salt is None else salt
    salted = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations)
    b64 = base64.b64encode
    return (f'{SCRAM_MECHANISM}=[name={name},iterations={iterations},'
            f'salt="{b64(salt).decode()}",saltedpassword="{b64(salted).decode()}"]')


def _listener_settings(node: NodePorts, host: str, security: BrokerSecurity | None) -> dict:
    if security is None:
        return {
            "listeners": f"PLAINTEXT://{host}:{node.client_port},CONTROLLER://{host}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{host}:{node.client_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }
    if node.mtls_port is None:
        raise ValueError(f"secured node {node.node_id} needs an mtls_port")
    return {
        "listeners": (f"SASL_SSL://{host}:{node.client_port},SSL://{host}:{node.mtls_port},"
                      f"CONTROLLER://{host}:{node.controller_port}"),
        "advertised.listeners": f"SASL_SSL://{host}:{node.client_port},SSL://{host}:{node.mtls_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SSL",
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.ssl.client.auth": "none",
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.controller.ssl.client.auth": "required",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": _inline_pem(security.certificate_chain),
        "ssl.keystore.key": _inline_pem(security.private_key),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(security.truststore_file),
        "ssl.principal.mapping.rules": PRINCIPAL_MAPPING_RULES,
        "authorizer.class.name": AUTHORIZER,
        "allow.everyone.if.no.acl.found": "false",
        "super.users": ";".join(security.super_users),
    }


def _inline_pem(pem: str) -> str:
    """PEM text as one properties value (Java's Properties turns ``\\n`` back into newlines)."""
    if "\\" in pem:
        raise ValueError("PEM text has a backslash")
    return pem.strip().replace("\r", "").replace("\n", "\\n")


def render_server_properties(node: NodePorts, nodes: list[NodePorts], log_dir: Path,
                             host: str = "127.0.0.1", security: BrokerSecurity | None = None) -> str:
    """The server.properties text for ``node`` in a cluster of ``nodes`` (secured when
    ``security`` is given; the text then holds the node's private key: keep the file 0600)."""
    replication = min(len(nodes), 3)
    min_isr = 1 if replication < 3 else 2
    settings = {
        "node.id": node.node_id,
        "process.roles": "broker,controller",
        **_listener_settings(node, host, security),
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
