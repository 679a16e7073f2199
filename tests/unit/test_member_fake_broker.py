"""GroupMember edge cases against a scripted fake coordinator (mocked only at the Transport boundary).

Every wait is an event/condition with a deadline; nothing sleeps for synchronisation.
"""
from __future__ import annotations

import threading
import time

import pytest

from groupmgr.assignors import PartitionAssignor, Subscription, TopicPartition as TP
from groupmgr.assignors.assignor_errors import AssignorFailedError, InvalidAssignmentError
from groupmgr.consumer_protocol import decode_assignment, decode_subscription, encode_assignment, encode_subscription
from groupmgr.group_errors import (ClientError, CoordinatorUnreachable, FencedInstanceId, IllegalGeneration, ListenerError,
                             MemberClosedError, StaleGenerationError, UnknownMemberId)
from groupmgr.generation import MemberState
from groupmgr.member import GroupMember
from groupmgr.member_loop import MAX_CLIENT_ERRORS
from tests.support.fake_coordinator import WAIT, Phantom, Recorder, config, coordinator_fixture, members_on

ALL = (TP("t", 0), TP("t", 1), TP("t", 2), TP("u", 0))


fake = coordinator_fixture({"t": 3, "u": 1})


@pytest.fixture
def started(fake):
    with members_on(fake) as start:
        yield start


def gen_at_least(n: int):
    return lambda events: any(e[0] == "assigned" and e[1].generation_id >= n for e in events)


def test_first_join_repeats_with_member_id_from_member_id_required(fake, started):
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    joins = fake.requests("JoinGroup")
    assert [j.member_id for j in joins] == ["", "m-1"]
    assert member.generation.member_id == "m-1" and member.generation.generation_id == 1
    assert member.assignment == ALL and member.is_leader
    assert rec.kinds() == ["assigned"]


def test_not_coordinator_on_heartbeat_rediscovers_without_rebalance(fake, started):
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    fake.move_coordinator(2)
    assert fake.wait_for(lambda: "coordinator-2" in fake.nodes("Heartbeat"), WAIT)
    assert len(fake.requests("FindCoordinator")) == 2
    assert member.generation.generation_id == 1 and rec.kinds() == ["assigned"]


def test_lost_connection_on_heartbeat_rediscovers(fake, started):
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    fake.raise_next("Heartbeat", CoordinatorUnreachable("reset by peer"))
    assert fake.wait_for(lambda: len(fake.requests("FindCoordinator")) == 2, WAIT)
    assert member.state is MemberState.STABLE and member.generation.generation_id == 1


def test_an_unrecognised_client_failure_is_retried_without_losing_the_generation(fake, started):
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    for _ in range(MAX_CLIENT_ERRORS - 1):
        fake.raise_next("Heartbeat", ClientError("Heartbeat: ValueError: garbled"))
    before = len(fake.requests("Heartbeat"))
    assert fake.wait_for(lambda: len(fake.requests("Heartbeat")) >= before + MAX_CLIENT_ERRORS + 2, WAIT)
    assert member.state is MemberState.STABLE and member.generation.generation_id == 1
    assert len(fake.requests("FindCoordinator")) >= 2  # the coordinator was looked up again
    member.raise_if_failed()
    assert rec.kinds() == ["assigned"]


def test_client_failures_in_a_row_end_the_member_named(fake, started):
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    for _ in range(MAX_CLIENT_ERRORS):
        fake.raise_next("Heartbeat", ClientError("Heartbeat: ValueError: garbled"))
    status = member._status  # its condition is notified when the member thread records a failure
    with status.cond:
        assert status.cond.wait_for(lambda: status.state is MemberState.FAILED, WAIT)
    with pytest.raises(ClientError, match=rf"garbled \({MAX_CLIENT_ERRORS} times in a row\)"):
        member.raise_if_failed()


