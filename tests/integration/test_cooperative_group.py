"""Cooperative rebalancing (KIP-429) against a real Kafka 4.x broker: our ``cooperative-sticky``
members among themselves, in one group with librdkafka's cooperative-sticky consumers, and a group
switched from eager to cooperative by rolling restarts.

What is checked, from the listener recordings: ``on_revoked`` only ever gets partitions that leave
the member (it never gets one back in the next ``on_assigned``, and ``on_assigned`` never drops a
partition that was not revoked first), and after each settle every partition is owned exactly once.

Synchronisation is a condition polled with a deadline (``wait_until``), never a fixed sleep.
"""
from __future__ import annotations

import threading

import pytest
from confluent_kafka.admin import AdminClient

from groupmgr.assignors import COOPERATIVE, TopicPartition as TP
from groupmgr.generation import MemberState
from groupmgr.coordinator_client import KafkaTransport
from groupmgr.member import GroupMember, MemberConfig
from tests.integration.test_group_member import covers, create_topics
from tests.support.librdkafka_member import LibrdkafkaMember
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
# by path: the venv may predate the cooperative-sticky entry point (same class, same protocol name)
COOP = "groupmgr.assignors.cooperative_sticky:CooperativeStickyAssignor"
# nothing calls poll() here: the poll timer is out of the way
FAST = dict(session_timeout_ms=6000, heartbeat_interval_ms=200, rebalance_timeout_ms=15000,
            max_poll_interval_ms=3_600_000, retry_backoff_ms=50, request_timeout_ms=10000)


class Recorder:
    """Records listener calls and checks the cooperative contract as they arrive."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple] = []
        self.owned: set[TP] = set()
        self.violations: list[str] = []

    def on_revoked(self, partitions):
        with self.lock:
            self.events.append(("revoked", tuple(partitions)))
            if not set(partitions) <= self.owned:
                self.violations.append(f"revoked {partitions} not owned ({sorted(self.owned)})")
            self.owned -= set(partitions)
            self.revoked_last = set(partitions)

    def on_assigned(self, generation, partitions):
        with self.lock:
            self.events.append(("assigned", generation.generation_id, tuple(partitions)))
            if not self.owned <= set(partitions):  # cooperative: nothing leaves without on_revoked
                self.violations.append(f"assignment {partitions} dropped {sorted(self.owned - set(partitions))}")
            if set(partitions) & getattr(self, "revoked_last", set()):  # revoked only what left
                self.violations.append(f"revoked {sorted(self.revoked_last)} but got back {partitions}")
            self.revoked_last = set()
            self.owned = set(partitions)

    def on_fenced(self, error):
        with self.lock:
            self.events.append(("fenced", error))
            self.violations.append(f"fenced: {error}")

    def revoked(self) -> list[tuple]:
        with self.lock:
            return [e[1] for e in self.events if e[0] == "revoked"]


def start(bootstrap: str, group: str, topic: str, closer) -> tuple[GroupMember, Recorder]:
    recorder = Recorder()
    config = MemberConfig(bootstrap_servers=bootstrap, group_id=group, topics=(topic,), assignors=(COOP,),
                          client_id="scg-coop", **FAST)
    member = GroupMember(config, recorder).start()
    closer(lambda: member.close(timeout_s=10))
    assert member.protocol == COOPERATIVE
    return member, recorder


def settled(members, others, expected: set[TP]) -> bool:
    """Our members stable in one generation, and every partition owned exactly once overall."""
    gens = {m.generation.generation_id for m in members}
    return (all(m.state is MemberState.STABLE for m in members) and len(gens) <= 1
            and covers([m.assignment for m in members] + [o.assignment() for o in others], expected))


@pytest.fixture
def closer():
    items = []
    yield items.append
    for item in reversed(items):
        item()


def test_three_cooperative_members_join_and_leave_revoking_only_what_moves(bootstrap, unique_name, closer):
    expected = create_topics(bootstrap, {unique_name: 6})
    members, recorders = [], []
    for _ in range(3):
        member, recorder = start(bootstrap, unique_name, unique_name, closer)
        members.append(member)
        recorders.append(recorder)
        wait_until(lambda: settled(members, [], expected), 30, f"{len(members)} members to settle")
    assert sorted(len(m.assignment) for m in members) == [2, 2, 2]
    # the first member gave up 3 of 6 when the second joined, then 1 when the third joined
    assert [len(r) for r in recorders[0].revoked()] == [3, 1]
    assert not recorders[2].revoked()  # the newest member only ever gained partitions

    before = {i: set(members[i].assignment) for i in (0, 2)}
    counts = {i: len(recorders[i].revoked()) for i in (0, 2)}
    members[1].close(timeout_s=10)
    wait_until(lambda: settled([members[0], members[2]], [], expected), 30, "two members to settle")
    for i in (0, 2):  # a leaving member's partitions are added; the others' are never revoked
        assert len(recorders[i].revoked()) == counts[i] and before[i] <= set(members[i].assignment)
    assert set(recorders[1].revoked()[-1]) == set(members[1].assignment or recorders[1].events[-2][2])
    for recorder in recorders:
        assert recorder.violations == []


class WatchedTransport(KafkaTransport):
    """A member's real connection to the brokers, with events around its requests: ``join_sent``
    when a JoinGroup goes out, ``join_answered`` when its answer is back; while ``heartbeats`` is
    clear, a heartbeat waits for it (a member slow to notice a rebalance, bounded)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.join_sent, self.join_answered, self.heartbeats = threading.Event(), threading.Event(), threading.Event()
        self.heartbeats.set()

    def send(self, request, node_id, timeout_s):
        if request.name == "HeartbeatRequest":
            self.heartbeats.wait(60)
        if request.name == "JoinGroupRequest":
            self.join_sent.set()
        try:
            return super().send(request, node_id, timeout_s)
        finally:
            if request.name == "JoinGroupRequest":
                self.join_answered.set()


