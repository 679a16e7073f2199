"""A scripted, in-memory group coordinator for ONE group, at the ``Transport`` boundary.

It receives the real kafka-python request objects the member builds and answers with real
kafka-python response objects (so field names are checked against Kafka's schemas). It plays a
simplified classic-group coordinator: MEMBER_ID_REQUIRED for a first dynamic join, generation and
member checks on Sync/Heartbeat/Commit, leader = first joiner, Metadata for named or all topics, "phantom" members that are part of
every generation, and a protocol chosen as our first protocol every phantom supports.

Scripting: ``inject(api, code, ...)`` makes the next calls of ``api`` answer with those error codes;
``raise_next(api, exc)`` makes the next call raise ``exc`` (a lost connection);
``move_coordinator(node)`` makes the old node answer NOT_COORDINATOR. Thread-safe (one lock).

Also here: ``Recorder`` (a listener that records calls and waits on them with a bound),
``config()`` (fast member settings for these tests), and what the member tests share:
``coordinator_fixture`` (their ``fake`` fixture) and ``members_on`` (starts members on it and
closes them after the test).
"""
from __future__ import annotations

import itertools
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from kafka.protocol.consumer import (HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse,
                                     OffsetCommitResponse, OffsetFetchResponse, SyncGroupResponse)
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse

from groupmgr.group_errors import CoordinatorUnreachable
from groupmgr.member import GroupMember, MemberConfig

INTERNAL = "__consumer_offsets"
GROUP_APIS = {"JoinGroupRequest", "SyncGroupRequest", "HeartbeatRequest", "LeaveGroupRequest",
              "OffsetCommitRequest", "OffsetFetchRequest"}


@dataclass
class Phantom:
    member_id: str
    protocols: dict[str, bytes]
    instance_id: str | None = None