def test_a_client_failure_during_a_join_round_is_retried(fake, started):
    fake.raise_next("SyncGroup", ClientError("SyncGroup: ValueError: garbled"))
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    assert rec.kinds() == ["assigned"] and len(fake.requests("SyncGroup")) == 2


def test_rebalance_in_progress_during_sync_rejoins(fake, started):
    fake.inject("SyncGroup", 27)
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    assert len(fake.requests("JoinGroup")) == 3  # MEMBER_ID_REQUIRED, joined gen 1, rejoined gen 2
    assert rec.assigned_generations() == [2]


def test_illegal_generation_on_heartbeat_fences_then_rejoins_keeping_member_id(fake, started):
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    fake.inject("Heartbeat", 22)
    assert rec.wait(gen_at_least(2))
    assert rec.kinds() == ["assigned", "fenced", "revoked", "assigned"]
    assert isinstance(rec.events[1][1], IllegalGeneration)
    assert rec.events[2][1] == ALL
    assert fake.requests("JoinGroup")[-1].member_id == "m-1"


def test_unknown_member_id_on_heartbeat_rejoins_with_new_member_id(fake, started):
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    fake.inject("Heartbeat", 25)
    assert rec.wait(gen_at_least(2))
    assert isinstance(rec.events[1][1], UnknownMemberId)
    assert [j.member_id for j in fake.requests("JoinGroup")][-2:] == ["", "m-2"]


def test_rebalance_in_progress_on_heartbeat_revokes_with_commit_then_reassigns(fake, started):
    rec = Recorder()
    member_box: list[GroupMember] = []
    rec.hooks["revoked"] = lambda parts: member_box[0].commit_offsets({TP("t", 0): 42})
    member, _ = started(rec)
    member_box.append(member)
    assert member.wait_until_stable(WAIT)
    with fake.lock:
        fake.rebalance_pending = True
    assert rec.wait(gen_at_least(2))
    assert rec.kinds() == ["assigned", "revoked", "assigned"]
    commit = fake.requests("OffsetCommit")[0]
    assert commit.generation_id_or_member_epoch == 1 and fake.offsets[("t", 0)] == 42


def test_slow_on_revoked_keeps_heartbeating_until_released(fake, started):
    release = threading.Event()
    rec = Recorder()
    rec.hooks["revoked"] = lambda parts: release.wait(WAIT)
    member, _ = started(rec)
    assert member.wait_until_stable(WAIT)
    with fake.lock:
        fake.rebalance_pending = True
    before = len(fake.requests("Heartbeat"))
    # 40 heartbeats at 20 ms span more than the 600 ms session timeout
    assert fake.wait_for(lambda: len(fake.requests("Heartbeat")) >= before + 40, WAIT)
    release.set()
    assert rec.wait(gen_at_least(2))
    assert "fenced" not in rec.kinds()
    assert fake.requests("JoinGroup")[-1].member_id == "m-1"


def test_commit_with_stale_generation_raises_and_fences_once(fake, started):
    member, rec = started(heartbeat_interval_ms=500)
    assert member.wait_until_stable(WAIT)
    with fake.lock:
        fake.generation = 7  # the group moved on without us
    with pytest.raises(StaleGenerationError) as info:
        member.commit_offsets({TP("t", 1): 5})
    assert info.value.fenced and isinstance(info.value.cause, IllegalGeneration)
    assert rec.wait(gen_at_least(8))
    assert rec.kinds().count("fenced") == 1 and ("t", 1) not in fake.offsets


def test_commit_rebalance_in_progress_is_stale_but_not_fenced(fake, started):
    member, rec = started(heartbeat_interval_ms=500)
    assert member.wait_until_stable(WAIT)
    fake.inject("OffsetCommit", 27)
    with pytest.raises(StaleGenerationError) as info:
        member.commit_offsets({TP("t", 1): 5})
    assert not info.value.fenced
    assert rec.wait(gen_at_least(2))
    assert rec.kinds() == ["assigned", "revoked", "assigned"]


