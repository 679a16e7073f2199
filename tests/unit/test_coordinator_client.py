"""CoordinatorClient retry/rediscovery bounds, and KafkaTransport's bounded waits (no broker needed).

No assertion reads the wall clock: deadlines run on an injected clock, and "it does not hang" is an
unbounded wait (a huge backoff or request timeout) that only the per-test timeout would end."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from groupmgr.coordinator_client import CoordinatorClient, KafkaTransport, LazilyStartedClient
from groupmgr.group_errors import CoordinatorUnreachable, GroupAuthorizationFailed, MemberClosedError, NotCoordinator
from groupmgr.generation import MemberState
from groupmgr.member import GroupMember, MemberConfig
from tests.support.fake_coordinator import FakeCoordinator, Recorder
from tests.support.waiting import wait_until


class StepClock:
    """An injected clock that only moves when the test moves it."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_retrying_gives_up_at_deadline_with_last_error():
    clock = StepClock()
    client = CoordinatorClient(FakeCoordinator({}), "g", retry_backoff_ms=10, retry_backoff_max_ms=20, clock=clock)
    calls = []

    def attempt():
        calls.append(clock.now)
        clock.now += 0.1                 # each attempt takes 100 ms of the injected clock
        raise NotCoordinator(f"attempt {len(calls)}")

    with pytest.raises(NotCoordinator) as raised:
        client.retrying(attempt, deadline=clock.now + 0.3)
    # attempts at 0, 0.1 and 0.2 s; after the third the next backoff (~40 ms) would pass the deadline
    assert calls == pytest.approx([100.0, 100.1, 100.2]) and str(raised.value).endswith("attempt 3")


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
    """The backoff is an hour: only close() can end the wait (else the per-test timeout fails it)."""
    client = CoordinatorClient(FakeCoordinator({}), "g", retry_backoff_ms=3_600_000, retry_backoff_max_ms=3_600_000)
    attempts = []
    first_attempt = threading.Event()

    def attempt():
        attempts.append(1)
        first_attempt.set()
        raise CoordinatorUnreachable("x")

    closer = threading.Thread(target=lambda: first_attempt.wait(30) and client.close(), daemon=True)
    closer.start()
    with pytest.raises(MemberClosedError):
        client.retrying(attempt, deadline=float("inf"))
    closer.join(30)
    assert attempts == [1]


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
    """A broker that never answers: start() gives up (its own bound) instead of waiting forever."""
    transport = KafkaTransport(black_hole, "t", {"request_timeout_ms": 500})
    with pytest.raises(CoordinatorUnreachable):
        transport.start(1.0)
    transport.close()


def test_transport_close_wakes_waiting_caller(black_hole):
    transport = KafkaTransport(black_hole, "t")
    errors = []
    worker = threading.Thread(target=lambda: errors.append(pytest.raises(CoordinatorUnreachable, transport.start, 3600)),
                              daemon=True)
    worker.start()
    wait_until(lambda: transport._waiters, 30, "the worker to block in start() (an hour's wait)", poll_s=0.01)
    transport.close()
    worker.join(30)                # only close() can wake it before the hour is up
    assert not worker.is_alive()
    assert errors


def test_member_close_is_bounded_while_broker_never_answers(black_hole):
    """The member thread is blocked on a broker that never answers (request timeout: an hour);
    close() still ends it (after half its bound it closes the client, which wakes the thread)."""
    config = MemberConfig(bootstrap_servers=black_hole, group_id="g", topics=("t",), request_timeout_ms=3_600_000)
    member = GroupMember(config, Recorder()).start()
    member.close(timeout_s=4)
    member._thread.join(30)        # without the wake-up this would be the hour
    assert not member._thread.is_alive()
    assert member.state is MemberState.CLOSED


class SlowToStart(FakeCoordinator):
    """A transport whose start waits for the test (``opened``), or for close()."""

    def __init__(self) -> None:
        super().__init__({})
        self.opened, self.starting, self.starts = threading.Event(), threading.Event(), 0
        self._woken = threading.Event()

    def start(self, timeout_s: float) -> None:
        self.starts += 1
        self.starting.set()
        self.opened.wait(3600)
        if self._woken.is_set():
            raise CoordinatorUnreachable("transport closed")

    def close(self) -> None:
        super().close()
        self._woken.set()
        self.opened.set()


def test_a_lazily_started_client_is_started_once_by_whoever_needs_it_first():
    transport = SlowToStart()
    lazy = LazilyStartedClient(CoordinatorClient(transport, "g"))
    got: list = []
    first = threading.Thread(target=lambda: got.append(lazy.get(60)))
    first.start()
    assert transport.starting.wait(10)
    second = threading.Thread(target=lambda: got.append(lazy.get(60)))  # waits for the first start
    second.start()
    transport.opened.set()
    first.join(10)
    second.join(10)
    assert got == [lazy.client, lazy.client] and transport.starts == 1


def test_closing_a_lazily_started_client_ends_a_start_in_progress():
    transport = SlowToStart()
    lazy = LazilyStartedClient(CoordinatorClient(transport, "g"))
    errors: list = []

    def get():
        try:
            lazy.get(3600)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    worker = threading.Thread(target=get)
    worker.start()
    assert transport.starting.wait(10)
    lazy.close()                      # only close() can end the start before the hour is up
    worker.join(30)
    assert not worker.is_alive()
    assert [type(e) for e in errors] == [MemberClosedError]
    with pytest.raises(MemberClosedError):
        lazy.get(1)


def test_a_lazily_started_client_never_started_is_not_closed():
    transport = SlowToStart()
    lazy = LazilyStartedClient(CoordinatorClient(transport, "g"))
    lazy.close()
    assert transport.starts == 0 and not transport.closed


class FailsToStart(FakeCoordinator):
    """A transport whose start fails (after its IO thread would have started)."""

    def start(self, timeout_s: float) -> None:
        raise CoordinatorUnreachable("bootstrap failed")


def test_a_lazily_started_client_whose_start_failed_is_closed():
    transport = FailsToStart({})
    lazy = LazilyStartedClient(CoordinatorClient(transport, "g", retry_backoff_ms=1, retry_backoff_max_ms=1))
    with pytest.raises(CoordinatorUnreachable):
        lazy.get(0.05)
    lazy.close()
    assert transport.closed


def test_finding_the_coordinator_waits_no_longer_than_its_deadline():
    """A request timeout of an hour does not let FindCoordinator outlive the caller's deadline
    (e.g. group_offsets' 10 s while a member warms up)."""
    clock, transport = StepClock(), FakeCoordinator({})
    client = CoordinatorClient(transport, "g", request_timeout_ms=3_600_000, clock=clock)
    client.ensure_coordinator(clock.now + 2.5)
    assert [t for name, t in transport.timeouts if name == "FindCoordinatorRequest"] == [2.5]
