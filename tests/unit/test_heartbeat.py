"""HeartbeatTimer with a fake clock: due times, backoff and session expiry."""
from __future__ import annotations

import pytest

from groupmgr.heartbeat import HeartbeatTimer
from tests.support.fake_clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def timer(clock) -> HeartbeatTimer:
    return HeartbeatTimer(session_timeout_ms=3000, heartbeat_interval_ms=1000, retry_backoff_ms=100,
                          clock=clock)


def test_first_heartbeat_due_one_interval_after_reset(timer, clock):
    assert not timer.should_heartbeat()
    assert timer.time_to_next_heartbeat() == pytest.approx(1.0)
    clock.advance(0.999)
    assert not timer.should_heartbeat()
    clock.advance(0.001)
    assert timer.should_heartbeat()
    assert timer.time_to_next_heartbeat() == 0.0


def test_sent_schedules_next_interval(timer, clock):
    clock.advance(1.0)
    timer.sent()
    assert timer.in_flight and timer.last_sent == clock.now
    assert timer.time_to_next_heartbeat() == pytest.approx(1.0)


def test_failed_retries_after_exponential_backoff_capped_at_interval(timer, clock):
    delays = []
    for _ in range(6):
        timer.sent()
        timer.failed()
        delays.append(round(timer.time_to_next_heartbeat(), 3))
    assert not timer.in_flight
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    timer.received()
    timer.failed()
    assert timer.time_to_next_heartbeat() == pytest.approx(0.1)


def test_session_expires_without_received(timer, clock):
    clock.advance(2.9)
    assert not timer.session_expired()
    clock.advance(0.1)
    assert timer.session_expired()


def test_received_extends_session(timer, clock):
    clock.advance(2.5)
    timer.received()
    clock.advance(2.9)
    assert not timer.session_expired()
    clock.advance(0.2)
    assert timer.session_expired()
    assert timer.last_received == pytest.approx(102.5)


def test_failed_heartbeats_do_not_extend_session(timer, clock):
    for _ in range(31):
        clock.advance(0.1)
        timer.sent()
        timer.failed()
    assert timer.session_expired()


def test_reset_restarts_everything(timer, clock):
    clock.advance(20.0)
    assert timer.session_expired() and timer.should_heartbeat()
    timer.reset()
    assert not (timer.session_expired() or timer.should_heartbeat())


def test_explicit_now_overrides_clock(timer, clock):
    assert timer.should_heartbeat(now=clock.now + 1.0)
    assert not timer.should_heartbeat()


@pytest.mark.parametrize("session, interval", [(1000, 1000), (1000, 0), (0, 1), (1000, -1)])
def test_invalid_timeouts_rejected(session, interval):
    with pytest.raises(ValueError):
        HeartbeatTimer(session, interval)


def test_durations_are_kept_in_seconds(clock):
    timer = HeartbeatTimer(session_timeout_ms=3000, heartbeat_interval_ms=1000, clock=clock)
    assert (timer.session_timeout_s, timer.interval_s, timer.retry_backoff_s) == (3.0, 1.0, 0.1)
    timer.failed()                                   # the default backoff: 100 ms
    assert timer.time_to_next_heartbeat() == pytest.approx(0.1)


def test_smallest_valid_interval_is_accepted():
    timer = HeartbeatTimer(session_timeout_ms=2, heartbeat_interval_ms=1)
    assert timer.interval_s == 0.001


def test_in_flight_and_last_times_follow_the_events(timer, clock):
    assert timer.in_flight is False and timer.last_sent is None and timer.last_received is None
    for end in (timer.received, timer.failed, timer.reset):
        timer.sent()
        assert timer.in_flight is True
        end()
        assert timer.in_flight is False


def test_every_event_uses_an_explicit_now_instead_of_the_clock(timer, clock):
    later = clock.now + 50.0
    timer.sent(now=later)
    assert timer.last_sent == later and timer.time_to_next_heartbeat(now=later) == pytest.approx(1.0)
    timer.received(now=later)
    assert timer.last_received == later
    assert not timer.session_expired(now=later + 2.9) and timer.session_expired(now=later + 3.0)
    timer.failed(now=later)
    assert timer.time_to_next_heartbeat(now=later) == pytest.approx(0.1)
    timer.reset(now=later)
    assert timer.time_to_next_heartbeat(now=later) == pytest.approx(1.0)
    assert not timer.session_expired(now=later + 2.9) and timer.session_expired(now=later + 3.0)
    assert timer.should_heartbeat() is False and timer.session_expired() is False   # the clock is still at 100


def test_hurried_heartbeats_come_sooner_for_the_window_then_at_the_interval(timer, clock):
    timer.hurry(0.2, for_s=5.0)
    assert timer.time_to_next_heartbeat() == pytest.approx(0.2)
    clock.advance(0.2)
    timer.sent()
    assert timer.time_to_next_heartbeat() == pytest.approx(0.2)
    clock.advance(4.9)                        # past the window
    timer.sent()
    assert timer.time_to_next_heartbeat() == pytest.approx(1.0)


def test_hurry_never_slows_heartbeats_down(timer, clock):
    timer.hurry(5.0, for_s=60.0)
    assert timer.time_to_next_heartbeat() == pytest.approx(1.0)
    timer.sent()
    assert timer.time_to_next_heartbeat() == pytest.approx(1.0)
