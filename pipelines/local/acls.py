"""ACLs and SCRAM users of a secured cluster, managed as a super user through confluent-kafka.

``AclAdmin(admin_config)`` grants and revokes ACLs (``create_acls`` / ``delete_acls``) and creates
SCRAM-SHA-512 users; each call returns once the broker it talks to enforces the change (bounded by
``timeout_s``), so a test can grant and use the grant right away. The ``*_acls`` helpers build the
usual sets, from which a test drops one entry to get "principal lacks exactly X"::

    admin = AclAdmin(state.security.admin_config())
    admin.grant("User:reader", [a for a in consumer_acls(topic, group) if a != Acl.topic(topic, "READ")])
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, Mapping

from groupmgr.core import ExitCategory, ScgError
from pipelines.runtime.kafka_access import SilentLogger

CLUSTER_NAME = "kafka-cluster"
SCRAM_ITERATIONS = 8192


class AclAdminError(ScgError):
    """An ACL or user change was refused, or the broker did not apply it in time."""

    condition = "ACL_ADMIN_FAILED"
    exit_category = ExitCategory.RUNTIME


@dataclass(frozen=True)
class Acl:
    """One ACL entry (without its principal): ``permission`` of ``operation`` on a resource.

    ``resource_type`` is TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID; ``operation`` is a Kafka ACL
    operation (READ, WRITE, DESCRIBE, CREATE, ALL, ...); ``pattern`` LITERAL or PREFIXED (a
    LITERAL ``*`` means every resource of the type)."""

    resource_type: str
    resource_name: str
    operation: str
    pattern: str = "LITERAL"
    permission: str = "ALLOW"
    host: str = "*"

    @classmethod
    def topic(cls, name: str, operation: str, pattern: str = "LITERAL") -> "Acl":
        return cls("TOPIC", name, operation, pattern)

    @classmethod
    def group(cls, name: str, operation: str, pattern: str = "LITERAL") -> "Acl":
        return cls("GROUP", name, operation, pattern)

    @classmethod
    def cluster(cls, operation: str) -> "Acl":
        return cls("CLUSTER", CLUSTER_NAME, operation)

    def binding(self, principal: str):
        from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                           ResourcePatternType)

        return AclBinding(_resource_type(self.resource_type), self.resource_name,
                          ResourcePatternType[self.pattern], principal, self.host,
                          AclOperation[self.operation], AclPermissionType[self.permission])

    @classmethod
    def of_binding(cls, binding) -> "Acl":
        kind = binding.restype.name
        return cls("CLUSTER" if kind == "BROKER" else kind, binding.name, binding.operation.name,
                   binding.resource_pattern_type.name, binding.permission_type.name, binding.host)


def consumer_acls(topic: str, group: str) -> list[Acl]:
    """What a group member needs: READ and DESCRIBE on the topic, READ and DESCRIBE on the group,
    DESCRIBE on the cluster."""
    return [Acl.topic(topic, "READ"), Acl.topic(topic, "DESCRIBE"), Acl.group(group, "READ"),
            Acl.group(group, "DESCRIBE"), Acl.cluster("DESCRIBE")]


def producer_acls(topic: str) -> list[Acl]:
    """What a producer needs: WRITE and DESCRIBE on the topic (enough for idempotence too)."""
    return [Acl.topic(topic, "WRITE"), Acl.topic(topic, "DESCRIBE")]


def everything_acls() -> list[Acl]:
    """Every operation on every topic, group and transactional id, and DESCRIBE and IDEMPOTENT_WRITE
    on the cluster (what ``bin/scg kafka start --secure`` gives its client user)."""
    return [Acl.topic("*", "ALL"), Acl.group("*", "ALL"), Acl("TRANSACTIONAL_ID", "*", "ALL"),
            Acl.cluster("DESCRIBE"), Acl.cluster("IDEMPOTENT_WRITE")]


class AclAdmin:
    """Grants and revokes ACLs and creates SCRAM users as a super user; every wait is bounded."""

    def __init__(self, admin_config: Mapping[str, str], timeout_s: float = 30.0):
        from confluent_kafka.admin import AdminClient

        self._config = dict(admin_config)
        self._admin = AdminClient({**self._config, "log_level": 0, "logger": SilentLogger()})
        self.timeout_s = timeout_s

    def grant(self, principal: str, acls: Iterable[Acl]) -> None:
        """Allow ``acls`` to ``principal`` (``User:<name>``); returns once the broker enforces them."""
        wanted = set(acls)
        if not wanted:
            return
        futures = self._admin.create_acls([acl.binding(principal) for acl in wanted],
                                          request_timeout=self.timeout_s)
        _results(futures, self.timeout_s, "granting ACLs")
        self._wait(principal, lambda now: wanted <= now, "granted ACLs to show")

    def revoke(self, principal: str, acls: Iterable[Acl]) -> None:
        """Remove exactly these entries of ``principal``; returns once the broker no longer has them."""
        from confluent_kafka.admin import AclBindingFilter

        gone = set(acls)
        if not gone:
            return
        filters = []
        for acl in gone:
            b = acl.binding(principal)
            filters.append(AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal,
                                            b.host, b.operation, b.permission_type))
        _results(self._admin.delete_acls(filters, request_timeout=self.timeout_s), self.timeout_s,
                 "revoking ACLs")
        self._wait(principal, lambda now: not (gone & now), "revoked ACLs to go")

    def acls(self, principal: str | None = None) -> set[Acl]:
        """The ACL entries the broker has (of ``principal``, or of everyone)."""
        from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType,
                                           ResourcePatternType, ResourceType)

        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
                               AclOperation.ANY, AclPermissionType.ANY)
        try:
            bindings = self._admin.describe_acls(flt, request_timeout=self.timeout_s).result(
                timeout=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - KafkaException or a timeout, named below
            raise AclAdminError(f"describing ACLs failed: {exc}") from None
        return {Acl.of_binding(b) for b in bindings}

    def create_scram_user(self, name: str, password: str) -> None:
        """Create (or re-password) SCRAM-SHA-512 user ``name``; returns once it can authenticate."""
        from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism,
                                           UserScramCredentialUpsertion)

        upsert = UserScramCredentialUpsertion(
            name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
            password.encode("utf-8"))
        _results(self._admin.alter_user_scram_credentials([upsert], request_timeout=self.timeout_s),
                 self.timeout_s, f"creating SCRAM user {name}")
        self._wait_authenticates(name, password)

    # -- internals ---------------------------------------------------------------------------
    def _wait(self, principal: str, done, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            if done(self.acls(principal)):
                return
            if time.monotonic() > deadline:
                raise AclAdminError(f"timed out after {self.timeout_s:.0f}s waiting for {what} "
                                    f"({principal})")
            time.sleep(0.05)

    def _wait_authenticates(self, name: str, password: str) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            probe = AdminClient({**self._config, "sasl.username": name, "sasl.password": password,
                                 "log_level": 0, "logger": SilentLogger()})
            try:
                probe.list_topics(timeout=2)
                return
            except Exception:  # noqa: BLE001 - not yet known to the broker; retried until the deadline
                time.sleep(0.1)
        raise AclAdminError(f"SCRAM user {name} could not authenticate within {self.timeout_s:.0f}s")


def _resource_type(name: str):
    from confluent_kafka.admin import ResourceType

    return ResourceType.BROKER if name == "CLUSTER" else ResourceType[name]


def _results(futures: Mapping, timeout_s: float, what: str) -> None:
    for future in futures.values():
        try:
            future.result(timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - KafkaException or a timeout, named here
            raise AclAdminError(f"{what} failed: {exc}") from None
