"""What the member puts on the wire: every field of JoinGroup / SyncGroup / Heartbeat / LeaveGroup,
the time it allows each request, the rejoin reason the broker is told, and how LeaveGroup answers are
read. Checked on the real kafka-python request objects the scripted ``FakeCoordinator`` receives."""
from __future__ import annotations

import pytest
from kafka.protocol.consumer import LeaveGroupResponse

from groupmgr.assignors import RangeAssignor as RangeAssignor_, TopicPartition as TP_
from groupmgr.consumer_protocol import decode_subscription
from groupmgr.coordinator_client import CoordinatorClient
from groupmgr.group_errors import GroupAuthorizationFailed, UnknownMemberId
from groupmgr.member import GroupMember
from groupmgr.rebalance import _subscription_version, send_leave_group
from tests.support.fake_coordinator import WAIT, FakeCoordinator, Recorder, config, coordinator_fixture, members_on


fake = coordinator_fixture({"t": 2})


@pytest.fixture
def started(fake):
    with members_on(fake, stable=True, topics=("t",)) as start:
        yield start


def allowed(fake, api: str) -> set[float]:
    with fake.lock:
        return {t for name, t in fake.timeouts if name == api + "Request"}


def test_join_sync_heartbeat_and_leave_carry_the_members_settings(fake, started):
    member, _ = started(group_instance_id="i-1", rack_id="rack-a", assignors=("roundrobin", "range"),
                        session_timeout_ms=600, rebalance_timeout_ms=3000, request_timeout_ms=1000)
    assert fake.wait_for(lambda: len(fake.requests("Heartbeat")) >= 1, WAIT)
    member.close(leave_group=True, timeout_s=5)
    join = fake.requests("JoinGroup")[-1]
    assert (join.group_id, join.member_id, join.group_instance_id, join.protocol_type) == ("g", "", "i-1", "consumer")
    assert (join.session_timeout_ms, join.rebalance_timeout_ms, join.reason) == (600, 3000, "initial join")
    assert [p.name for p in join.protocols] == ["roundrobin", "range"]
    offered = decode_subscription(join.protocols[0].metadata).subscription
    assert (offered.topics, offered.rack_id, offered.generation_id) == (("t",), "rack-a", -1)
    sync = fake.requests("SyncGroup")[-1]
    assert (sync.group_id, sync.generation_id, sync.member_id, sync.group_instance_id) == ("g", 1, "s-1", "i-1")
    assert (sync.protocol_type, sync.protocol_name) == ("consumer", "roundrobin")
    beat = fake.requests("Heartbeat")[-1]
    assert (beat.group_id, beat.generation_id, beat.member_id, beat.group_instance_id) == ("g", 1, "s-1", "i-1")
    leave = fake.requests("LeaveGroup")[-1]
    assert (leave.group_id, leave.member_id) == ("g", "s-1")
    assert [(m.member_id, m.group_instance_id, m.reason) for m in leave.members] == [("s-1", "i-1", "closing")]
    assert allowed(fake, "JoinGroup") == allowed(fake, "SyncGroup") == {3.0 + 5.0}   # rebalance timeout + 5 s
    assert allowed(fake, "Heartbeat") == {0.6}          # min(request timeout 1 s, session 0.6 s)
    assert allowed(fake, "LeaveGroup") == {1.0}         # min(5 s, request timeout)


def test_heartbeat_waits_at_most_the_request_timeout(fake, started):
    started(session_timeout_ms=6000, heartbeat_interval_ms=20, request_timeout_ms=1000)
    assert fake.wait_for(lambda: len(fake.requests("Heartbeat")) >= 1, WAIT)
    assert allowed(fake, "Heartbeat") == {1.0}


