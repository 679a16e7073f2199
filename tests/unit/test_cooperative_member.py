"""The incremental cooperative rebalance protocol (KIP-429) in ``GroupMember``, against ``FakeGroup``
(several of our members in one scripted classic group), next to the unchanged eager protocol.

Listener sequences checked here (the contract in ``groupmgr/listener.py``):

* cooperative: nothing before the rejoin; after it ``on_revoked(only the partitions that leave)``
  (with the new generation in force) and ``on_assigned(generation, full assignment)``; a follow-up
  rebalance gives the revoked partitions to their new owner; an unchanged member hears no
  ``on_revoked`` at all and keeps committing with its last stable generation while it rejoins.
* eager (also a mixed ``[cooperative-sticky, range]`` list): ``on_revoked(all)`` before the rejoin.

Every wait is a condition with a deadline; nothing sleeps for synchronisation. The deadlines are
generous (``BOUND_S``): a wait ends as soon as what it waits for happened, so only a failing test
waits that long, and a loaded machine (the whole suite runs at a load of 20 and more on two cores)
never makes a join round, a SyncGroup or a listener call run out.
"""
from __future__ import annotations

import pytest

from groupmgr.assignors import COOPERATIVE, EAGER, TopicPartition as TP
from groupmgr.consumer_protocol import decode_subscription
from groupmgr.generation import MemberState
from groupmgr.group_errors import IllegalGeneration, StaleGenerationError
from groupmgr.member import GroupMember
from tests.support.fake_coordinator import FakeGroup, Recorder, config, coordinator_fixture, members_on

# by path: the venv may predate the cooperative-sticky entry point (same class, same protocol name)
COOP = "groupmgr.assignors.cooperative_sticky:CooperativeStickyAssignor"
T = tuple(TP("t", p) for p in range(4))
BOUND_S = 60.0

# a join round completes once every member rejoined (a silent one is dropped by the test); the
# fake's own bound only ends a round that a member never joins
fake = coordinator_fixture({"t": 4}, FakeGroup, join_wait_s=BOUND_S)


def record_revoke_generations(member: GroupMember, recorder: Recorder) -> None:
    """``recorder.revoked_in``: the member's commit generation while each on_revoked ran."""
    recorder.revoked_in = []
    recorder.hooks["revoked"] = lambda parts: recorder.revoked_in.append(member.generation.generation_id)


@pytest.fixture
def started(fake):
    with members_on(fake, prepare=record_revoke_generations, topics=("t",), assignors=(COOP,)) as start:
        yield start


def settled(fake: FakeGroup, *members: GroupMember, generation: int) -> bool:
    """Every member stable in ``generation`` (or later) and every partition owned exactly once."""
    def check() -> bool:
        if fake.rebalance_pending or any(m.state is not MemberState.STABLE for m in members):
            return False
        gens = {m.generation.generation_id for m in members}
        owned = [tp for m in members for tp in m.assignment]
        return len(gens) == 1 and min(gens) >= generation and sorted(owned) == list(T)
    return fake.wait_for(check, BOUND_S) or check()


def assigned_in(generation: int):
    """A ``Recorder.wait`` predicate: an on_assigned call in ``generation`` was recorded."""
    return lambda recorded: any(e[0] == "assigned" and e[1].generation_id == generation for e in recorded)


def events(rec: Recorder) -> list[tuple]:
    """(kind, generation id or None, partitions) per listener call."""
    with rec.cond:
        return [(e[0], e[1].generation_id, e[2]) if e[0] == "assigned" else (e[0], None, e[1])
                for e in rec.events]


def test_protocol_follows_the_configured_assignors(fake):
    def protocol(*assignors) -> str:
        return GroupMember(config(topics=("t",), assignors=assignors), Recorder(), transport=fake).protocol

    assert protocol(COOP) == COOPERATIVE
    assert protocol("range") == EAGER
    assert protocol(COOP, "range") == EAGER  # first bounce of the rolling switch: still eager
    assert protocol("sticky", COOP) == EAGER