def test_commit_retries_on_not_coordinator_then_succeeds(fake, started):
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    fake.inject("OffsetCommit", 16)
    member.commit_offsets({TP("u", 0): 9}, metadata="m")
    assert fake.offsets[("u", 0)] == 9
    assert member.committed([TP("u", 0), TP("t", 2)]) == {TP("u", 0): member.committed([TP("u", 0)])[TP("u", 0)]}
    assert member.committed([TP("u", 0)])[TP("u", 0)].offset == 9


def test_commit_without_generation_is_rejected_locally(fake):
    member = GroupMember(config(), Recorder(), transport=fake)
    with pytest.raises(StaleGenerationError):
        member.commit_offsets({TP("t", 0): 1})
    assert fake.requests("OffsetCommit") == []


class Broken(PartitionAssignor):
    name = "broken"

    def assign(self, partitions_per_topic, subscriptions):
        raise RuntimeError("boom")


class Duplicating(PartitionAssignor):
    name = "dup"

    def assign(self, partitions_per_topic, subscriptions):
        return {m: [TP("t", 0)] for m in subscriptions}


@pytest.mark.parametrize("assignor, error", [(Broken(), AssignorFailedError), (Duplicating(), InvalidAssignmentError)])
def test_leader_sends_nothing_when_assignor_fails(fake, started, assignor, error):
    fake.phantoms.append(Phantom("p-1", {assignor.name: encode_subscription(Subscription(("t",)))}))
    member, rec = started(assignors=(assignor,))
    with pytest.raises(error):
        member.wait_until_stable(WAIT)
    assert fake.requests("SyncGroup") == []
    assert member.state is MemberState.FAILED and rec.kinds() == []
    with pytest.raises(error):
        member.raise_if_failed()


def test_leader_assigns_phantoms_with_protocol_all_support(fake, started):
    fake.phantoms.append(Phantom("p-1", {"roundrobin": encode_subscription(Subscription(("t", "u")))}))
    member, rec = started(assignors=("range", "roundrobin"))
    assert member.wait_until_stable(WAIT)
    assert member.generation.protocol_name == "roundrobin"
    sent = {m: decode_assignment(b).partitions for m, b in fake.last_sync_assignments.items()}
    assert set(sent) == {"m-1", "p-1"}
    assert sorted(sent["m-1"] + sent["p-1"]) == list(ALL)
    assert member.assignment == sent["m-1"]


def test_follower_sends_empty_sync_and_decodes_its_assignment(fake, started):
    fake.phantoms.append(Phantom("a-leader", {"range": encode_subscription(Subscription(("t",)))}))
    fake.leader_is_phantom = True
    fake.follower_assignment = encode_assignment([TP("t", 2), TP("u", 0)])
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    assert member.assignment == (TP("t", 2), TP("u", 0)) and not member.is_leader
    assert list(fake.requests("SyncGroup")[-1].assignments) == []


def _unreachable_past_session(fake) -> None:
    """Make the coordinator unreachable until more than a session timeout (600 ms) has passed."""
    with fake.lock:
        fake.unreachable = True
    since = time.monotonic()
    assert fake.wait_for(lambda: time.monotonic() - since > 1.0, WAIT)  # re-checked on every retry


def test_unreachable_coordinator_keeps_partitions_and_same_generation(fake, started):
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    finds = len(fake.requests("FindCoordinator"))
    _unreachable_past_session(fake)
    assert len(fake.requests("FindCoordinator")) > finds + 3  # kept re-discovering
    assert member.assignment == ALL and member.generation.generation_id == 1
    with fake.lock:
        fake.unreachable = False
        beats = len(fake.log)
    assert fake.wait_for(lambda: any(n == "HeartbeatRequest" for n, _, _ in fake.log[beats:]), WAIT)
    assert rec.kinds() == ["assigned"] and member.state is MemberState.STABLE


