"""Describe a consumer group the way Kafka's tools see it: state, members, assignments, offsets, lag.

Everything comes from the brokers: members and assignments from confluent-kafka's AdminClient
(``describe_consumer_groups``), log-end offsets from its ``list_offsets``, committed offsets and
their metadata from this package's own OffsetFetch (:func:`groupmgr.offsets.fetch_all_offsets`).
Not from ``list_consumer_group_offsets``: librdkafka copies a commit's metadata without a
terminating NUL and confluent-kafka reads it as a C string, so metadata not written by librdkafka
(this project's ``delta:<version>``) came back with heap bytes appended, or as UnicodeDecodeError.
Offsets follow Kafka's convention: committed = next offset to read; lag = log-end offset -
committed offset (unknown when either is unknown).

``describe_group`` returns an immutable :class:`GroupDescription`; ``format_table`` and ``to_json``
render it. Stateless; thread-safe.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from confluent_kafka import KafkaException, TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from groupmgr.coordinator_client import CoordinatorClient, KafkaTransport
from groupmgr.group_errors import GroupError
from groupmgr.offsets import fetch_all_offsets
from groupmgr.server_assignment import CONSUMER_GROUP, GroupRunByBroker

_COLUMNS = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "INSTANCE-ID", "HOST")


class DescribeFailed(GroupError):
    """The admin requests failed (broker unreachable, not authorised, ...); ``cause`` says why."""

    condition = "DESCRIBE_FAILED"

    def __init__(self, group_id: str, cause: BaseException) -> None:
        self.group_id = group_id
        self.cause = cause
        super().__init__(f"cannot describe group {group_id!r}: {cause}")


@dataclass(frozen=True)
class MemberInfo:
    """One member as the coordinator reports it; ``partitions`` as (topic, partition) pairs, sorted."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class PartitionOffsets:
    """Committed and log-end offsets of one partition, its lag and its current owner (if any)."""

    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    lag: int | None
    owner: str | None
    metadata: str = ""   # the metadata string of the committed offset


@dataclass(frozen=True)
class GroupDescription:
    """A group as the brokers describe it: state, protocol, members and per-partition offsets and
    lag (a snapshot; immutable)."""

    group_id: str
    state: str
    group_type: str
    protocol_type: str
    protocol: str
    coordinator: str
    members: tuple[MemberInfo, ...]
    partitions: tuple[PartitionOffsets, ...]


def describe_group(bootstrap: str, group_id: str, client_config: Mapping[str, Any] | None = None,
                   timeout_s: float = 15.0, client_kwargs: Mapping[str, Any] | None = None) -> GroupDescription:
    """Describe ``group_id``. ``client_config`` adds confluent-kafka settings (``security.protocol``,
    ``sasl.*``, ``ssl.*``) and ``client_kwargs`` the same connection's kafka-python settings (as
    ``MemberConfig.client_kwargs``) for the offset fetch. A group that does not exist comes back
    with state ``DEAD`` and nothing else. Raises DescribeFailed when a request fails or times out."""
    admin = AdminClient({**dict(client_config or {}), "bootstrap.servers": bootstrap})
    try:
        committed = _committed(bootstrap, group_id, client_kwargs, timeout_s)
        return _describe(admin, group_id, committed, timeout_s)
    except (KafkaException, TimeoutError, GroupError) as exc:
        raise DescribeFailed(group_id, exc) from exc


def _describe(admin: AdminClient, group_id: str, committed: Mapping[tuple[str, int], tuple[int, str]],
              timeout_s: float) -> GroupDescription:
    desc = admin.describe_consumer_groups([group_id], request_timeout=timeout_s)[group_id].result(timeout_s)
    members = tuple(sorted((_member(m) for m in desc.members), key=lambda m: m.member_id))
    owners = {tp: m.member_id for m in members for tp in m.partitions}
    keys = sorted(set(committed) | set(owners))
    log_end = _log_end_offsets(admin, keys, timeout_s)
    partitions = tuple(_partition(tp, committed.get(tp, (None, ""))[0], log_end.get(tp), owners.get(tp),
                                  committed.get(tp, (None, ""))[1]) for tp in keys)
    coordinator = f"{desc.coordinator.id} ({desc.coordinator.host}:{desc.coordinator.port})" if desc.coordinator else ""
    return GroupDescription(group_id, _name(desc.state), _name(getattr(desc, "type", "")),
                            _protocol_type(desc), desc.partition_assignor or "",
                            coordinator, members, partitions)