def start_watched(bootstrap: str, group: str, topic: str, closer, **settings) -> tuple[GroupMember, WatchedTransport]:
    config = MemberConfig(bootstrap_servers=bootstrap, group_id=group, topics=(topic,), assignors=(COOP,),
                          client_id="scg-coop", **{**FAST, **settings})
    transport = WatchedTransport(config.bootstrap_servers, config.client_id, config.client_kwargs)
    member = GroupMember(config, Recorder(), transport=transport,
                         offsets_transport=KafkaTransport(config.bootstrap_servers, config.client_id,
                                                          config.client_kwargs)).start()
    closer(lambda: member.close(timeout_s=10))
    return member, transport


def test_offsets_are_committed_while_the_member_waits_in_a_rebalance(bootstrap, unique_name, closer):
    """A member's offset commits do not queue behind its own pending JoinGroup: a broker answers one
    connection's requests in order, and a JoinGroup only once every member has rejoined. Here one
    member is slow to notice the rebalance (its heartbeats are held), so the other's JoinGroup
    stays unanswered; commits made meanwhile are stored at once with the current generation (the
    group is preparing the rebalance). On one shared connection they would wait for the slow member,
    then be refused for their generation."""
    expected = create_topics(bootstrap, {unique_name: 4})
    member, watched = start_watched(bootstrap, unique_name, unique_name, closer)
    slow, slow_transport = start_watched(bootstrap, unique_name, unique_name, closer,
                                         session_timeout_ms=45000, rebalance_timeout_ms=60000)
    wait_until(lambda: settled([member, slow], [], expected), 30, "two members to settle")
    slow_transport.heartbeats.clear()             # the slow member will not hear of the next rebalance
    watched.join_sent.clear()
    watched.join_answered.clear()
    try:
        third, _ = start(bootstrap, unique_name, unique_name, closer)  # a third member joins
        assert watched.join_sent.wait(30), "the member did not rejoin"
        results: list[str] = []

        def commit_three():
            for offset in (1, 2, 3):
                member.commit_offsets({tp: offset for tp in member.assignment}, "while rejoining")
                results.append("answered during the rebalance" if not watched.join_answered.is_set() else "late")

        committer = threading.Thread(target=commit_three, daemon=True)
        committer.start()
        committer.join(20)
        assert results == ["answered during the rebalance"] * 3
        assert not watched.join_answered.is_set()   # the rebalance still waited for the slow member
    finally:
        slow_transport.heartbeats.set()
    wait_until(lambda: settled([member, slow, third], [], expected), 60, "three members to settle")


@pytest.mark.parametrize("leader", ["ours", "librdkafka"])
def test_interop_with_librdkafka_cooperative_sticky_consumers(bootstrap, unique_name, closer, leader):
    expected = create_topics(bootstrap, {unique_name: 8})
    ours, recorders, cks = [], [], []

    def start_ours():
        for _ in range(2):
            member, recorder = start(bootstrap, unique_name, unique_name, closer)
            ours.append(member)
            recorders.append(recorder)

    def start_cks():
        for name in ("ck1", "ck2"):
            ck = LibrdkafkaMember(bootstrap, unique_name, unique_name, "cooperative-sticky", name)
            closer(ck.close)
            cks.append(ck)

    first, second = (start_ours, start_cks) if leader == "ours" else (start_cks, start_ours)
    first()
    wait_until(lambda: settled(ours, cks, expected), 30, "the first two members to settle")
    second()
    wait_until(lambda: settled(ours, cks, expected) and all(ck.assignment() for ck in cks)
               and all(m.assignment for m in ours), 45, "mixed cooperative group to settle")
    assert all(len(m.assignment) == 2 for m in ours) and all(len(ck.assignment()) == 2 for ck in cks)
    # the leader ran cooperative-sticky over both clients' subscriptions (owned partitions included)
    assert (ours[0].is_leader or ours[1].is_leader) == (leader == "ours")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.describe_consumer_groups([unique_name])[unique_name].result(30).partition_assignor \
        == "cooperative-sticky"

    before = [set(m.assignment) for m in ours]
    revoked_before = [len(r.revoked()) for r in recorders]
    ck_revokes = len(cks[0].revokes)
    leaving = cks.pop()
    leaving.close()
    wait_until(lambda: settled(ours, cks, expected) and sum(len(m.assignment) for m in ours) > 4, 45,
               "the remaining members to take the leaver's partitions")
    for member, recorder, had, count in zip(ours, recorders, before, revoked_before):
        assert had <= set(member.assignment)  # unchanged partitions stayed, no eager revoke
        assert len(recorder.revoked()) == count
        assert recorder.violations == []
    assert all(not r for r in cks[0].revokes[ck_revokes:])  # nor was librdkafka's


