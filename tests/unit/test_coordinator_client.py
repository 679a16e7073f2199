"""CoordinatorClient retry/rediscovery bounds, and KafkaTransport's bounded waits (no broker needed)."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from groupmgr.coordinator_client import CoordinatorClient, KafkaTransport
from groupmgr.group_errors import CoordinatorUnreachable, GroupAuthorizationFailed, MemberClosedError, NotCoordinator
from groupmgr.generation import MemberState
from groupmgr.member import GroupMember, MemberConfig
from tests.unit.fake_coordinator import FakeCoordinator, Recorder


def test_retrying_gives_up_at_deadline_with_last_error():
    client = CoordinatorClient(FakeCoordinator({}), "g", retry_backoff_ms=10, retry_backoff_max_ms=20)
    calls = []

    def attempt():
        calls.append(time.monotonic())
        raise NotCoordinator("x")

    start = time.monotonic()
    with pytest.raises(NotCoordinator):
        client.retrying(attempt, deadline=start + 0.3)
    assert 0.25 <= time.monotonic() - start < 1.0 and len(calls) > 5


def test_retrying_does_not_retry_fatal_errors():
    client = CoordinatorClient(FakeCoordinator({}), "g")
    calls = []

    def attempt():
        calls.append(1)
        raise GroupAuthorizationFailed("no")

    with pytest.raises(GroupAuthorizationFailed):
        client.retrying(attempt, deadline=time.monotonic() + 5)
    assert calls == [1]


def test_close_interrupts_retries():
    client = CoordinatorClient(FakeCoordinator({}), "g", retry_backoff_ms=2000, retry_backoff_max_ms=2000)
    threading.Timer(0.2, client.close).start()
    start = time.monotonic()
    with pytest.raises(MemberClosedError):
        client.retrying(lambda: (_ for _ in ()).throw(CoordinatorUnreachable("x")), deadline=start + 30)
    assert time.monotonic() - start < 1.5


def test_rediscovers_after_not_coordinator():
    fake = FakeCoordinator({})
    client = CoordinatorClient(fake, "g", retry_backoff_ms=1)
    assert client.ensure_coordinator(time.monotonic() + 1) == "coordinator-1"
    client.mark_coordinator_dead("coordinator-2", NotCoordinator("other node"))  # not ours: ignored
    assert client.coordinator_id == "coordinator-1"
    client.mark_coordinator_dead(None, NotCoordinator("x"))
    fake.move_coordinator(3)
    assert client.ensure_coordinator(time.monotonic() + 1) == "coordinator-3"


@pytest.fixture
def black_hole():
    """A TCP port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_transport_bootstrap_is_bounded(black_hole):
    transport = KafkaTransport(black_hole, "t", {"request_timeout_ms": 500})
    start = time.monotonic()
    with pytest.raises(CoordinatorUnreachable):
        transport.start(1.0)
    assert time.monotonic() - start < 5
    transport.close()


def test_transport_close_wakes_waiting_caller(black_hole):
    transport = KafkaTransport(black_hole, "t")
    errors = []
    worker = threading.Thread(target=lambda: errors.append(pytest.raises(CoordinatorUnreachable, transport.start, 60)))
    worker.start()
    deadline = time.monotonic() + 5
    while not transport._waiters and time.monotonic() < deadline:  # the worker is blocked in start()
        time.sleep(0.01)
    assert transport._waiters
    start = time.monotonic()
    transport.close()
    worker.join(10)
    assert not worker.is_alive() and time.monotonic() - start < 10 and errors


def test_member_close_is_bounded_while_broker_never_answers(black_hole):
    config = MemberConfig(bootstrap_servers=black_hole, group_id="g", topics=("t",), request_timeout_ms=30000)
    member = GroupMember(config, Recorder()).start()
    start = time.monotonic()
    member.close(timeout_s=4)
    assert time.monotonic() - start < 5 and member.state is MemberState.CLOSED