def test_a_rejoin_after_the_first_generation_offers_what_the_member_owned(fake, started):
    member, rec = started(assignors=("sticky",))
    with fake.lock:
        fake.rebalance_pending = True
    assert rec.wait(lambda ev: [e[0] for e in ev].count("assigned") == 2)
    join = fake.requests("JoinGroup")[-1]
    assert join.reason == "rebalance in progress"
    offered = decode_subscription(join.protocols[0].metadata).subscription
    assert offered.generation_id == 1 and sorted(offered.owned_partitions) == sorted(member.assignment)


@pytest.mark.parametrize("code, reason, member_ids", [
    (22, "fenced: ILLEGAL_GENERATION", ["", "m-1", "m-1"]),       # keeps its member id
    (25, "fenced: UNKNOWN_MEMBER_ID", ["", "m-1", "", "m-2"])])   # starts over without one
def test_a_fenced_member_tells_the_broker_why_it_rejoins_and_offers_nothing(fake, started, code, reason, member_ids):
    member, rec = started(assignors=("sticky",))
    fake.inject("Heartbeat", code)
    assert rec.wait(lambda ev: [e[0] for e in ev].count("assigned") == 2)
    assert [j.member_id for j in fake.requests("JoinGroup")] == member_ids
    join = fake.requests("JoinGroup")[-1]
    assert join.reason == reason
    offered = decode_subscription(join.protocols[0].metadata).subscription
    assert offered.owned_partitions == () and offered.generation_id == -1   # a lost generation owns nothing


def test_partition_count_change_is_the_rejoin_reason(fake, started):
    member, rec = started(metadata_max_age_ms=30)
    with fake.lock:
        fake.partitions["t"] = 3
    assert rec.wait(lambda ev: [e[0] for e in ev].count("assigned") == 2)
    assert fake.requests("JoinGroup")[-1].reason == "partition counts changed"


def test_topic_pattern_change_is_the_rejoin_reason(fake, started):
    member, rec = started(topics=(), topic_pattern="t.*", metadata_max_age_ms=30)
    with fake.lock:
        fake.partitions["t2"] = 1
    assert rec.wait(lambda ev: [e[0] for e in ev].count("assigned") == 2)
    assert fake.requests("JoinGroup")[-1].reason == "subscribed topics changed"


# -- LeaveGroup answers ---------------------------------------------------------------------------
class LeaveAnswers(FakeCoordinator):
    """Answers LeaveGroup with a top-level code and per-member codes."""

    def __init__(self, top: int, members: list[int]):
        super().__init__({})
        self.top, self.member_codes = top, members

    def _LeaveGroupRequest(self, r, v):
        members = [LeaveGroupResponse.MemberResponse(member_id=r.member_id, group_instance_id=None, error_code=c)
                   for c in self.member_codes]
        return LeaveGroupResponse(version=v, error_code=self.top, members=members)


@pytest.mark.parametrize("top, members", [(0, []), (25, []), (0, [0]), (0, [25]), (25, [25, 0])])
def test_leave_accepts_success_and_already_gone(top, members):
    client = CoordinatorClient(LeaveAnswers(top, members), "g")
    send_leave_group(client, "g", "m-1", None, "closing", 1.0)


@pytest.mark.parametrize("top, members", [(30, []), (0, [30]), (25, [0, 30])])
def test_leave_raises_any_other_error_top_level_or_per_member(top, members):
    client = CoordinatorClient(LeaveAnswers(top, members), "g")
    with pytest.raises(GroupAuthorizationFailed):
        send_leave_group(client, "g", "m-1", None, "closing", 1.0)


def test_leave_sends_one_request_for_this_member():
    fake = FakeCoordinator({})
    send_leave_group(CoordinatorClient(fake, "g"), "grp", "m-7", "i-7", "bye", 1.0)
    leave = fake.requests("LeaveGroup")[0]
    assert (leave.group_id, leave.member_id) == ("grp", "m-7")
    assert [(m.member_id, m.group_instance_id, m.reason) for m in leave.members] == [("m-7", "i-7", "bye")]
    assert UnknownMemberId.error_code == 25


