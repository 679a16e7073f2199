"""Groups the broker runs with its own assignor (Kafka 4's consumer protocol, KIP-848).

A Kafka 4.x broker converts a classic group to a *consumer* group as soon as one member joins with
``group.protocol=consumer`` (``group.consumer.migration.policy`` allows upgrades by default). Our
members, which speak the classic protocol, keep working in it — the broker answers their
JoinGroup/SyncGroup itself — but no classic leader runs our assignor any more: the broker's
server-side assignor decides who reads which partition. Exactly-once is not affected (the tables
fence writers by owner epoch, whoever assigned the partition), the configured assignment is.

:func:`group_type` asks the brokers which kind the group is now; :class:`GroupRunByBroker` names
the situation (a progress line, or fatal with ``group.on_server_assignment: fail``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from groupmgr.group_errors import GroupError

CONSUMER_GROUP = "CONSUMER"  # confluent-kafka's ConsumerGroupType name for a KIP-848 group


class GroupRunByBroker(GroupError):
    """The group is a consumer-protocol group: the broker's assignor decides, not ours."""

    condition = "GROUP_RUN_BY_BROKER"

    def __init__(self, group_id: str, assignors: tuple[str, ...] = ()):
        self.group_id = group_id
        configured = f" (configured: {', '.join(assignors)})" if assignors else ""
        super().__init__(
            f"group {group_id} is run by the broker's consumer protocol (KIP-848): a member joined "
            f"with group.protocol=consumer, so the broker's assignor decides, not this pipeline's"
            f"{configured}; exactly-once still holds. To keep the configured assignor, run every "
            f"member of the group with group.protocol=classic (the default of classic clients), "
            f"or set group.on_server_assignment: fail to stop instead")


def group_type(admin: Any, group_id: str, timeout_s: float = 10.0) -> str:
    """The group's type as the brokers report it (``CLASSIC``, ``CONSUMER``, ...; ``UNKNOWN`` when
    the brokers do not say). ``admin`` is a confluent-kafka AdminClient; raises its errors."""
    future = admin.describe_consumer_groups([group_id], request_timeout=timeout_s)[group_id]
    kind = getattr(future.result(timeout_s), "type", None)
    return getattr(kind, "name", "UNKNOWN") if kind is not None else "UNKNOWN"


def group_type_of(client_config: Mapping[str, Any], group_id: str, timeout_s: float = 10.0) -> str:
    """:func:`group_type` through a confluent-kafka AdminClient made for this call (confluent-kafka
    settings, bootstrap included) and destroyed before it returns: called once per rebalance."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**client_config, "log_level": 3})
    try:
        return group_type(admin, group_id, timeout_s)
    finally:
        admin = None  # the last reference: the client is destroyed now, also when describe raised
