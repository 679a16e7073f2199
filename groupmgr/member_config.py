"""``MemberConfig``: the validated, immutable settings of one group member.

Frozen dataclass; invalid values raise ``ValueError`` at construction (before anything starts);
``client_kwargs`` (security settings, may hold passwords) are masked in ``repr``. Thread-safe.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from groupmgr.assignors import PartitionAssignor, get_assignor, rebalance_protocol
from groupmgr.rebalance import JoinSpec


@dataclass(frozen=True, repr=False)
class MemberConfig:
    """Validated, immutable member settings; ``client_kwargs`` values are masked in ``repr``.

    Subscribe to ``topics`` or to every non-internal topic whose whole name matches the regular
    expression ``topic_pattern`` (exactly one of the two). ``assignors``: names (``get_assignor``) or
    instances, first = preferred; all are offered in JoinGroup. They also decide the member's
    rebalance protocol (``join_spec().protocol``, ``GroupMember.protocol``): ``"cooperative"`` when
    every one supports it (e.g. only ``cooperative-sticky``), else ``"eager"`` (Kafka's rule; a group
    switches with two rolling bounces: first list ``cooperative-sticky`` with the eager assignor,
    then drop the eager one). ``client_kwargs``: kafka-python
    connection kwargs (security_protocol, sasl_*, ssl_*). ``metadata_max_age_ms``: how often the
    leader re-checks partition counts and a pattern member re-matches the cluster's topics (a change
    -> rejoin), like the Java consumer's ``metadata.max.age.ms``.

    ``max_poll_interval_ms``: Kafka's ``max.poll.interval.ms``. When the application has not called
    ``GroupMember.poll()`` for that long, the member leaves the group (its partitions go to the
    others) and rejoins at the next ``poll()``. None (the default) means "the same as
    ``rebalance_timeout_ms``", as in Java, where the rebalance timeout sent in JoinGroup *is*
    ``max.poll.interval.ms``; ``effective_max_poll_interval_ms`` is the value in force.
    """

    bootstrap_servers: str
    group_id: str
    topics: tuple[str, ...] = ()
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
    topic_pattern: str | None = None
    max_poll_interval_ms: int | None = None

    def __post_init__(self) -> None:
        for name in ("topics", "assignors"):
            value = getattr(self, name)
            items = () if isinstance(value, (str, bytes)) or not isinstance(value, Iterable) else tuple(value)
            if not items and (name == "assignors" or self.topic_pattern is None):
                raise ValueError(f"MemberConfig.{name} must be a non-empty collection, got {value!r}")
            object.__setattr__(self, name, items)
        self._check_pattern()
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
        value = self.max_poll_interval_ms
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ValueError(f"MemberConfig.max_poll_interval_ms must be a positive int or None, got {value!r}")

    @property
    def effective_max_poll_interval_ms(self) -> int:
        """The max poll interval in force: ``max_poll_interval_ms``, else ``rebalance_timeout_ms``."""
        return self.rebalance_timeout_ms if self.max_poll_interval_ms is None else self.max_poll_interval_ms

    def _check_pattern(self) -> None:
        if self.topic_pattern is None:
            return
        if self.topics:
            raise ValueError("MemberConfig: give topics or topic_pattern, not both")
        if not isinstance(self.topic_pattern, str) or not self.topic_pattern:
            raise ValueError(f"MemberConfig.topic_pattern must be a non-empty string, got {self.topic_pattern!r}")
        try:
            re.compile(self.topic_pattern)
        except re.error as exc:
            raise ValueError(f"MemberConfig.topic_pattern {self.topic_pattern!r} is not a regex: {exc}") from exc

    def subscribed_topics(self, cluster_topics: Iterable[str]) -> tuple[str, ...]:
        """``topics``, or the sorted ``cluster_topics`` whose whole name matches ``topic_pattern``
        (the caller leaves internal topics out)."""
        return subscribed_topics(self.topics, self.topic_pattern, cluster_topics)

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
                        self.rebalance_timeout_ms, self.group_instance_id, self.rack_id,
                        protocol=rebalance_protocol(assignors))


def subscribed_topics(topics: tuple[str, ...], topic_pattern: str | None,
                      cluster_topics: Iterable[str]) -> tuple[str, ...]:
    """``topics``, or with a ``topic_pattern`` the sorted ``cluster_topics`` whose whole name
    matches it: the topics a member with these settings subscribes to."""
    if topic_pattern is None:
        return tuple(topics)
    pattern = re.compile(topic_pattern)
    return tuple(sorted(t for t in set(cluster_topics) if pattern.fullmatch(t)))