def test_unreachable_coordinator_that_dropped_us_fences_on_return(fake, started):
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    _unreachable_past_session(fake)
    with fake.lock:
        fake.members.clear()  # the broker expired our session meanwhile
        fake.generation += 1
        fake.unreachable = False
    assert rec.wait(gen_at_least(3))
    assert rec.kinds() == ["assigned", "fenced", "revoked", "assigned"]
    assert isinstance(rec.events[1][1], UnknownMemberId)


def test_partition_count_change_makes_leader_rejoin(fake, started):
    member, rec = started(metadata_max_age_ms=30)
    assert member.wait_until_stable(WAIT)
    with fake.lock:
        fake.partitions["u"] = 3
    assert rec.wait(gen_at_least(2))
    assert set(member.assignment) == set(ALL) | {TP("u", 1), TP("u", 2)}


def joined_topics(fake) -> list[tuple[str, ...]]:
    """The topics of every JoinGroup subscription our member sent, in order."""
    return [decode_subscription(j.protocols[0].metadata).subscription.topics for j in fake.requests("JoinGroup")]


def test_pattern_subscription_follows_new_matching_topics(fake, started):
    with fake.lock:
        fake.partitions["other"] = 2
    member, rec = started(topics=(), topic_pattern="[tu].*|.*offsets", metadata_max_age_ms=30)
    assert member.wait_until_stable(WAIT)
    assert member.topics == ("t", "u") and member.assignment == ALL  # not "other", not the internal topic
    with fake.lock:
        fake.partitions["u2"] = 2
    assert rec.wait(lambda ev: any(e[0] == "assigned" and TP("u2", 1) in e[2] for e in ev))
    assert member.topics == ("t", "u", "u2")
    assert joined_topics(fake)[-1] == ("t", "u", "u2")
    assert rec.kinds()[:3] == ["assigned", "revoked", "assigned"]


def test_pattern_matching_nothing_joins_empty_and_picks_up_the_first_topic(fake, started):
    member, rec = started(topics=(), topic_pattern="later-.*", metadata_max_age_ms=30)
    assert member.wait_until_stable(WAIT)
    assert member.topics == () and member.assignment == ()
    with fake.lock:
        fake.partitions["later-1"] = 1
    assert rec.wait(lambda ev: any(e[0] == "assigned" and e[2] == (TP("later-1", 0),) for e in ev))
    assert joined_topics(fake)[0] == () and joined_topics(fake)[-1] == ("later-1",)


def test_unchanged_pattern_match_does_not_rejoin(fake, started):
    member, rec = started(topics=(), topic_pattern="t", metadata_max_age_ms=20)
    assert member.wait_until_stable(WAIT)
    checks = len(fake.requests("Metadata"))
    assert fake.wait_for(lambda: len(fake.requests("Metadata")) >= checks + 5, WAIT)
    assert rec.kinds() == ["assigned"] and member.generation.generation_id == 1


def test_metadata_checks_hold_the_member_thread_at_most_a_third_of_the_session(fake, started):
    member, rec = started(topics=(), topic_pattern="t|u", metadata_max_age_ms=20, request_timeout_ms=1000)
    assert member.wait_until_stable(WAIT)
    for _ in range(3):  # a broker that does not answer: the listing fails, the subscription stays
        fake.raise_next("Metadata", CoordinatorUnreachable("fake: no answer"))
    checks = len(fake.requests("Metadata"))
    assert fake.wait_for(lambda: len(fake.requests("Metadata")) >= checks + 6, WAIT)
    with fake.lock:  # every check since the group settled: topic listings and the leader's count checks
        waits = [t for name, t in fake.timeouts if name == "MetadataRequest"][checks:]
    assert max(waits) <= 0.6 / 3 + 1e-9  # session 600 ms (config()), request timeout 1 s
    assert rec.kinds() == ["assigned"] and member.topics == ("t", "u") and member.state is MemberState.STABLE


