"""GroupMember against a real Kafka 4.x broker: membership, static members, interop, tooling, failover.

Synchronisation is always a condition polled with a deadline (``wait_until``), never a fixed sleep.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from groupmgr.assignors import TopicPartition as TP
from groupmgr.coordinator_client import CoordinatorClient, KafkaTransport
from groupmgr.group_errors import GroupError, MemberClosedError, StaleGenerationError
from groupmgr.generation import Generation, MemberState
from groupmgr.member import GroupMember, MemberConfig
from groupmgr.offsets import OffsetAndMetadata, commit_offsets
from pipelines.local.local_kafka import LocalKafka
from pipelines.runtime.install_paths import jars_dir
from tests.support.librdkafka_member import LibrdkafkaMember
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
# these members have no application loop calling poll(): the poll timer is out of the way
FAST = dict(session_timeout_ms=2500, heartbeat_interval_ms=200, rebalance_timeout_ms=15000,
            max_poll_interval_ms=3_600_000, retry_backoff_ms=50, request_timeout_ms=10000)


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple] = []

    def on_revoked(self, partitions):
        with self.lock:
            self.events.append(("revoked", partitions))

    def on_assigned(self, generation, partitions):
        with self.lock:
            self.events.append(("assigned", generation, partitions))

    def on_fenced(self, error):
        with self.lock:
            self.events.append(("fenced", error))

    def count(self, kind: str) -> int:
        with self.lock:
            return sum(1 for e in self.events if e[0] == kind)


def create_topics(bootstrap: str, topics: dict[str, int], replication: int = 1) -> set[TP]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, n, replication) for t, n in topics.items()]).values():
        future.result(30)
    return {TP(t, p) for t, n in topics.items() for p in range(n)}


def start_member(bootstrap, group, topics, assignor="range", instance=None, **overrides):
    recorder = Recorder()
    config = MemberConfig(bootstrap_servers=bootstrap, group_id=group, topics=tuple(topics),
                          assignors=(assignor,), group_instance_id=instance, client_id=f"scg-{instance or 'dyn'}",
                          **{**FAST, **overrides})
    return GroupMember(config, recorder).start(), recorder


def covers(assignments, expected: set[TP]) -> bool:
    """Every expected partition owned exactly once across ``assignments``."""
    flat = [tp for parts in assignments for tp in parts]
    return len(flat) == len(set(flat)) and set(flat) == expected


def settled(members, expected: set[TP]) -> bool:
    gens = {m.generation.generation_id for m in members}
    return (all(m.state is MemberState.STABLE for m in members) and len(gens) == 1
            and covers([m.assignment for m in members], expected))


@pytest.fixture
def closer():
    items = []
    yield items.append
    for item in reversed(items):
        item()


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_static_members_survive_crash_and_return(bootstrap, unique_name, closer, assignor):
    expected = create_topics(bootstrap, {f"{unique_name}-a": 6, f"{unique_name}-b": 3})
    topics = sorted({tp.topic for tp in expected})
    members = {}
    for name in ("a", "b", "c"):
        members[name] = start_member(bootstrap, unique_name, topics, assignor, instance=name)
        closer(lambda m=members[name][0]: m.close(timeout_s=10))
        assert members[name][0].wait_until_stable(30)
    a, b, c = (members[n][0] for n in "abc")
    wait_until(lambda: settled([a, b, c], expected), 30, "three members to settle")
    before = {n: members[n][0].assignment for n in "abc"}
    assert all(before.values())

    c._abandon()  # no LeaveGroup: the broker notices only after the session timeout
    gen = a.generation.generation_id
    wait_until(lambda: a.generation.generation_id > gen and settled([a, b], expected), 30, "a and b to own all")

    c2, _ = start_member(bootstrap, unique_name, topics, assignor, instance="c")
    closer(lambda: c2.close(timeout_s=10))
    wait_until(lambda: settled([a, b, c2], expected), 30, "c to come back")
    assert {"a": a.assignment, "b": b.assignment, "c": c2.assignment} == before

    # A bounce within the session timeout: the static member takes its place back, no rebalance.
    stable_gen = a.generation
    revoked = (members["a"][1].count("revoked"), members["b"][1].count("revoked"))
    c2._abandon()
    c3, _ = start_member(bootstrap, unique_name, topics, assignor, instance="c")
    closer(lambda: c3.close(timeout_s=10))
    assert c3.wait_until_stable(30)
    assert c3.generation.generation_id == stable_gen.generation_id and c3.assignment == before["c"]
    assert a.generation == stable_gen and b.generation.generation_id == stable_gen.generation_id
    assert (members["a"][1].count("revoked"), members["b"][1].count("revoked")) == revoked


@pytest.mark.parametrize("leader", ["ours", "librdkafka"])
def test_interop_with_librdkafka_range_member(bootstrap, unique_name, closer, leader):
    expected = create_topics(bootstrap, {unique_name: 5})
    ours = None
    if leader == "ours":
        ours, _ = start_member(bootstrap, unique_name, [unique_name])
        closer(lambda: ours.close(timeout_s=10))
        assert ours.wait_until_stable(30)
    ck = LibrdkafkaMember(bootstrap, unique_name, unique_name, "range")
    closer(ck.close)
    if leader == "librdkafka":
        wait_until(lambda: ck.assignment() == expected, 30, "librdkafka to own all")
        ours, _ = start_member(bootstrap, unique_name, [unique_name])
        closer(lambda: ours.close(timeout_s=10))
    wait_until(lambda: ours.state is MemberState.STABLE and ck.assignment()
               and covers([ours.assignment, ck.assignment()], expected), 45, "mixed group to settle")
    assert ours.assignment and ours.is_leader == (leader == "ours")
    if leader == "ours":  # we decoded librdkafka's ConsumerProtocol subscription
        subs = ours.group_subscriptions
        theirs = [s for m, s in subs.items() if m != ours.generation.member_id]
        assert len(subs) == 2 and theirs[0].topics == (unique_name,)


def produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        for i in range(count):
            producer.produce(topic, value=b"x%d" % i, partition=p)
    assert producer.flush(30) == 0


def kafka_consumer_groups_describe(bootstrap: str, group: str) -> dict[tuple[str, str], list[str]]:
    """Rows of Kafka's own ``kafka-consumer-groups --describe``, keyed by (topic, partition)."""
    out = subprocess.run(["java", "-cp", f"{jars_dir() / 'broker'}/*",
                          "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                          "--bootstrap-server", bootstrap, "--describe", "--group", group],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {tuple(line.split()[1:3]): line.split() for line in out.stdout.splitlines() if group in line}


def test_kafka_tools_see_members_assignments_and_offsets(bootstrap, unique_name, closer):
    from groupmgr.describe import describe_group, format_table, to_json

    expected = create_topics(bootstrap, {unique_name: 4})
    produce(bootstrap, unique_name, 4, 10)
    m1, _ = start_member(bootstrap, unique_name, [unique_name], instance="inst-1")
    closer(lambda: m1.close(timeout_s=10))
    assert m1.wait_until_stable(30)
    m2, _ = start_member(bootstrap, unique_name, [unique_name])
    closer(lambda: m2.close(timeout_s=10))
    wait_until(lambda: settled([m1, m2], expected), 30, "two members to settle")
    committed = {tp: 3 + tp.partition for tp in m1.assignment} | {tp: 7 for tp in m2.assignment}
    m1.commit_offsets({tp: o for tp, o in committed.items() if tp in m1.assignment})
    m2.commit_offsets({tp: o for tp, o in committed.items() if tp in m2.assignment})

    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([unique_name])[unique_name].result(30)
    seen = {m.member_id: ({TP(t.topic, t.partition) for t in m.assignment.topic_partitions}, m.group_instance_id)
            for m in desc.members}
    assert seen == {m1.generation.member_id: (set(m1.assignment), "inst-1"),
                    m2.generation.member_id: (set(m2.assignment), None)}
    assert desc.partition_assignor == "range" and not desc.is_simple_consumer_group

    ours = describe_group(bootstrap, unique_name)
    assert ours.protocol_type == "consumer" and ours.protocol == "range" and ours.state == "STABLE"
    assert {(p.topic, p.partition): (p.committed, p.log_end, p.lag) for p in ours.partitions} == {
        (tp.topic, tp.partition): (o, 10, 10 - o) for tp, o in committed.items()}
    assert m1.generation.member_id in format_table(ours) and to_json(ours)["members"]

    rows = kafka_consumer_groups_describe(bootstrap, unique_name)
    for tp, offset in committed.items():
        row = rows[(tp.topic, str(tp.partition))]
        owner = m1 if tp in m1.assignment else m2
        assert row[3] == str(offset) and owner.generation.member_id in row


def test_commit_with_stale_generation_is_rejected(bootstrap, unique_name, closer):
    expected = create_topics(bootstrap, {unique_name: 2})
    m1, _ = start_member(bootstrap, unique_name, [unique_name])
    closer(lambda: m1.close(timeout_s=10))
    assert m1.wait_until_stable(30)
    old = m1.generation
    m2, _ = start_member(bootstrap, unique_name, [unique_name])
    closer(lambda: m2.close(timeout_s=10))
    wait_until(lambda: settled([m1, m2], expected), 30, "second generation")
    client = CoordinatorClient(KafkaTransport(bootstrap, "stale-test"), unique_name)
    closer(client.close)
    client.transport.start(10)
    offsets = {TP(unique_name, 0): OffsetAndMetadata(1)}
    with pytest.raises(StaleGenerationError) as info:
        commit_offsets(client, unique_name, old, None, offsets, timeout_s=10)
    assert info.value.cause.condition == "ILLEGAL_GENERATION" and info.value.fenced
    stranger = Generation(m1.generation.generation_id, "not-a-member", "range")
    with pytest.raises(StaleGenerationError) as info:
        commit_offsets(client, unique_name, stranger, None, offsets, timeout_s=10)
    assert info.value.cause.condition == "UNKNOWN_MEMBER_ID"
    assert m1.committed([TP(unique_name, 0)]) == {}


def test_pattern_members_pick_up_a_new_matching_topic(bootstrap, unique_name, closer):
    expected = create_topics(bootstrap, {f"{unique_name}-a": 3, f"{unique_name}-other": 1})
    expected = {tp for tp in expected if tp.topic.endswith("-a")}
    members = []
    for _ in range(2):
        config = MemberConfig(bootstrap_servers=bootstrap, group_id=unique_name, topic_pattern=f"{unique_name}-[ab]",
                              assignors=("range",), metadata_max_age_ms=500, **FAST)
        member = GroupMember(config, Recorder()).start()
        closer(lambda m=member: m.close(timeout_s=10))
        members.append(member)
    wait_until(lambda: settled(members, expected), 30, "both members on the one matching topic")
    assert all(m.topics == (f"{unique_name}-a",) for m in members)
    expected |= create_topics(bootstrap, {f"{unique_name}-b": 2})
    wait_until(lambda: settled(members, expected), 30, "the new matching topic shared out")
    assert all(m.topics == (f"{unique_name}-a", f"{unique_name}-b") for m in members)


def test_member_survives_coordinator_crash(tmp_path, closer):
    cluster = LocalKafka(tmp_path)
    state = cluster.start(brokers=3)
    closer(cluster.stop)
    bootstrap, group, topic = state.bootstrap_servers, f"g-{uuid.uuid4().hex[:6]}", "failover"
    expected = create_topics(bootstrap, {topic: 3}, replication=3)
    member, recorder = start_member(bootstrap, group, [topic], session_timeout_ms=6000, heartbeat_interval_ms=500)
    closer(lambda: member.close(timeout_s=10))
    assert member.wait_until_stable(60) and set(member.assignment) == expected
    member.commit_offsets({TP(topic, 0): 5})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    node_id = admin.describe_consumer_groups([group])[group].result(30).coordinator.id
    victim = next(n for n in state.nodes if n.node_id == node_id)
    os.killpg(victim.pid, signal.SIGKILL)

    def committed_after_failover() -> bool:
        try:
            member.commit_offsets({TP(topic, 0): 9}, timeout_s=5)
        except GroupError as exc:  # stale while rejoining, or no coordinator yet: try again
            assert isinstance(exc, StaleGenerationError) or exc.retriable, exc
            return False
        return member.state is MemberState.STABLE

    wait_until(committed_after_failover, 90, "a commit through the new coordinator")
    member.raise_if_failed()
    assert set(member.assignment) == expected
    assert member.committed([TP(topic, 0)])[TP(topic, 0)].offset == 9
    new_coordinator = admin.describe_consumer_groups([group])[group].result(30).coordinator.id
    assert new_coordinator != node_id


def test_describe_shows_each_commit_s_metadata_exactly(bootstrap, unique_name, closer):
    """The metadata a member commits (``delta:<version>``, a stopped partition's condition) reads
    back byte for byte: librdkafka hands confluent-kafka metadata without a terminating NUL, which
    confluent-kafka reads as a C string (trailing heap bytes, or UnicodeDecodeError)."""
    from groupmgr.describe import describe_group

    expected = create_topics(bootstrap, {unique_name: 8})
    member, _ = start_member(bootstrap, unique_name, [unique_name])
    closer(lambda: member.close(timeout_s=10))
    wait_until(lambda: settled([member], expected), 30, "the member to own every partition")
    written = {tp: OffsetAndMetadata(1 + tp.partition, "delta:" + "7" * (1 + tp.partition)) for tp in expected}
    written[TP(unique_name, 0)] = OffsetAndMetadata(1, "stopped:POISON_PILL: record 0 ü")
    member.commit_offsets(written)
    want = {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in written.items()}
    for _ in range(40):
        seen = {(p.topic, p.partition): (p.committed, p.metadata) for p in describe_group(bootstrap, unique_name).partitions}
        assert seen == want


def test_a_member_reads_its_group_s_offsets_before_it_joins(bootstrap, unique_name, closer):
    """``group_offsets`` (the backlog a member judges before joining): every partition's committed
    offset, whoever committed it, metadata exact, from a member that has not started; refused once
    it is closed."""
    expected = create_topics(bootstrap, {unique_name: 3})
    member, _ = start_member(bootstrap, unique_name, [unique_name])
    closer(lambda: member.close(timeout_s=10))
    wait_until(lambda: settled([member], expected), 30, "the member to own every partition")
    written = {tp: OffsetAndMetadata(5 + tp.partition, "delta:" + "9" * (1 + tp.partition)) for tp in expected}
    member.commit_offsets(written)
    config = MemberConfig(bootstrap_servers=bootstrap, group_id=unique_name, topics=(unique_name,), **FAST)
    joining = GroupMember(config, Recorder())
    closer(lambda: joining.close(timeout_s=10))
    assert joining.group_offsets(10.0) == written
    joining.close(timeout_s=10)
    with pytest.raises(MemberClosedError):
        joining.group_offsets(10.0)
