"""Kafka's ConsumerProtocol bytes: the Subscription in JoinGroup and the Assignment in SyncGroup.

The layout is Kafka's standard one (``ConsumerProtocol.serializeSubscription``): an int16 version
header followed by a non-flexible struct, encoded by kafka-python's generated
``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` schemas, so Java and librdkafka
members read what we write and we read theirs.

* Subscription v0: topics, user_data; v1 + owned_partitions; v2 + generation_id; v3 + rack_id.
* Assignment v0-v3: assigned partitions, user_data (v1-v3 only mirror the subscription version).
* Newer versions than we know are read with the newest format we know (fields are only appended),
  exactly as Kafka specifies.

Pure functions on immutable values; thread-safe.
"""
from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, NamedTuple

from kafka.protocol.consumer.metadata import (ConsumerProtocolAssignment,
                                              ConsumerProtocolSubscription)

from groupmgr.assignors import Subscription, TopicPartition
from groupmgr.group_errors import ProtocolDecodeError

PROTOCOL_TYPE = "consumer"
LATEST_VERSION = 3
_DECODE_ERRORS = (ValueError, TypeError, EOFError, IndexError, UnicodeDecodeError, struct.error)
_SUB_TP = ConsumerProtocolSubscription.TopicPartition
_ASSIGN_TP = ConsumerProtocolAssignment.TopicPartition


@dataclass(frozen=True)
class DecodedSubscription:
    """A member's subscription as decoded, with the version it was written in."""

    subscription: Subscription
    version: int


class DecodedAssignment(NamedTuple):
    """One member's assignment: partitions sorted by (topic, partition), opaque user data."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None
    version: int


def _grouped(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    """``[(topic, [partition, ...]), ...]`` with topics and partitions sorted."""
    by_topic: dict[str, set[int]] = defaultdict(set)
    for topic, partition in partitions:
        by_topic[topic].add(partition)
    return [(topic, sorted(by_topic[topic])) for topic in sorted(by_topic)]


def _flatten(groups) -> tuple[TopicPartition, ...]:
    return tuple(sorted(TopicPartition(g.topic, p) for g in groups or () for p in g.partitions))


def _check_version(version: int) -> None:
    if not 0 <= version <= LATEST_VERSION:
        raise ValueError(f"consumer protocol version must be 0..{LATEST_VERSION}, got {version}")


def encode_subscription(subscription: Subscription, version: int = LATEST_VERSION) -> bytes:
    """Subscription bytes for JoinGroup metadata; fields newer than ``version`` are left out.

    ``group_instance_id`` is not part of these bytes (JoinGroup carries it separately).
    """
    _check_version(version)
    owned = [_SUB_TP(topic=t, partitions=ps) for t, ps in _grouped(subscription.owned_partitions)]
    data = ConsumerProtocolSubscription(
        version=version, topics=list(subscription.topics), user_data=subscription.user_data,
        owned_partitions=owned, generation_id=subscription.generation_id,
        rack_id=subscription.rack_id)
    return data.encode()


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> DecodedSubscription:
    """Decode JoinGroup member metadata; ``group_instance_id`` comes from the JoinGroup member entry.

    Raises ProtocolDecodeError for truncated or malformed bytes.
    """
    try:
        decoded = ConsumerProtocolSubscription.decode(bytes(data))
        version = _header_version(data)
        subscription = Subscription(
            topics=tuple(decoded.topics or ()), user_data=_opt_bytes(decoded.user_data),
            owned_partitions=_flatten(decoded.owned_partitions) if version >= 1 else (),
            group_instance_id=group_instance_id,
            rack_id=decoded.rack_id if version >= 3 else None,
            generation_id=decoded.generation_id if version >= 2 else -1)
    except _DECODE_ERRORS as exc:
        raise ProtocolDecodeError(f"bad subscription bytes ({len(data)} bytes): {exc}") from exc
    return DecodedSubscription(subscription, version)


def encode_assignment(partitions: Iterable[TopicPartition], user_data: bytes | None = None,
                      version: int = LATEST_VERSION) -> bytes:
    """Assignment bytes for SyncGroup (partitions grouped by topic, sorted)."""
    _check_version(version)
    groups = [_ASSIGN_TP(topic=t, partitions=ps) for t, ps in _grouped(partitions)]
    data = ConsumerProtocolAssignment(version=version, assigned_partitions=groups, user_data=user_data)
    return data.encode()


def decode_assignment(data: bytes | None) -> DecodedAssignment:
    """Decode SyncGroup assignment bytes; empty bytes (the broker's "nothing for you") = no partitions.

    Raises ProtocolDecodeError for truncated or malformed bytes.
    """
    if not data:
        return DecodedAssignment((), None, 0)
    try:
        decoded = ConsumerProtocolAssignment.decode(bytes(data))
        return DecodedAssignment(_flatten(decoded.assigned_partitions),
                                 _opt_bytes(decoded.user_data), _header_version(data))
    except _DECODE_ERRORS as exc:
        raise ProtocolDecodeError(f"bad assignment bytes ({len(data)} bytes): {exc}") from exc


def _header_version(data: bytes) -> int:
    """The int16 version header (may be newer than LATEST_VERSION; then read as LATEST_VERSION)."""
    if len(data) < 2:
        raise ValueError("no version header")
    version = int.from_bytes(bytes(data[:2]), "big", signed=True)
    if version < 0:
        raise ValueError(f"negative version {version}")
    return version


def _opt_bytes(value) -> bytes | None:
    return None if value is None else bytes(value)
