"""``GroupMember``: one member of a Kafka consumer group (classic protocol, eager rebalancing).

``start()`` spawns one background thread that joins the group, then heartbeats every interval.
On REBALANCE_IN_PROGRESS it calls ``listener.on_revoked(owned)`` (the generation stays valid
meanwhile, so the caller may commit final offsets), rejoins, and calls
``listener.on_assigned(generation, partitions)``. When fenced (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID on heartbeat or commit, or a locally expired session) it first invalidates the
generation, then calls ``on_fenced(error)`` and ``on_revoked(partitions)`` (they are lost), and
rejoins. FENCED_INSTANCE_ID (another process took this ``group_instance_id``) is fatal, as in Java.

Listener callbacks run one at a time, in order, on a listener thread; the member thread keeps
heartbeating while it waits for them, for at most the rebalance timeout. A fatal error is recorded
and re-raised to the caller by ``raise_if_failed()`` (Kafka's heartbeat-thread pattern).
Every wait is bounded. Public methods are thread-safe.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Protocol

from groupmgr.assignors import PartitionAssignor, TopicPartition, get_assignor
from groupmgr.coordinator_client import CoordinatorClient, KafkaTransport, Transport
from groupmgr.errors import (FencedInstanceId, GroupError, ListenerError, MemberClosedError,
                             RebalanceInProgress, SessionExpired, StaleGenerationError,
                             UnknownMemberId)
from groupmgr.generation import NO_GENERATION, Generation, MemberState
from groupmgr.heartbeat import HeartbeatTimer
from groupmgr.offsets import OffsetAndMetadata, commit_offsets, fetch_offsets
from groupmgr.rebalance import JoinSpec, RebalanceRound, RoundResult, send_heartbeat, send_leave_group

log = logging.getLogger(__name__)
_ENDED = (MemberState.CLOSED, MemberState.FAILED)


@dataclass(frozen=True, repr=False)
class MemberConfig:
    """Validated, immutable member settings; ``client_kwargs`` values are masked in ``repr``.

    ``assignors``: names (``get_assignor``) or instances, first = preferred; all are offered in
    JoinGroup. ``client_kwargs``: kafka-python connection kwargs (security_protocol, sasl_*, ssl_*).
    ``metadata_max_age_ms``: how often the leader re-checks partition counts (a change -> rejoin).
    """

    bootstrap_servers: str
    group_id: str
    topics: tuple[str, ...]
    assignors: tuple[str | PartitionAssignor, ...] = ("range",)
    group_instance_id: str | None = None
    session_timeout_ms: int = 10000
    rebalance_timeout_ms: int = 60000
    heartbeat_interval_ms: int = 1000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    request_timeout_ms: int = 30000
    metadata_max_age_ms: int = 30000
    client_id: str = "scg-member"
    rack_id: str | None = None
    client_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("topics", "assignors"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable) or not tuple(value):
                raise ValueError(f"MemberConfig.{name} must be a non-empty collection, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "client_kwargs", MappingProxyType(dict(self.client_kwargs)))
        for name, value in (("bootstrap_servers", self.bootstrap_servers), ("group_id", self.group_id),
                            ("client_id", self.client_id), *(("topics", t) for t in self.topics)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"MemberConfig.{name} must be non-empty strings, got {value!r}")
        for name in ("session_timeout_ms", "rebalance_timeout_ms", "heartbeat_interval_ms",
                     "retry_backoff_ms", "retry_backoff_max_ms", "request_timeout_ms", "metadata_max_age_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"MemberConfig.{name} must be a positive int, got {value!r}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("MemberConfig.heartbeat_interval_ms must be lower than session_timeout_ms")

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "client_kwargs"}
        masked = {key: "***" for key in self.client_kwargs}
        return f"MemberConfig({', '.join(f'{k}={v!r}' for k, v in shown.items())}, client_kwargs={masked!r})"

    def join_spec(self) -> JoinSpec:
        """The JoinGroup settings, with assignor names resolved (raises UnknownAssignorError)."""
        assignors = tuple(a if isinstance(a, PartitionAssignor) else get_assignor(a) for a in self.assignors)
        names = [a.name for a in assignors]
        if len(set(names)) != len(names):
            raise ValueError(f"MemberConfig.assignors has duplicate protocol names: {names}")
        return JoinSpec(self.group_id, self.topics, assignors, self.session_timeout_ms,
                        self.rebalance_timeout_ms, self.group_instance_id, self.rack_id)


class RebalanceListener(Protocol):
    """Hooks called by the member thread (via its listener thread), one at a time, in order."""

    def on_revoked(self, partitions: tuple[TopicPartition, ...]) -> None:
        """Stop using ``partitions`` (non-empty). Commits are still accepted until this returns."""

    def on_assigned(self, generation: Generation, partitions: tuple[TopicPartition, ...]) -> None:
        """Start using ``partitions`` (possibly empty) in ``generation``."""

    def on_fenced(self, error: GroupError) -> None:
        """The generation was lost (``error`` says why); ``on_revoked`` follows with the lost partitions."""