# -- the subscription version a member understands ----------------------------------------------
@pytest.mark.parametrize("metadata, version", [
    (b"", 0), (b"\x00", 0), (b"\x00\x00", 0), (b"\x00\x03", 3), (b"\x00\x01\x02\x03", 1),
    (b"\x01\x00", 256), (b"\xff\xff\x00", -1), (bytearray(b"\x00\x02"), 2)])
def test_subscription_version_is_the_first_two_bytes_signed_big_endian(metadata, version):
    assert _subscription_version(metadata) == version


# -- failed join rounds: backoff (observed through a pause spy, not the clock) and fatal errors -----
@pytest.fixture
def spied(fake):
    """A member whose client records every round backoff (pause with no deadline) instead of waiting;
    each record is (failures, the member's state, its assignment) at that moment."""
    members: list[GroupMember] = []

    def start(recorder: Recorder | None = None, **overrides):
        recorder = recorder or Recorder()
        member = GroupMember(config(**{"topics": ("t",), **overrides}), recorder, transport=fake)
        pauses: list[tuple] = []
        real_pause = member._client.pause

        def pause(failures, deadline):
            if deadline == float("inf"):
                pauses.append((failures, member.state, member.assignment))
                return True
            return real_pause(failures, deadline)

        member._client.pause = pause
        members.append(member.start())
        return member, recorder, pauses

    yield start
    for member in members:
        member.close(timeout_s=5)


REBALANCE_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS, GROUP_AUTHORIZATION_FAILED, FENCED_INSTANCE_ID = 27, 14, 30, 82


def test_a_first_rebalance_in_progress_rejoins_at_once_a_second_backs_off(fake, spied):
    fake.inject("SyncGroup", REBALANCE_IN_PROGRESS, REBALANCE_IN_PROGRESS)
    member, rec, pauses = spied()
    assert member.wait_until_stable(WAIT)
    assert [p[0] for p in pauses] == [2]                 # no pause after the first, the second waits
    assert rec.assigned_generations() == [3]


def test_join_failures_reset_after_a_successful_round(fake, spied):
    fake.inject("SyncGroup", REBALANCE_IN_PROGRESS, REBALANCE_IN_PROGRESS)
    member, rec, pauses = spied()
    assert member.wait_until_stable(WAIT)
    fake.inject("SyncGroup", REBALANCE_IN_PROGRESS)
    with fake.lock:
        fake.rebalance_pending = True
    assert rec.wait(lambda ev: [e[0] for e in ev].count("assigned") == 2)
    assert [p[0] for p in pauses] == [2]                 # the later single failure starts from zero again


def test_retriable_join_errors_always_back_off_with_growing_failures(fake, spied):
    fake.inject("SyncGroup", COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS)
    member, rec, pauses = spied()
    assert member.wait_until_stable(WAIT)
    assert [p[0] for p in pauses] == [1, 2]


def test_between_rounds_a_member_owns_nothing_and_is_preparing(fake, spied):
    from groupmgr.generation import MemberState
    member, rec, pauses = spied()
    assert member.wait_until_stable(WAIT)
    fake.inject("SyncGroup", REBALANCE_IN_PROGRESS, REBALANCE_IN_PROGRESS)
    with fake.lock:
        fake.rebalance_pending = True
    assert rec.wait(lambda ev: [e[0] for e in ev].count("assigned") == 2)
    assert pauses == [(2, MemberState.PREPARING_REBALANCE, ())]


def test_unknown_member_id_in_a_round_rejoins_without_a_member_id(fake, spied):
    member, rec, pauses = spied()
    assert member.wait_until_stable(WAIT)
    fake.inject("JoinGroup", 25)        # the broker forgot us by the time we rejoin
    with fake.lock:
        fake.rebalance_pending = True
    assert rec.wait(lambda ev: [e[0] for e in ev].count("assigned") == 2)
    assert [j.member_id for j in fake.requests("JoinGroup")] == ["", "m-1", "m-1", "", "m-2"]


