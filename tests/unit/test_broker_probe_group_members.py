"""BrokerProbe.group_members: which members a group has (their group.instance.id), asked again
while the coordinator answers a transient error, None when the brokers do not say; and
backlog: how far committed offsets are behind the log ends (pure unit: a scripted AdminClient,
confluent-kafka's own error type)."""
from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

from confluent_kafka import KafkaError, KafkaException

from groupmgr.core import TopicPartition
from pipelines.runtime.broker_probe import NO_OFFSET, BrokerProbe


class ScriptedAdmin:
    """Answers describe_consumer_groups from a script: the members' instance ids or a KafkaError per call."""

    def __init__(self, answers: list):
        self.answers, self.calls = list(answers), 0

    def describe_consumer_groups(self, groups, request_timeout):
        self.calls += 1
        answer, future = self.answers.pop(0), Future()
        if isinstance(answer, KafkaError):
            future.set_exception(KafkaException(answer))
        else:
            future.set_result(SimpleNamespace(members=[SimpleNamespace(group_instance_id=i) for i in answer]))
        return {groups[0]: future}


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _members(admin: ScriptedAdmin, patience_s: float = 10.0):
    clock = FakeClock()
    probe = BrokerProbe({"bootstrap.servers": "unused:9092"}, admin_factory=lambda config: admin)
    return probe.group_members("g", patience_s=patience_s, sleep=clock.sleep, clock=lambda: clock.now)


def test_the_members_are_listed_by_instance_id():
    assert _members(ScriptedAdmin([(None, "static-b", None)])) == (None, "static-b", None)
    assert _members(ScriptedAdmin([()])) == ()


def test_a_coordinator_still_loading_is_asked_again():
    admin = ScriptedAdmin([KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS),
                           KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE), (None, None)])
    assert _members(admin) == (None, None) and admin.calls == 3


def test_a_transient_error_past_the_patience_is_none():
    admin = ScriptedAdmin([KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)] * 50)
    assert _members(admin, patience_s=1.0) is None and 1 < admin.calls < 50


def test_a_group_the_brokers_do_not_know_has_no_member():
    # DescribeGroups v6+ (KIP-1043) answers GROUP_ID_NOT_FOUND where older versions answer Dead
    assert _members(ScriptedAdmin([KafkaError(KafkaError.GROUP_ID_NOT_FOUND)])) == ()


def test_a_sleep_that_says_stop_ends_the_asking():
    admin = ScriptedAdmin([KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)] * 5)
    probe = BrokerProbe({"bootstrap.servers": "unused:9092"}, admin_factory=lambda config: admin)
    assert probe.group_members("g", sleep=lambda seconds: True) is None and admin.calls == 1


def test_a_permanent_error_is_none_at_once():
    admin = ScriptedAdmin([KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), (None,)])
    assert _members(admin) is None and admin.calls == 1


def test_a_client_that_did_not_answer_is_replaced_one_that_answered_an_error_is_kept():
    admin = ScriptedAdmin([KafkaError(KafkaError._TIMED_OUT), ("static-a",),
                           KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), ("static-a",)])
    created, clock = [], FakeClock()
    probe = BrokerProbe({"bootstrap.servers": "unused:9092"},
                        admin_factory=lambda config: created.append(config) or admin)
    for _ in range(2):
        assert probe.group_members("g", sleep=clock.sleep, clock=lambda: clock.now) == ("static-a",)
    assert len(created) == 2  # the one that timed out and its replacement; the loading coordinator's is kept


class LogEndsAdmin:
    """Answers list_offsets with the given log ends."""

    def __init__(self, ends):
        self.ends = ends

    def list_offsets(self, requests, isolation_level=None, request_timeout=None):
        futures = {}
        for tp in requests:
            future = Future()
            future.set_result(SimpleNamespace(offset=self.ends[(tp.topic, tp.partition)]))
            futures[tp] = future
        return futures


def test_the_backlog_is_what_the_committed_offsets_are_behind():
    admin = LogEndsAdmin({("t", 0): 110, ("t", 1): 100, ("t", 2): 7})
    probe = BrokerProbe({"bootstrap.servers": "unused:9092"}, admin_factory=lambda config: admin)
    assert probe.backlog({TopicPartition("t", 0): 10, TopicPartition("t", 1): 95}) == 105  # 100 + 5
    assert probe.backlog({TopicPartition("t", 2): 9}) == 0  # a log end below the offset is not negative


def test_a_log_end_answered_as_no_offset_is_a_condition_never_an_offset():
    admin = LogEndsAdmin({("t", 0): 110, ("t", 1): -1001, ("t", 2): -1})
    created = []
    probe = BrokerProbe({"bootstrap.servers": "unused:9092"},
                        admin_factory=lambda config: created.append(config) or admin)
    t0, t1, t2 = (TopicPartition("t", p) for p in range(3))
    ends, errors = probe.log_ends([t0, t1, t2])
    assert ends == {t0: 110} and errors == {t1: NO_OFFSET, t2: NO_OFFSET}
    probe.log_ends([t0])
    assert len(created) == 2  # fresh metadata after the unanswered lookup


def test_by_time_minus_one_means_past_the_log_end_but_minus_1001_is_no_answer():
    admin = LogEndsAdmin({("t", 0): -1, ("t", 1): -1001})
    probe = BrokerProbe({"bootstrap.servers": "unused:9092"}, admin_factory=lambda config: admin)
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    assert probe.offsets_at([t0, t1], 1_000) == ({t0: -1}, {t1: NO_OFFSET})