def test_fenced_instance_id_is_fatal_and_does_not_leave(fake, started):
    member, rec = started(group_instance_id="i-1")
    assert member.wait_until_stable(WAIT)
    fake.inject("Heartbeat", 82)
    assert rec.wait(lambda ev: "revoked" in [e[0] for e in ev])
    with pytest.raises(FencedInstanceId):
        member.wait_until_stable(WAIT)
    assert fake.requests("LeaveGroup") == []


def test_listener_error_is_fatal(fake, started):
    rec = Recorder()
    rec.hooks["assigned"] = lambda gen, parts: 1 / 0
    member, _ = started(rec)
    with pytest.raises(ListenerError) as info:
        member.wait_until_stable(WAIT)
    assert isinstance(info.value.cause, ZeroDivisionError)
    assert len(fake.requests("LeaveGroup")) == 1  # a failed dynamic member gets out of the way


@pytest.mark.parametrize("instance, leave, expect_leave", [
    (None, None, True), ("i-1", None, False), ("i-1", True, True), (None, False, False)])
def test_close_revokes_and_leaves_as_configured(fake, started, instance, leave, expect_leave):
    member, rec = started(group_instance_id=instance)
    assert member.wait_until_stable(WAIT)
    member.close(leave_group=leave, timeout_s=5)
    assert member.state is MemberState.CLOSED and rec.kinds() == ["assigned", "revoked"]
    leaves = fake.requests("LeaveGroup")
    assert len(leaves) == int(expect_leave)
    if expect_leave:
        assert leaves[0].members[0].group_instance_id == instance
    with pytest.raises(MemberClosedError):
        member.commit_offsets({TP("t", 0): 1})
    with pytest.raises(MemberClosedError):
        member.wait_until_stable(0.01)


def test_static_member_sends_instance_id_everywhere(fake, started):
    member, rec = started(group_instance_id="i-9", heartbeat_interval_ms=20)
    assert member.wait_until_stable(WAIT)
    member.commit_offsets({TP("t", 0): 3})
    assert fake.wait_for(lambda: len(fake.requests("Heartbeat")) >= 1, WAIT)
    for api in ("JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit"):
        assert {r.group_instance_id for r in fake.requests(api)} == {"i-9"}, api
    assert fake.requests("JoinGroup")[0].member_id == ""  # static members get no MEMBER_ID_REQUIRED


def test_abandon_sends_no_leave_and_no_callbacks(fake, started):
    member, rec = started()
    assert member.wait_until_stable(WAIT)
    member._abandon()
    assert fake.requests("LeaveGroup") == [] and rec.kinds() == ["assigned"] and fake.closed


def test_a_brokers_named_refusal_ends_the_member_in_one_log_line_without_traceback(fake, caplog):
    """INVALID_SESSION_TIMEOUT on JoinGroup is fatal and logged as its condition, not a traceback
    (a plug-in's failure, ListenerError, keeps its traceback: test_listener_error_is_fatal)."""
    from groupmgr.group_errors import InvalidSessionTimeout

    fake.inject("JoinGroup", InvalidSessionTimeout.error_code)
    with members_on(fake) as start, caplog.at_level("DEBUG", logger="groupmgr.member_loop"):
        member, _ = start()
        with pytest.raises(InvalidSessionTimeout):
            member.wait_until_stable(WAIT)
    ended = [r for r in caplog.records if r.name == "groupmgr.member_loop" and r.levelname == "ERROR"]
    assert len(ended) == 1 and "[INVALID_SESSION_TIMEOUT]" in ended[0].getMessage()
    assert ended[0].exc_info is None
    # the traceback is kept, at debug level
    traced = [r for r in caplog.records if r.name == "groupmgr.member_loop" and r.levelname == "DEBUG"
              and r.exc_info and isinstance(r.exc_info[1], InvalidSessionTimeout)]
    assert len(traced) == 1