def test_second_member_joins_first_revokes_only_what_moves_after_the_join_then_follow_up_assigns(fake, started):
    # a's rejoin after its revocation waits until b heard generation 2: else b's SyncGroup of that
    # generation could come after the follow-up round began (the coordinator then tells b to
    # rejoin, and b hears of generation 3 only), an order this test does not check
    a, rec_a = started(rebalance_timeout_ms=int(BOUND_S * 2000))  # its on_revoked may take BOUND_S
    assert a.wait_until_stable(BOUND_S) and a.assignment == T and a.protocol == COOPERATIVE
    rec_b = Recorder()
    record_generation = rec_a.hooks["revoked"]
    rec_a.hooks["revoked"] = lambda parts: (record_generation(parts), rec_b.wait(assigned_in(2), BOUND_S))
    b, _ = started(rec_b)
    assert settled(fake, a, b, generation=3)
    moved = tuple(sorted(set(T) - set(a.assignment)))
    assert len(moved) == 2 and b.assignment == moved

    # a: no on_revoked before the join; after it only the moving partitions, in generation 2, then
    # the FULL remaining assignment; the follow-up generation 3 changes nothing for a
    assert events(rec_a)[:3] == [("assigned", 1, T), ("revoked", None, moved), ("assigned", 2, a.assignment)]
    assert rec_a.revoked_in == [2]
    assert all(e[0] == "assigned" and e[2] == a.assignment for e in events(rec_a)[3:])
    # b: nothing in generation 2 (the partitions were still a's), then the moved ones; never a revoke
    assert ("assigned", 2, ()) in events(rec_b) and ("assigned", 3, moved) in events(rec_b)
    assert "revoked" not in rec_b.kinds()
    # the leader never gave a partition to one member while another still revoked it
    gen2 = fake.history[1]
    assert sorted(gen2[a.generation.member_id]) == sorted(a.assignment) and gen2[b.generation.member_id] == []
    # the rejoin after the revocation said why; a cooperative member reports what it owns
    joins = [j for j in fake.requests("JoinGroup") if j.member_id == a.generation.member_id]
    assert any(j.reason == "revoked partitions must be reassigned" for j in joins)
    owned = [decode_subscription(j.protocols[0].metadata).subscription for j in joins]
    assert owned[1].owned_partitions == T and owned[1].generation_id == 1


def test_unchanged_member_hears_no_revoke_and_commits_with_its_generation_while_rejoining(fake, started):
    a, rec_a = started()
    assert a.wait_until_stable(BOUND_S)
    fake.add_silent("ghost")  # a second member that never rejoins holds the round open
    assert fake.wait_for(lambda: len(fake.requests("JoinGroup")) >= 3, BOUND_S)
    assert a.state is MemberState.PREPARING_REBALANCE and a.assignment == T
    a.commit_offsets({TP("t", 0): 42})  # PreparingRebalance: the broker takes the current generation
    assert fake.offsets[("t", 0)] == 42 and fake.requests("OffsetCommit")[-1].generation_id_or_member_epoch == 1
    fake.drop("ghost")  # it missed the round: the round completes without it
    assert rec_a.wait(assigned_in(2), BOUND_S)
    assert events(rec_a) == [("assigned", 1, T), ("assigned", 2, T)]


def test_member_leaving_gives_its_partitions_to_the_others_without_a_revoke(fake, started):
    a, rec_a = started()
    assert a.wait_until_stable(BOUND_S)
    b, rec_b = started()
    assert settled(fake, a, b, generation=3)
    kept, theirs = a.assignment, b.assignment
    before = len(rec_a.events)
    b.close(timeout_s=5)
    assert rec_b.kinds()[-1] == "revoked" and rec_b.events[-1][1] == theirs
    assert settled(fake, a, generation=4)
    assert all(e[0] == "assigned" for e in events(rec_a)[before:])
    assert events(rec_a)[-1][2] == T and set(kept) < set(T)


def test_fenced_cooperative_member_loses_everything_as_in_eager(fake, started):
    a, rec_a = started()
    assert a.wait_until_stable(BOUND_S)
    fake.inject("Heartbeat", 22)
    assert rec_a.wait(assigned_in(2), BOUND_S)
    assert rec_a.kinds() == ["assigned", "fenced", "revoked", "assigned"]
    assert isinstance(rec_a.events[1][1], IllegalGeneration) and rec_a.events[2][1] == T


