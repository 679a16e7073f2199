"""One rebalance round (JoinGroup -> leader assigns -> SyncGroup), plus the heartbeat and leave RPCs.

A :class:`RebalanceRound` is single-use, like aiokafka's ``CoordinatorGroupRebalance``:

1. JoinGroup offering every configured assignor as a protocol, in preference order, each with
   this member's ConsumerProtocol subscription; the broker picks one protocol by Kafka's voting
   rule. A first join without member id gets MEMBER_ID_REQUIRED (v4+) and is repeated with the id.
2. The leader (``leader == member_id`` and no ``skip_assignment``) decodes every member's
   subscription, fetches partition counts for the union of subscribed topics (topics without
   metadata get no partitions), and runs the chosen assignor through ``run_assignor``, which
   validates the result. If the assignor fails, the round raises and **no SyncGroup is sent**:
   the leader never sends an invalid assignment. Followers send an empty SyncGroup.
3. SyncGroup returns this member's assignment, decoded and handed to the assignor's
   ``on_assignment``.

Rebalance protocol (``JoinSpec.protocol``, Kafka's ``ConsumerCoordinator.protocol``: the highest
protocol every configured assignor supports). The subscription's ``owned_partitions``: a
cooperative member sends what it still owns (it keeps its partitions while it rejoins), with the
generation it got them in. An eager member has revoked everything before it joins, so, as in
Kafka, it sends no owned partitions to an assignor that supports the cooperative protocol (that
assignor would otherwise withhold partitions "changing owner" that nobody revokes); to an
eager-only assignor it still sends its last assignment, the stickiness input of this package's
``sticky`` assignor (Kafka's eager ``StickyAssignor`` carries the same in its user data).

The leader validates the assignment with the group's protocol: its own protocol; or, while a
group is half-way through the rolling switch to cooperative (this leader still eager, the chosen
assignor cooperative-capable and some member reporting owned partitions, i.e. a cooperative
member), the cooperative rules, so a partition withheld from a cooperative owner (it revokes it
and rejoins) is allowed, as Kafka's eager leader allows it.

Errors are raised as :mod:`groupmgr.group_errors` classes; the caller (the member) decides whether to
retry, rejoin with a reset member id, or stop. ``member_id`` is kept up to date on the round object
even when ``run`` raises. Not thread-safe: used by the member's thread only.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from kafka.protocol.consumer import (HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
                                     SyncGroupRequest)

from groupmgr.assignors import (COOPERATIVE, EAGER, AssignorFailedError, PartitionAssignor, Subscription,
                                TopicPartition, run_assignor)
from groupmgr.consumer_protocol import (LATEST_VERSION, PROTOCOL_TYPE, decode_assignment,
                                        decode_subscription, encode_assignment, encode_subscription)
from groupmgr.coordinator_client import CoordinatorClient
from groupmgr.group_errors import InconsistentGroupProtocol, MemberIdRequired, raise_for_error_code
from groupmgr.generation import Generation

log = logging.getLogger(__name__)
JOIN_TIMEOUT_MARGIN_S = 5.0  # Java: joinGroupTimeoutMs = rebalanceTimeoutMs + 5000
MAX_MEMBER_ID_ROUNDS = 3


@dataclass(frozen=True)
class JoinSpec:
    """What this member sends in every JoinGroup; assignors in preference order (first = preferred)."""

    group_id: str
    topics: tuple[str, ...]
    assignors: tuple[PartitionAssignor, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: str | None = None
    rack_id: str | None = None
    protocol: str = EAGER  # this member's rebalance protocol: rebalance_protocol(assignors)

    @property
    def join_timeout_s(self) -> float:
        return self.rebalance_timeout_ms / 1000 + JOIN_TIMEOUT_MARGIN_S


@dataclass(frozen=True)
class RoundResult:
    """Outcome of a completed round. The leader also keeps what it assigned from (for re-checks)."""

    generation: Generation
    partitions: tuple[TopicPartition, ...]
    leader_id: str
    is_leader: bool
    subscriptions: Mapping[str, Subscription] = field(default_factory=dict)
    partition_counts: Mapping[str, int] = field(default_factory=dict)


class RebalanceRound:
    """One JoinGroup/SyncGroup exchange for ``member_id`` (empty for a brand-new member).

    ``owned`` / ``owned_generation_id``: what this member owns (cooperative) or owned before
    (eager) and the generation it got them in (see the module doc for what is sent to which
    assignor); ``reason`` goes into JoinGroup v8+ (shown in broker logs).
    """

    def __init__(self, client: CoordinatorClient, spec: JoinSpec, member_id: str,
                 owned: Sequence[TopicPartition] = (), owned_generation_id: int = -1,
                 reason: str | None = None) -> None:
        self.client = client
        self.reason = reason
        self.spec = spec
        self.member_id = member_id
        self._owned = tuple(owned)
        self._owned_generation_id = owned_generation_id

    def run(self) -> RoundResult:
        """Join, assign if leader, sync; returns the new generation and this member's partitions."""
        join = self._join_until_member_id_accepted()
        generation = Generation(join.generation_id, join.member_id, join.protocol_name)
        leader = join.leader == join.member_id
        subscriptions, counts, assignments = {}, {}, {}
        if leader:
            subscriptions, counts = self._group_snapshot(join)
            if not join.skip_assignment:
                assignments = self._assign(join.protocol_name, subscriptions, counts, join)
        partitions = self._sync(generation, assignments)
        self._notify_assignor(generation, partitions)
        log.info("group %s: generation %d member %s%s owns %s", self.spec.group_id,
                 generation.generation_id, generation.member_id, " (leader)" if leader else "",
                 [f"{tp.topic}-{tp.partition}" for tp in partitions])
        return RoundResult(generation, partitions, join.leader, leader, subscriptions, counts)

    def _notify_assignor(self, generation: Generation, partitions: tuple[TopicPartition, ...]) -> None:
        assignor = self._assignor(generation.protocol_name)
        try:
            assignor.on_assignment(list(partitions), generation.generation_id)
        except Exception as exc:  # a plug-in failure becomes one named condition
            raise AssignorFailedError(assignor.name, exc) from exc

    # -- JoinGroup ---------------------------------------------------------------------------
    def _join_until_member_id_accepted(self):
        for _ in range(MAX_MEMBER_ID_ROUNDS):
            try:
                return self.client.send_once(self._join_request(), self._check_join,
                                             timeout_s=self.spec.join_timeout_s)
            except MemberIdRequired as exc:
                log.debug("group %s: broker assigned member id %s", self.spec.group_id, exc.member_id)
                self.member_id = exc.member_id
        raise MemberIdRequired(f"JoinGroup group {self.spec.group_id}: member id not accepted",
                               self.member_id)

    def _join_request(self) -> JoinGroupRequest:
        spec = self.spec
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name=a.name, metadata=self._metadata(a))
                     for a in spec.assignors]
        return JoinGroupRequest(group_id=spec.group_id, session_timeout_ms=spec.session_timeout_ms,
                                rebalance_timeout_ms=spec.rebalance_timeout_ms, member_id=self.member_id,
                                group_instance_id=spec.group_instance_id, protocol_type=PROTOCOL_TYPE,
                                protocols=protocols, reason=self.reason)

    def _metadata(self, assignor: PartitionAssignor) -> bytes:
        topics = self.spec.topics
        owned = self._owned
        if self.spec.protocol != COOPERATIVE and COOPERATIVE in _protocols(assignor):
            owned = ()  # eager: revoked before joining; a cooperative assignor must not see old claims
        subscription = Subscription(topics, user_data=assignor.subscription_user_data(topics),
                                    owned_partitions=owned, rack_id=self.spec.rack_id,
                                    generation_id=self._owned_generation_id)
        return encode_subscription(subscription, LATEST_VERSION)

    def _check_join(self, response):
        if response.error_code == MemberIdRequired.error_code:
            raise MemberIdRequired(f"JoinGroup group {self.spec.group_id}", response.member_id)
        raise_for_error_code(response.error_code, f"JoinGroup group {self.spec.group_id}")
        self.member_id = response.member_id
        if response.protocol_type not in (None, PROTOCOL_TYPE):
            raise InconsistentGroupProtocol(f"group {self.spec.group_id} has protocol type "
                                            f"{response.protocol_type!r}, not {PROTOCOL_TYPE!r}")
        self._assignor(response.protocol_name)
        return response

    # -- leader ------------------------------------------------------------------------------
    def _group_snapshot(self, join) -> tuple[dict[str, Subscription], dict[str, int]]:
        """Every member's subscription and the partition counts of all their topics."""
        subscriptions = {m.member_id: decode_subscription(m.metadata, m.group_instance_id).subscription
                         for m in join.members}
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        deadline = self.client.deadline(self.client.request_timeout_s)
        return subscriptions, self.client.partition_counts(topics, deadline)

    def _assign(self, protocol: str, subscriptions: Mapping[str, Subscription],
                counts: Mapping[str, int], join) -> dict[str, bytes]:
        """Validated assignment bytes per member; raises (and nothing is sent) if the assignor fails."""
        assignor = self._assignor(protocol)
        assignment = run_assignor(assignor, counts, subscriptions,
                                  protocol=self._group_protocol(assignor, subscriptions))
        versions = {m.member_id: _subscription_version(m.metadata) for m in join.members}
        return {member: encode_assignment(parts, version=min(LATEST_VERSION, versions[member]))
                for member, parts in assignment.items()}

    def _group_protocol(self, assignor: PartitionAssignor, subscriptions: Mapping[str, Subscription]) -> str:
        """The rebalance protocol the leader validates with (module doc): its own, or cooperative
        while cooperative members (reporting owned partitions) meet a cooperative-capable assignor."""
        if self.spec.protocol == COOPERATIVE:
            return COOPERATIVE
        if COOPERATIVE in _protocols(assignor) and any(s.owned_partitions for s in subscriptions.values()):
            log.info("group %s: eager leader, but members report owned partitions to %s: validating with "
                     "the cooperative rules (rolling switch to cooperative)", self.spec.group_id, assignor.name)
            return COOPERATIVE
        return EAGER

    def _assignor(self, name: str | None) -> PartitionAssignor:
        for assignor in self.spec.assignors:
            if assignor.name == name:
                return assignor
        raise InconsistentGroupProtocol(f"group {self.spec.group_id} chose protocol {name!r}, "
                                        f"not one of {[a.name for a in self.spec.assignors]}")

    # -- SyncGroup ---------------------------------------------------------------------------
    def _sync(self, generation: Generation, assignments: Mapping[str, bytes]) -> tuple[TopicPartition, ...]:
        request = SyncGroupRequest(
            group_id=self.spec.group_id, generation_id=generation.generation_id,
            member_id=generation.member_id, group_instance_id=self.spec.group_instance_id,
            protocol_type=PROTOCOL_TYPE, protocol_name=generation.protocol_name,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in sorted(assignments.items())])
        context = f"SyncGroup group {self.spec.group_id} generation {generation.generation_id}"

        def check(response):
            raise_for_error_code(response.error_code, context)
            return decode_assignment(response.assignment).partitions

        return self.client.send_once(request, check, timeout_s=self.spec.join_timeout_s)