class Holders:
    """Who holds each partition, kept from every member's listener calls. A member's callbacks run
    before it rejoins, so a partition handed over is revoked by its holder before any other member
    is given it; ``violations`` records each partition given to one member while another held it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holder: dict[TP, str] = {}
        self.revoked: dict[str, list[set[TP]]] = {}
        self.violations: list[str] = []

    def listener(self, name: str):
        holders = self

        class Listener:
            def on_revoked(self, partitions):
                with holders.lock:
                    holders.revoked.setdefault(name, []).append(set(partitions))
                    for tp in partitions:
                        if holders.holder.get(tp) == name:
                            del holders.holder[tp]

            def on_assigned(self, generation, partitions):
                with holders.lock:
                    for tp in partitions:
                        other = holders.holder.setdefault(tp, name)
                        if other != name:
                            holders.violations.append(f"{tp} given to {name} (generation "
                                                      f"{generation.generation_id}) while {other} held it")

            def on_fenced(self, error):
                with holders.lock:
                    holders.violations.append(f"{name} fenced: {error}")

        return Listener()


def test_a_rolling_switch_from_eager_to_cooperative_never_gives_a_partition_two_holders(bootstrap, unique_name,
                                                                                       closer):
    """The upgrade Kafka documents for KIP-429: three members with ``[range]`` are restarted one at a
    time with ``[cooperative-sticky, range]`` (still eager: every member lists ``range``), then one at
    a time with ``[cooperative-sticky]`` alone. After every restart the group settles with each
    partition held once, and at no moment is a partition held by two members. At the end the group
    runs cooperative-sticky and a member that joins takes partitions that are revoked from their
    holders, nothing else."""
    expected = create_topics(bootstrap, {unique_name: 6})
    holders = Holders()
    members: dict[str, GroupMember] = {}

    def launch(name: str, assignors: tuple[str, ...]) -> None:
        config = MemberConfig(bootstrap_servers=bootstrap, group_id=unique_name, topics=(unique_name,),
                              assignors=assignors, client_id=f"scg-{name}", **FAST)
        member = GroupMember(config, holders.listener(name)).start()
        closer(lambda: member.close(timeout_s=10))
        members[name] = member
        wait_until(lambda: settled(list(members.values()), [], expected), 45,
                   f"the group to settle after {name} started with {list(assignors)}")

    def group_assignor() -> str:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        return admin.describe_consumer_groups([unique_name])[unique_name].result(30).partition_assignor

    for name in ("a", "b", "c"):
        launch(name, ("range",))
    assert group_assignor() == "range"
    for assignors in ((COOP, "range"), (COOP,)):
        # the leader last (the broker keeps a leader that rejoins): while it is still eager, members
        # back with [cooperative-sticky] report what they own, and one that must give a partition up
        # gets an assignment without it, which the eager leader validates with the cooperative rules
        leader = next(name for name, m in members.items() if m.is_leader)
        for name in sorted(members, key=lambda n: n == leader):
            members.pop(name).close(timeout_s=10)
            # the others take its partitions before it is back, so its return moves partitions
            wait_until(lambda: settled(list(members.values()), [], expected), 45, f"the group without {name}")
            launch(name, assignors)
            if name != leader:
                assert members[leader].is_leader and members[leader].protocol != COOPERATIVE
    assert holders.violations == []
    assert all(m.protocol == COOPERATIVE for m in members.values())
    assert group_assignor() == "cooperative-sticky"

    before = {name: set(m.assignment) for name, m in members.items()}
    revokes = {name: len(holders.revoked.get(name, [])) for name in before}
    launch("d", (COOP,))
    for name, had in before.items():  # each old member was revoked exactly what it gave the new one
        now = set(members[name].assignment)
        given_up = set().union(*holders.revoked.get(name, [])[revokes[name]:])
        assert now <= had and given_up == had - now, (name, had, now, given_up)
    assert set(members["d"].assignment) == set().union(*before.values()) - set().union(
        *(set(members[n].assignment) for n in before))
    assert holders.violations == []