def _member(m) -> MemberInfo:
    partitions = tuple(sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or [])))
    return MemberInfo(m.member_id, m.group_instance_id, m.client_id, m.host, partitions)


def _committed(bootstrap: str, group_id: str, client_kwargs: Mapping[str, Any] | None,
               timeout_s: float) -> dict[tuple[str, int], tuple[int, str]]:
    """Committed (offset, metadata) per partition, through a connection of its own (closed here);
    opening it and fetching share ``timeout_s``."""
    transport = KafkaTransport(bootstrap, "scg-describe", client_kwargs)
    client = CoordinatorClient(transport, group_id, request_timeout_ms=int(timeout_s * 1000))
    deadline = time.monotonic() + timeout_s
    try:
        transport.start(timeout_s)
        offsets = fetch_all_offsets(client, group_id, max(0.001, deadline - time.monotonic()))
    finally:
        client.close()
    return {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in offsets.items()}


def _log_end_offsets(admin: AdminClient, keys: list[tuple[str, int]], timeout_s: float) -> dict[tuple[str, int], int]:
    if not keys:
        return {}
    futures = admin.list_offsets({CKTopicPartition(t, p): OffsetSpec.latest() for t, p in keys},
                                 request_timeout=timeout_s)
    out = {}
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = future.result(timeout_s).offset
        except Exception:  # noqa: BLE001 - a deleted topic has no log end; shown as unknown
            continue
    return out


def _partition(tp: tuple[str, int], committed: int | None, log_end: int | None, owner: str | None,
               metadata: str = "") -> PartitionOffsets:
    lag = log_end - committed if committed is not None and log_end is not None else None
    return PartitionOffsets(tp[0], tp[1], committed, log_end, lag, owner, metadata)


def _protocol_type(desc) -> str:
    """``consumer`` unless the group is a simple (offsets-only) group: Kafka's admin clients
    describe only groups whose protocol type is ``consumer`` or empty (others are an error)."""
    return "" if desc.is_simple_consumer_group else "consumer"


def _name(value: Any) -> str:
    return getattr(value, "name", str(value))


def format_table(desc: GroupDescription) -> str:
    """A kafka-consumer-groups style table, preceded by one summary line."""
    head = (f"GROUP {desc.group_id}  STATE {desc.state}  TYPE {desc.group_type}  PROTOCOL "
            f"{desc.protocol_type}/{desc.protocol}  MEMBERS {len(desc.members)}  COORDINATOR {desc.coordinator}")
    if desc.group_type == CONSUMER_GROUP:
        head += f"\n{GroupRunByBroker(desc.group_id)}"
    members = {m.member_id: m for m in desc.members}
    rows = [_COLUMNS] + [(p.topic, str(p.partition), _dash(p.committed), _dash(p.log_end), _dash(p.lag),
                          p.owner or "-", _dash(members[p.owner].group_instance_id if p.owner else None),
                          members[p.owner].host if p.owner else "-") for p in desc.partitions]
    rows += [("-", "-", "-", "-", "-", m.member_id, _dash(m.group_instance_id), m.host)
             for m in desc.members if not m.partitions]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join([head, ""] + lines)


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def to_json(desc: GroupDescription) -> dict[str, Any]:
    """A JSON-ready dict (lists instead of tuples; partitions as {"topic", "partition"}); ``conditions``
    names what an operator should know, e.g. GROUP_RUN_BY_BROKER for a consumer-protocol group."""
    data = asdict(desc)
    for member in data["members"]:
        member["partitions"] = [{"topic": t, "partition": p} for t, p in member["partitions"]]
    data["members"] = list(data["members"])
    data["partitions"] = list(data["partitions"])
    data["conditions"] = ([{"condition": GroupRunByBroker.condition, "message": str(GroupRunByBroker(desc.group_id))}]
                          if desc.group_type == CONSUMER_GROUP else [])
    return data