def _protocols(assignor: PartitionAssignor) -> tuple[str, ...]:
    return tuple(getattr(assignor, "supported_protocols", (EAGER,)))


def _subscription_version(metadata: bytes) -> int:
    return int.from_bytes(bytes(metadata[:2]), "big", signed=True) if len(metadata) >= 2 else 0


# -- membership RPCs outside a round ---------------------------------------------------------
def send_heartbeat(client: CoordinatorClient, group_id: str, generation: Generation,
                   instance_id: str | None, timeout_s: float) -> None:
    """One Heartbeat; raises the broker's error (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, ...)."""
    request = HeartbeatRequest(group_id=group_id, generation_id=generation.generation_id,
                               member_id=generation.member_id, group_instance_id=instance_id)
    context = f"Heartbeat group {group_id} generation {generation.generation_id}"
    client.send_once(request, lambda r: raise_for_error_code(r.error_code, context), timeout_s=timeout_s)


def send_leave_group(client: CoordinatorClient, group_id: str, member_id: str,
                     instance_id: str | None, reason: str, timeout_s: float) -> None:
    """LeaveGroup for this member; UNKNOWN_MEMBER_ID (already gone) is not an error."""
    def build() -> LeaveGroupRequest:
        member = LeaveGroupRequest.MemberIdentity(member_id=member_id, group_instance_id=instance_id,
                                                  reason=reason)
        return LeaveGroupRequest(group_id=group_id, member_id=member_id, members=[member])

    context = f"LeaveGroup group {group_id} member {member_id}"

    def check(response) -> None:
        codes = [response.error_code] + [m.error_code for m in (response.members or ())]
        for code in codes:
            if code not in (0, 25):  # 25 = UNKNOWN_MEMBER_ID: the broker already removed us
                raise_for_error_code(code, context)

    client.call(build, check, deadline=client.deadline(timeout_s), timeout_s=timeout_s)