@pytest.mark.parametrize("code, instance", [(GROUP_AUTHORIZATION_FAILED, None), (FENCED_INSTANCE_ID, "i-1")])
def test_a_fatal_join_error_fails_the_member(fake, spied, code, instance):
    from groupmgr.generation import MemberState
    from groupmgr.group_errors import FencedInstanceId
    fake.inject("SyncGroup", code)
    member, rec, pauses = spied(group_instance_id=instance)
    with pytest.raises(GroupAuthorizationFailed if code == GROUP_AUTHORIZATION_FAILED else FencedInstanceId):
        member.wait_until_stable(WAIT)
    assert member.state is MemberState.FAILED and pauses == [] and rec.kinds() == []


def test_state_and_partitions_seen_by_the_listener(fake, spied):
    from groupmgr.generation import MemberState
    rec = Recorder()
    box: list[GroupMember] = []
    seen = []
    rec.hooks["assigned"] = lambda gen, parts: seen.append(("assigned", box[0].state, parts))
    rec.hooks["revoked"] = lambda parts: seen.append(("revoked", box[0].state, parts))
    member, _, _ = spied(rec)
    box.append(member)
    assert member.wait_until_stable(WAIT)
    with fake.lock:
        fake.rebalance_pending = True
    assert rec.wait(lambda ev: [e[0] for e in ev].count("assigned") == 2)
    everything = (TP_("t", 0), TP_("t", 1))
    assert seen == [("assigned", MemberState.COMPLETING_REBALANCE, everything),
                    ("revoked", MemberState.PREPARING_REBALANCE, everything),
                    ("assigned", MemberState.COMPLETING_REBALANCE, everything)]
    assert member.wait_until_stable(WAIT) and member.state is MemberState.STABLE


@pytest.mark.parametrize("check", [dict(topics=(), topic_pattern="t"), {}],
                         ids=["pattern-member-topic-listing", "leader-partition-count-check"])
def test_a_failing_metadata_check_keeps_the_member_in_its_generation(fake, started, check):
    """Metadata failures past the check's deadline are retried at the next check: no rejoin, no failure."""
    from groupmgr.group_errors import CoordinatorUnreachable
    from groupmgr.generation import MemberState
    member, rec = started(**check, metadata_max_age_ms=20, request_timeout_ms=300, session_timeout_ms=600)
    for _ in range(200):
        fake.raise_next("Metadata", CoordinatorUnreachable("fake: no answer"))
    assert fake.wait_for(lambda: not fake._raises["MetadataRequest"], WAIT * 4)
    checks = len(fake.requests("Metadata"))
    assert fake.wait_for(lambda: len(fake.requests("Metadata")) >= checks + 3, WAIT)
    assert member.state is MemberState.STABLE and rec.kinds() == ["assigned"]
    assert len(fake.requests("JoinGroup")) == 2


# -- the leader's view of the group, and the assignor callbacks ------------------------------------
def test_leader_keeps_instance_ids_and_answers_each_member_in_its_protocol_version(fake, started):
    from groupmgr.assignors import Subscription
    from groupmgr.consumer_protocol import LATEST_VERSION, encode_subscription
    from tests.support.fake_coordinator import Phantom
    fake.phantoms.append(Phantom("p-old", {"range": encode_subscription(Subscription(("t",)), 0)}, "inst-old"))
    member, _ = started()
    assert member.is_leader
    subscriptions = member.group_subscriptions
    assert subscriptions["p-old"].group_instance_id == "inst-old" and subscriptions["m-1"].group_instance_id is None
    sent = fake.last_sync_assignments
    assert _subscription_version(sent["p-old"]) == 0 and _subscription_version(sent["m-1"]) == LATEST_VERSION


class Recording(RangeAssignor_):
    """The range assignor, recording ``on_assignment`` calls (optionally failing in it)."""

    name = "recording"

    def __init__(self, fail: bool = False):
        self.calls, self.fail = [], fail

    def on_assignment(self, partitions, generation_id):
        self.calls.append((partitions, generation_id))
        if self.fail:
            raise LookupError("plug-in bug")