class FakeCoordinator:
    def __init__(self, partitions: dict[str, int]) -> None:
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.partitions = dict(partitions)
        self.node = 1
        self.generation = 0
        self.members: dict[str, str | None] = {}  # our member ids -> instance id
        self.pending: set[str] = set()  # ids handed out with MEMBER_ID_REQUIRED
        self.unreachable = False
        self.last_sync_assignments: dict[str, bytes] = {}
        self.phantoms: list[Phantom] = []
        self.protocol: str | None = None
        self.leader_is_phantom = False
        self.follower_assignment = b""
        self.rebalance_pending = False
        self.offsets: dict[tuple[str, int], int] = {}
        self.log: list[tuple[str, object, object]] = []  # (request name, node, request)
        self.timeouts: list[tuple[str, float]] = []  # (request name, timeout_s the member allowed)
        self._codes: dict[str, deque] = defaultdict(deque)
        self._raises: dict[str, deque] = defaultdict(deque)
        self._ids = itertools.count(1)
        self.closed = False

    # -- scripting -------------------------------------------------------------------------
    def inject(self, api: str, *codes: int) -> None:
        with self.lock:
            self._codes[api + "Request"].extend(codes)

    def raise_next(self, api: str, exc: BaseException) -> None:
        with self.lock:
            self._raises[api + "Request"].append(exc)

    def move_coordinator(self, node: int) -> None:
        with self.lock:
            self.node = node

    def wait_for(self, predicate, timeout: float) -> bool:
        """Block until ``predicate()`` holds (re-checked on every request), at most ``timeout``."""
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    def requests(self, api: str) -> list:
        with self.lock:
            return [r for name, _, r in self.log if name == api + "Request"]

    def nodes(self, api: str) -> list:
        with self.lock:
            return [n for name, n, _ in self.log if name == api + "Request"]

    # -- Transport ---------------------------------------------------------------------------
    def start(self, timeout_s: float) -> None:
        pass

    def add_coordinator(self, group_id: str, coordinator) -> str:
        return f"coordinator-{coordinator.node_id}"

    def close(self) -> None:
        self.closed = True

    def send(self, request, node_id, timeout_s: float):
        with self.lock:
            name = request.name
            request.API_VERSION = min(request._max_version or request.max_version, request.max_version)
            self.log.append((name, node_id, request))
            self.timeouts.append((name, timeout_s))
            self.cond.notify_all()
            if self._raises[name]:
                raise self._raises[name].popleft()
            if self.unreachable and name != "MetadataRequest":
                raise CoordinatorUnreachable(f"fake: {name} unreachable")
            version = request.API_VERSION
            if name in GROUP_APIS and node_id != f"coordinator-{self.node}":
                return self._error_response(name, 16, version)
            if self._codes[name]:
                return self._error_response(name, self._codes[name].popleft(), version)
            return getattr(self, "_" + name)(request, version)

    # -- handlers (lock held) ----------------------------------------------------------------
    def _FindCoordinatorRequest(self, request, v):
        coordinator = FindCoordinatorResponse.Coordinator(key=request.key, node_id=self.node, host="fake",
                                                          port=9092, error_code=0, error_message=None)
        return FindCoordinatorResponse(version=v, coordinators=[coordinator], node_id=self.node,
                                       host="fake", port=9092, error_code=0)

    def _MetadataRequest(self, request, v):
        """Named topics, or every topic (topics=None) plus the internal ``__consumer_offsets``."""
        names = [t.name for t in request.topics] if request.topics is not None else [*self.partitions, INTERNAL]
        topics = [MetadataResponse.MetadataResponseTopic(
            name=name, error_code=0 if name in self.partitions or name == INTERNAL else 3,
            is_internal=name == INTERNAL,
            partitions=[MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(partition_index=i)
                        for i in range(self.partitions.get(name, 0))]) for name in names]
        return MetadataResponse(version=v, brokers=[], topics=topics)

    def _JoinGroupRequest(self, r, v):
        if not r.member_id and r.group_instance_id is None:
            new_id = f"m-{next(self._ids)}"
            self.pending.add(new_id)
            return JoinGroupResponse(version=v, error_code=79, member_id=new_id)
        if r.member_id and r.member_id not in self.members and r.member_id not in self.pending:
            return JoinGroupResponse(version=v, error_code=25, member_id=r.member_id)
        member_id = r.member_id or f"s-{next(self._ids)}"
        self.members = {m: i for m, i in self.members.items() if i is None or i != r.group_instance_id}
        self.members[member_id] = r.group_instance_id
        self.pending.discard(member_id)
        ours = {p.name: p.metadata for p in r.protocols}
        self.protocol = next(n for n in ours if all(n in p.protocols for p in self.phantoms))
        self.generation += 1
        self.rebalance_pending = False
        leader = self.phantoms[0].member_id if self.leader_is_phantom else member_id
        members = [JoinGroupResponse.JoinGroupResponseMember(member_id=member_id, group_instance_id=r.group_instance_id,
                                                            metadata=ours[self.protocol])]
        members += [JoinGroupResponse.JoinGroupResponseMember(member_id=p.member_id, group_instance_id=p.instance_id,
                                                             metadata=p.protocols[self.protocol]) for p in self.phantoms]
        return JoinGroupResponse(version=v, error_code=0, generation_id=self.generation, protocol_type="consumer",
                                 protocol_name=self.protocol, leader=leader, member_id=member_id,
                                 members=members if leader == member_id else [])

    def _check_member(self, member_id: str, generation: int, rebalance_matters: bool = True) -> int:
        if member_id not in self.members:
            return 25
        if generation != self.generation:
            return 22
        return 27 if self.rebalance_pending and rebalance_matters else 0

    def _SyncGroupRequest(self, r, v):
        code = self._check_member(r.member_id, r.generation_id)
        if code:
            return SyncGroupResponse(version=v, error_code=code, assignment=b"")
        self.last_sync_assignments = {a.member_id: a.assignment for a in r.assignments}
        mine = self.last_sync_assignments.get(r.member_id, self.follower_assignment)
        return SyncGroupResponse(version=v, error_code=0, protocol_type="consumer",
                                 protocol_name=self.protocol, assignment=mine)

    def _HeartbeatRequest(self, r, v):
        return HeartbeatResponse(version=v, error_code=self._check_member(r.member_id, r.generation_id))

    def _LeaveGroupRequest(self, r, v):
        for m in r.members:
            self.members.pop(m.member_id, None)
        return LeaveGroupResponse(version=v, error_code=0, members=[])

    def _OffsetCommitRequest(self, r, v):
        code = self._check_member(r.member_id, r.generation_id_or_member_epoch, rebalance_matters=False)
        topics = []
        for t in r.topics:
            for p in t.partitions:
                if code == 0:
                    self.offsets[(t.name, p.partition_index)] = p.committed_offset
            topics.append(OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=[
                OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=code) for p in t.partitions]))
        return OffsetCommitResponse(version=v, topics=topics)

    def _OffsetFetchRequest(self, r, v):
        group = OffsetFetchResponse.OffsetFetchResponseGroup
        topic_cls = group.OffsetFetchResponseTopics
        part_cls = topic_cls.OffsetFetchResponsePartitions
        topics = [topic_cls(name=t.name, partitions=[part_cls(
            partition_index=p, committed_offset=self.offsets.get((t.name, p), -1), metadata="",
            error_code=0) for p in t.partition_indexes]) for t in r.groups[0].topics]
        return OffsetFetchResponse(version=v, groups=[group(group_id=r.groups[0].group_id, topics=topics)])

    def _error_response(self, name: str, code: int, v: int):
        if name == "FindCoordinatorRequest":
            c = FindCoordinatorResponse.Coordinator(key="", node_id=-1, host="", port=-1, error_code=code)
            return FindCoordinatorResponse(version=v, coordinators=[c], error_code=code)
        if name in ("OffsetCommitRequest", "OffsetFetchRequest"):
            return self._partition_error(name, code, v)
        cls = {"JoinGroupRequest": JoinGroupResponse, "SyncGroupRequest": SyncGroupResponse,
               "HeartbeatRequest": HeartbeatResponse, "LeaveGroupRequest": LeaveGroupResponse}[name]
        return cls(version=v, error_code=code)

    def _partition_error(self, name: str, code: int, v: int):
        if name == "OffsetFetchRequest":
            group = OffsetFetchResponse.OffsetFetchResponseGroup
            return OffsetFetchResponse(version=v, groups=[group(group_id="", error_code=code, topics=[])])
        part = OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition
        topic = OffsetCommitResponse.OffsetCommitResponseTopic(name="t", partitions=[part(partition_index=0,
                                                                                         error_code=code)])
        return OffsetCommitResponse(version=v, topics=[topic])


