"""The member's identity in one group generation, and the member state machine's states.

Mirrors Kafka ``AbstractCoordinator.Generation`` (frozen, with a ``NO_GENERATION`` sentinel) and
``AbstractCoordinator.MemberState``. Both are immutable values, safe to share between threads.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

UNKNOWN_MEMBER_ID = ""
NO_GENERATION_ID = -1


@dataclass(frozen=True)
class Generation:
    """Generation id, member id and chosen protocol (assignor name) of one completed join.

    ``NO_GENERATION`` (id -1, empty member id, no protocol) means "not a member of any generation";
    a generation with id -1 but a member id means "known to the coordinator, not in a generation".
    """

    generation_id: int
    member_id: str
    protocol_name: str | None

    def __post_init__(self) -> None:
        if isinstance(self.generation_id, bool) or not isinstance(self.generation_id, int):
            raise TypeError(f"generation_id must be int, got {self.generation_id!r}")
        if not isinstance(self.member_id, str):
            raise TypeError(f"member_id must be str, got {self.member_id!r}")

    @property
    def is_valid(self) -> bool:
        """True for a real generation (id >= 0 with a member id)."""
        return self.generation_id >= 0 and self.member_id != UNKNOWN_MEMBER_ID


NO_GENERATION = Generation(NO_GENERATION_ID, UNKNOWN_MEMBER_ID, None)


class MemberState(enum.Enum):
    """Where the member is in the classic group protocol.

    UNJOINED -> PREPARING_REBALANCE (eager: revoking; JoinGroup in flight) -> COMPLETING_REBALANCE
    (SyncGroup done; cooperative: revoking what left, then on_assigned) -> STABLE (heartbeating)
    -> PREPARING_REBALANCE ... ; a cooperative member keeps its partitions (and the generation its
    commits use) through PREPARING_REBALANCE;
    FENCED after the generation was lost (partitions lost, about to rejoin);
    POLL_TIMEOUT after the member left the group because ``poll()`` was not called for
    ``max_poll_interval_ms`` (partitions lost, no heartbeats; it rejoins at the next ``poll()``);
    CLOSED after ``close()``; FAILED after a fatal error (``raise_if_failed`` re-raises it).
    """

    UNJOINED = "unjoined"
    PREPARING_REBALANCE = "preparing_rebalance"
    COMPLETING_REBALANCE = "completing_rebalance"
    STABLE = "stable"
    FENCED = "fenced"
    POLL_TIMEOUT = "poll_timeout"
    CLOSED = "closed"
    FAILED = "failed"