@pytest.mark.parametrize("assignors", [("range",), (COOP, "range")], ids=["range", "cooperative-sticky+range"])
def test_eager_members_revoke_everything_before_rejoining(fake, started, assignors):
    a, rec_a = started(assignors=assignors)
    assert a.wait_until_stable(BOUND_S) and a.protocol == EAGER
    b, rec_b = started(assignors=assignors)
    assert settled(fake, a, b, generation=2)
    assert events(rec_a)[:3] == [("assigned", 1, T), ("revoked", None, T), ("assigned", 2, a.assignment)]
    assert rec_a.revoked_in == [1]  # before the rejoin: the old generation is still in force
    assert fake.generation == 2 and "revoked" not in rec_b.kinds()
    assert fake.protocol == ("cooperative-sticky" if COOP in assignors else "range")
    # an eager member sends no owned partitions to a cooperative-capable assignor (Kafka: it revoked
    # them all), but keeps sending them to eager-only ones (the `sticky` assignor's stickiness)
    rejoin = [j for j in fake.requests("JoinGroup") if j.member_id == a.generation.member_id][-1]
    by_name = {p.name: decode_subscription(p.metadata).subscription for p in rejoin.protocols}
    assert by_name["range"].owned_partitions == T
    if "cooperative-sticky" in by_name:
        assert by_name["cooperative-sticky"].owned_partitions == ()


def test_eager_member_cannot_commit_while_rejoining(fake, started):
    a, rec_a = started(assignors=("range",))
    assert a.wait_until_stable(BOUND_S)
    fake.add_silent("ghost")
    assert fake.wait_for(lambda: len(fake.requests("JoinGroup")) >= 3, BOUND_S)
    with pytest.raises(StaleGenerationError):
        a.commit_offsets({TP("t", 0): 42})
    fake.drop("ghost")
    assert rec_a.wait(assigned_in(2), BOUND_S)
    assert rec_a.kinds() == ["assigned", "revoked", "assigned"]


def test_rolling_switch_eager_leader_lets_cooperative_owners_revoke_before_reassigning(fake, started):
    """Second bounce of the switch: the leader still lists [cooperative-sticky, range] (eager), the
    others only cooperative-sticky. The assignor withholds a partition a cooperative member must give
    up; the eager leader validates with the cooperative rules (as Kafka's eager leader lets it
    through), the owner revokes it and the follow-up rebalance assigns it."""
    a, rec_a = started(assignors=(COOP, "range"))
    assert a.wait_until_stable(BOUND_S) and a.protocol == EAGER
    b, rec_b = started()
    assert settled(fake, a, b, generation=2)
    c, rec_c = started()
    assert settled(fake, a, b, c, generation=3)
    d, rec_d = started()
    assert settled(fake, a, b, c, d, generation=4)
    assert fake.protocol == "cooperative-sticky" and a.is_leader
    assert all(len(m.assignment) == 1 for m in (a, b, c, d))
    for m in (a, b, c, d):
        m.raise_if_failed()
    for rec in (rec_b, rec_c, rec_d):  # cooperative members revoked only what left them
        owned: set = set()
        for kind, _, parts in events(rec):
            if kind == "revoked":
                assert set(parts) <= owned
                owned -= set(parts)
            else:
                assert owned <= set(parts)
                owned = set(parts)
    assert any(kind == "revoked" for kind, _, _ in events(rec_b))


@pytest.mark.parametrize("assignors, hurried", [((COOP,), True), (("range",), False)])
def test_after_a_cooperative_round_the_member_heartbeats_sooner_for_a_while(assignors, hurried):
    """Members that revoked nothing hear of the follow-up round (KIP-429) only in a heartbeat's
    answer: after a cooperative round they heartbeat every fifth of the interval (at least
    HURRIED_MIN_S apart) for FOLLOW_UP_WINDOW_S; eager members keep the interval."""
    from groupmgr import member_loop
    from groupmgr.generation import Generation
    from groupmgr.rebalance import RoundResult
    from tests.support.fake_clock import FakeClock

    clock = FakeClock()
    member = GroupMember(config(topics=("t",), assignors=assignors, heartbeat_interval_ms=2000,
                                session_timeout_ms=10_000),
                         Recorder(), transport=FakeGroup({"t": 4}), clock=clock)
    member._loop._install(RoundResult(Generation(3, "m-1", assignors[0]), T[:2], "m-1", False))
    timer = member._loop._timer
    expected = 0.2 * 2.0 if hurried else 2.0
    assert timer.time_to_next_heartbeat() == pytest.approx(expected)
    timer.sent()
    assert timer.time_to_next_heartbeat() == pytest.approx(expected)
    clock.advance(member_loop.FOLLOW_UP_WINDOW_S)
    timer.sent()
    assert timer.time_to_next_heartbeat() == pytest.approx(2.0)