WAIT = 5.0


class Recorder:
    """Records listener calls; ``wait`` blocks (bounded) until a predicate over the events holds."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.cond = threading.Condition()
        self.hooks: dict[str, object] = {}

    def _add(self, event: tuple) -> None:
        hook = self.hooks.get(event[0])
        if hook:
            hook(*event[1:])
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def on_revoked(self, partitions):
        self._add(("revoked", partitions))

    def on_assigned(self, generation, partitions):
        self._add(("assigned", generation, partitions))

    def on_fenced(self, error):
        self._add(("fenced", error))

    def wait(self, predicate, timeout: float = WAIT) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.events), timeout)

    def kinds(self) -> list[str]:
        with self.cond:
            return [e[0] for e in self.events]

    def assigned_generations(self) -> list[int]:
        with self.cond:
            return [e[1].generation_id for e in self.events if e[0] == "assigned"]


def config(**overrides) -> MemberConfig:
    """Fast settings. These tests never call ``poll()``: the poll timer is an hour unless overridden
    (tests/unit/test_poll_timeout.py sets ``max_poll_interval_ms``)."""
    base = dict(bootstrap_servers="fake:9092", group_id="g", topics=("t", "u"), session_timeout_ms=600,
                heartbeat_interval_ms=20, rebalance_timeout_ms=3000, retry_backoff_ms=5,
                retry_backoff_max_ms=20, request_timeout_ms=1000, metadata_max_age_ms=60000,
                max_poll_interval_ms=3_600_000)
    return MemberConfig(**{**base, **overrides})


class FakeGroup(FakeCoordinator):
    """Several of OUR members in one group, like a broker's classic group.

    JoinGroup waits (on ``cond``, releasing the lock) until every known member has rejoined, or
    ``join_wait_s`` passed (then the missing ones are removed, as after a rebalance timeout); a join
    marks a rebalance, so the others' heartbeats answer REBALANCE_IN_PROGRESS. The leader is the
    first member (in join order) that rejoined; it alone gets the members' metadata. The protocol is
    the leader's first one every joiner offers. A follower's SyncGroup waits for the leader's.
    OffsetCommit takes the current generation, also while a rebalance is pending (PreparingRebalance),
    and is refused with the old one once the new generation formed. LeaveGroup starts a rebalance.
    ``members`` keeps join order. No phantoms.
    """

    def __init__(self, partitions: dict[str, int], join_wait_s: float = 3.0) -> None:
        super().__init__(partitions)
        self.join_wait_s = join_wait_s
        self.joining: dict[str, tuple[str | None, dict[str, bytes]]] = {}
        self.round = 0
        self.results: dict[str, tuple] = {}  # member id -> (generation, leader, protocol, members)
        self.syncs: dict[int, dict[str, bytes]] = {}  # generation -> assignments sent by its leader
        self.history: list[dict[str, list]] = []  # decoded assignments per completed generation

    def add_silent(self, member_id: str) -> None:
        """A member that never rejoins: the next join round waits for it (until ``drop`` or ``join_wait_s``)."""
        with self.lock:
            self.members[member_id] = None
            self.rebalance_pending = True
            self.cond.notify_all()

    def drop(self, member_id: str) -> None:
        """Remove a member, as the coordinator does when one misses a round: a round waiting for it completes."""
        with self.lock:
            self.members.pop(member_id, None)
            self.cond.notify_all()

    def _JoinGroupRequest(self, r, v):
        import time as _time
        if not r.member_id and r.group_instance_id is None:
            new_id = f"m-{next(self._ids)}"
            self.pending.add(new_id)
            return JoinGroupResponse(version=v, error_code=79, member_id=new_id)
        if r.member_id not in self.members and r.member_id not in self.pending:
            return JoinGroupResponse(version=v, error_code=25, member_id=r.member_id)
        self.pending.discard(r.member_id)
        self.members.setdefault(r.member_id, r.group_instance_id)
        self.joining[r.member_id] = (r.group_instance_id, {p.name: p.metadata for p in r.protocols})
        self.rebalance_pending = True
        self.cond.notify_all()
        my_round, deadline = self.round, _time.monotonic() + self.join_wait_s
        while self.round == my_round:
            missing = set(self.members) - set(self.joining)
            remaining = deadline - _time.monotonic()
            if not missing or remaining <= 0:
                for member_id in missing:
                    self.members.pop(member_id, None)
                self._complete_join()
                break
            self.cond.wait(remaining)
        if r.member_id not in self.results:
            return JoinGroupResponse(version=v, error_code=25, member_id=r.member_id)
        generation, leader, protocol, members = self.results[r.member_id]
        return JoinGroupResponse(version=v, error_code=0, generation_id=generation, protocol_type="consumer",
                                 protocol_name=protocol, leader=leader, member_id=r.member_id,
                                 members=members if leader == r.member_id else [])

    def _complete_join(self) -> None:
        joined = [m for m in self.members if m in self.joining]
        leader = joined[0]
        offered = self.joining
        protocol = next(n for n in offered[leader][1] if all(n in offered[m][1] for m in joined))
        self.protocol = protocol
        self.generation += 1
        members = [JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=offered[m][0],
                                                            metadata=offered[m][1][protocol]) for m in joined]
        self.results = {m: (self.generation, leader, protocol, members) for m in joined}
        self.joining = {}
        self.rebalance_pending = False
        self.round += 1
        self.cond.notify_all()

    def _SyncGroupRequest(self, r, v):
        import time as _time
        from groupmgr.consumer_protocol import decode_assignment
        code = self._check_member(r.member_id, r.generation_id)
        if code:
            return SyncGroupResponse(version=v, error_code=code, assignment=b"")
        if r.assignments:
            self.syncs[r.generation_id] = {a.member_id: a.assignment for a in r.assignments}
            self.last_sync_assignments = self.syncs[r.generation_id]
            self.history.append({m: list(decode_assignment(a).partitions)
                                 for m, a in self.last_sync_assignments.items()})
            self.cond.notify_all()
        deadline = _time.monotonic() + self.join_wait_s
        while r.generation_id not in self.syncs:
            code = self._check_member(r.member_id, r.generation_id)
            remaining = deadline - _time.monotonic()
            if code or remaining <= 0:
                return SyncGroupResponse(version=v, error_code=code or 27, assignment=b"")
            self.cond.wait(remaining)
        return SyncGroupResponse(version=v, error_code=0, protocol_type="consumer", protocol_name=self.protocol,
                                 assignment=self.syncs[r.generation_id].get(r.member_id, b""))

    def _LeaveGroupRequest(self, r, v):
        for m in r.members:
            if m.member_id in self.members:
                self.members.pop(m.member_id)
                self.joining.pop(m.member_id, None)
                self.rebalance_pending = bool(self.members)
        self.cond.notify_all()
        return LeaveGroupResponse(version=v, error_code=0, members=[])


def coordinator_fixture(partitions: dict[str, int], kind: type[FakeCoordinator] = FakeCoordinator, **settings):
    """The member tests' ``fake`` fixture: a new ``kind`` (``FakeCoordinator`` or ``FakeGroup``) over
    ``partitions`` (topic -> partition count) for each test; ``settings``: e.g. ``join_wait_s``.
    Use: ``fake = coordinator_fixture({"t": 2})`` at module level."""
    @pytest.fixture(name="fake")
    def fake() -> FakeCoordinator:
        return kind(partitions, **settings)
    return fake


@contextmanager
def members_on(transport, prepare: Callable[[GroupMember, Recorder], None] | None = None,
               stable: bool = False, **defaults) -> Iterator[Callable[..., tuple[GroupMember, Recorder]]]:
    """Yields ``start(recorder=None, **settings) -> (member, recorder)``: a ``GroupMember`` on
    ``transport`` with ``config(**defaults, **settings)``, started (and, with ``stable``, asserted
    STABLE within ``WAIT``); ``prepare(member, recorder)`` runs before it starts (e.g. to add
    recorder hooks). Every member started is closed at the end."""
    members: list[GroupMember] = []

    def start(recorder: Recorder | None = None, **settings) -> tuple[GroupMember, Recorder]:
        recorder = recorder or Recorder()
        member = GroupMember(config(**{**defaults, **settings}), recorder, transport=transport)
        if prepare:
            prepare(member, recorder)
        members.append(member.start())
        if stable:
            assert member.wait_until_stable(WAIT)
        return member, recorder

    try:
        yield start
    finally:
        for member in members:
            member.close(timeout_s=5)