def test_the_assignor_hears_each_assignment_with_its_generation(fake, started):
    assignor = Recording()
    member, rec = started(assignors=(assignor,))
    with fake.lock:
        fake.rebalance_pending = True
    assert rec.wait(lambda ev: [e[0] for e in ev].count("assigned") == 2)
    everything = [TP_("t", 0), TP_("t", 1)]
    assert assignor.calls == [(everything, 1), (everything, 2)]
    assert all(type(parts) is list for parts, _ in assignor.calls)


def test_a_failing_on_assignment_is_one_named_error(fake):
    from groupmgr.assignors.assignor_errors import AssignorFailedError
    assignor = Recording(fail=True)
    member = GroupMember(config(topics=("t",), assignors=(assignor,)), Recorder(), transport=fake).start()
    try:
        with pytest.raises(AssignorFailedError) as raised:
            member.wait_until_stable(WAIT)
    finally:
        member.close(timeout_s=5)
    assert raised.value.name == "recording" and isinstance(raised.value.cause, LookupError)
    assert raised.value.condition == "ASSIGNOR_FAILED"


def test_leave_retries_on_a_moved_coordinator_within_its_deadline():
    fake = FakeCoordinator({})
    client = CoordinatorClient(fake, "g", retry_backoff_ms=1)
    client.ensure_coordinator(client.deadline(1.0))
    fake.move_coordinator(2)                          # the first LeaveGroup gets NOT_COORDINATOR
    send_leave_group(client, "g", "m-1", None, "closing", 5.0)
    assert fake.nodes("LeaveGroup") == ["coordinator-1", "coordinator-2"]


class OtherConnection:
    """The same scripted broker reached over a connection of its own; records what goes through it."""

    def __init__(self, fake: FakeCoordinator) -> None:
        self.fake, self.sent, self.starts, self.closed = fake, [], 0, False

    def start(self, timeout_s: float) -> None:
        self.starts += 1

    def add_coordinator(self, group_id, coordinator):
        return self.fake.add_coordinator(group_id, coordinator)

    def send(self, request, node_id, timeout_s: float):
        self.sent.append(request.name)
        return self.fake.send(request, node_id, timeout_s)

    def close(self) -> None:
        self.closed = True


def test_offsets_go_over_their_own_connection_opened_while_the_member_joins(fake):
    offsets = OtherConnection(fake)
    member = GroupMember(config(topics=("t",)), Recorder(), transport=fake, offsets_transport=offsets).start()
    try:
        assert member.wait_until_stable(WAIT)
        with fake.cond:  # opened before any offset request: the first assignment's fetch finds it ready
            assert fake.cond.wait_for(lambda: offsets.sent == ["FindCoordinatorRequest"], WAIT)
        member.commit_offsets({TP_("t", 0): 5}, "m")
        member.commit_offsets({TP_("t", 0): 6}, "m")
        assert member.committed([TP_("t", 0)])[TP_("t", 0)].offset == 6
    finally:
        member.close(timeout_s=5)
    assert offsets.starts == 1 and offsets.closed
    assert offsets.sent == ["FindCoordinatorRequest", "OffsetCommitRequest", "OffsetCommitRequest",
                            "OffsetFetchRequest"]
    offset_requests = [name for name, _, _ in fake.log if name in ("OffsetCommitRequest", "OffsetFetchRequest")]
    assert offset_requests == offsets.sent[1:]  # none went over the protocol's connection


def test_a_member_closed_before_it_started_opens_no_offsets_connection(fake):
    offsets = OtherConnection(fake)
    GroupMember(config(topics=("t",)), Recorder(), transport=fake, offsets_transport=offsets).close(timeout_s=5)
    assert offsets.starts == 0 and not offsets.closed and offsets.sent == []


def test_by_default_the_protocol_and_the_offsets_have_a_connection_each():
    member = GroupMember(config(topics=("t",)), Recorder())
    assert member._offsets_client.client is not member._client
    assert member._offsets_client.client.transport is not member._client.transport
