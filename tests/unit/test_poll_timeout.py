"""Kafka's ``max.poll.interval.ms`` in groupmgr: the poll timer, and a member that leaves the group when
the application stops calling ``GroupMember.poll()`` and rejoins at the next one.

Three levels: ``HeartbeatTimer`` on a fake clock; the member loop stepped by hand on a fake clock
(exact timing, and "nothing happens while parked" checked step by step, without waiting); and
members on their own thread against the scripted ``FakeCoordinator`` with small real intervals.
Every wait is an event or condition with a deadline; nothing sleeps for synchronisation.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from groupmgr.assignors import TopicPartition as TP
from groupmgr.generation import NO_GENERATION, MemberState
from groupmgr.group_errors import GroupError, IllegalGeneration, PollTimeoutExpired, StaleGenerationError
from groupmgr.heartbeat import HeartbeatTimer
from groupmgr.member import GroupMember, MemberConfig
from tests.support.fake_clock import FakeClock
from tests.support.fake_coordinator import WAIT, FakeCoordinator, Recorder, config, coordinator_fixture, members_on

ALL = (TP("t", 0), TP("t", 1), TP("t", 2), TP("u", 0))
POLL_MS = 200  # threaded members: heartbeat 20 ms, session 600 ms (config())


# -- the poll timer ------------------------------------------------------------------------------
@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(now=1000.0)


def poll_timer(clock: FakeClock, max_poll_interval_ms: int | None = 5000) -> HeartbeatTimer:
    return HeartbeatTimer(session_timeout_ms=3000, heartbeat_interval_ms=1000, clock=clock,
                          max_poll_interval_ms=max_poll_interval_ms)


def test_poll_timer_expires_exactly_one_interval_after_the_last_poll(clock):
    timer = poll_timer(clock)
    assert timer.max_poll_interval_s == 5.0 and timer.last_poll == clock.now
    clock.advance(4.0)
    timer.poll()
    assert timer.last_poll == clock.now and timer.time_to_poll_expiry() == pytest.approx(5.0)
    clock.advance(4.999)
    assert not timer.poll_timeout_expired() and timer.time_to_poll_expiry() == pytest.approx(0.001)
    clock.advance(0.001)
    assert timer.poll_timeout_expired() and timer.time_to_poll_expiry() == 0.0
    clock.advance(100.0)
    assert timer.poll_timeout_expired() and timer.time_to_poll_expiry() == 0.0


def test_heartbeat_events_do_not_restart_the_poll_timer(clock):
    timer = poll_timer(clock)
    for _ in range(5):
        clock.advance(1.0)
        timer.sent()
        timer.received()
    timer.failed()
    timer.reset()
    assert timer.poll_timeout_expired() and not timer.session_expired()


def test_poll_timer_takes_an_explicit_now(clock):
    timer = poll_timer(clock)
    timer.poll(now=2000.0)
    assert timer.last_poll == 2000.0
    assert not timer.poll_timeout_expired(now=2004.9) and timer.poll_timeout_expired(now=2005.0)
    assert timer.time_to_poll_expiry(now=2001.0) == pytest.approx(4.0)
    assert not timer.poll_timeout_expired()  # the clock is still at 1000


def test_without_a_max_poll_interval_the_poll_timer_never_expires(clock):
    timer = poll_timer(clock, None)
    clock.advance(1e9)
    assert not timer.poll_timeout_expired() and timer.time_to_poll_expiry() == float("inf")


@pytest.mark.parametrize("value", [0, -1])
def test_poll_timer_rejects_a_non_positive_interval(value):
    with pytest.raises(ValueError):
        HeartbeatTimer(3000, 1000, max_poll_interval_ms=value)


# -- config and error ---------------------------------------------------------------------------
BASE = dict(bootstrap_servers="b:9092", group_id="g", topics=("t",))


def test_max_poll_interval_defaults_to_the_rebalance_timeout():
    assert MemberConfig(**BASE).max_poll_interval_ms is None
    assert MemberConfig(**BASE).effective_max_poll_interval_ms == 60000
    assert MemberConfig(**BASE, rebalance_timeout_ms=7000).effective_max_poll_interval_ms == 7000
    assert MemberConfig(**BASE, max_poll_interval_ms=1234).effective_max_poll_interval_ms == 1234


@pytest.mark.parametrize("value", [0, -5, True, 1.5, "100"])
def test_max_poll_interval_must_be_positive_when_set(value):
    with pytest.raises(ValueError, match="max_poll_interval_ms"):
        MemberConfig(**BASE, max_poll_interval_ms=value)


def test_poll_timeout_error_is_fenced_and_not_retriable():
    error = PollTimeoutExpired("x")
    assert isinstance(error, GroupError) and error.condition == "POLL_TIMEOUT_EXPIRED"
    assert error.fenced and not error.retriable and not error.rediscover


# -- the member loop, stepped by hand on a fake clock ----------------------------------------------
SESSION_MS, INTERVAL_MS, STEPPED_POLL_MS = 1000, 125, 500  # binary fractions: exact clock sums


@pytest.fixture
def stepped(clock):
    """A member whose loop the test steps (no member thread); ``join()`` runs the first step."""
    fake = FakeCoordinator({"t": 2})
    members: list[GroupMember] = []

    def make(**overrides) -> GroupMember:
        settings = dict(topics=("t",), session_timeout_ms=SESSION_MS, heartbeat_interval_ms=INTERVAL_MS,
                        metadata_max_age_ms=3_600_000, max_poll_interval_ms=STEPPED_POLL_MS)
        member = GroupMember(config(**{**settings, **overrides}), Recorder(), transport=fake, clock=clock)
        member.fake, member.recorder = fake, member._loop._callbacks._listener
        members.append(member)
        return member

    yield make
    for member in members:
        member._client.close()
        member._loop._callbacks.shutdown()


def step(member, clock) -> None:
    """Move the clock to the loop's next wake-up (heartbeat due or poll expiry) and run one step."""
    loop = member._loop
    clock.advance(min(loop._timer.time_to_next_heartbeat(), loop._time_to_poll_expiry()))
    loop._step()


def step_until_left(member, clock) -> None:
    """Step (at most 100 times) until the member left the group after its poll timeout."""
    for _ in range(100):
        if member.state is not MemberState.STABLE:
            break
        step(member, clock)
    assert member.state is MemberState.POLL_TIMEOUT


def parked_step(member, clock) -> None:
    """One step while parked: a session later, woken at once (as close() or poll() would)."""
    clock.advance(SESSION_MS / 1000)
    member._status.wakeup.set()
    member._loop._step()


def test_the_member_leaves_exactly_at_the_max_poll_interval(stepped, clock):
    member = stepped()
    member._loop._step()  # join
    joined, fake = clock.now, member.fake
    assert member.state is MemberState.STABLE
    step_until_left(member, clock)
    assert clock.now - joined == STEPPED_POLL_MS / 1000
    assert len(fake.requests("Heartbeat")) == STEPPED_POLL_MS // INTERVAL_MS - 1  # none at the expiry
    assert member.state is MemberState.POLL_TIMEOUT
    assert [r.members[0].member_id for r in fake.requests("LeaveGroup")] == ["m-1"]
    assert member.recorder.kinds() == ["assigned", "fenced", "revoked"]


def test_parked_member_neither_heartbeats_nor_rejoins_until_poll(stepped, clock):
    member = stepped()
    member._loop._step()
    step_until_left(member, clock)
    fake = member.fake
    sent = len(fake.log)
    for _ in range(10):  # ten session timeouts
        parked_step(member, clock)
    assert len(fake.log) == sent  # no Heartbeat, JoinGroup, FindCoordinator, Metadata
    assert member.state is MemberState.POLL_TIMEOUT and member.recorder.kinds() == ["assigned", "fenced", "revoked"]
    member.poll()
    member._loop._step()
    assert member.state is MemberState.STABLE and member.generation.generation_id == 2
    assert [j.member_id for j in fake.requests("JoinGroup")] == ["", "m-1", "", "m-2"]
    assert fake.requests("JoinGroup")[-1].reason == "poll resumed after poll timeout"
    assert member.recorder.kinds() == ["assigned", "fenced", "revoked", "assigned"]


def test_a_fence_recorded_just_before_the_expiry_does_not_make_the_parked_member_rejoin(stepped, clock):
    member = stepped()
    member._loop._step()
    clock.advance(STEPPED_POLL_MS / 1000)
    with member._status.cond:  # a commit refused (fenced) and a rebalance seen on the application thread
        member._status.pending_fence = IllegalGeneration("OffsetCommit")
        member._status.rejoin_reason = "commit rejected"
    member._loop._keep_alive()
    assert member.state is MemberState.POLL_TIMEOUT
    joins = len(member.fake.requests("JoinGroup"))
    for _ in range(3):
        parked_step(member, clock)
    assert len(member.fake.requests("JoinGroup")) == joins and member.state is MemberState.POLL_TIMEOUT
    assert member.recorder.kinds() == ["assigned", "fenced", "revoked"]


def test_a_parked_pattern_member_does_not_follow_new_topics_until_poll(stepped, clock):
    member = stepped(topics=(), topic_pattern="t.*", metadata_max_age_ms=STEPPED_POLL_MS)
    member._loop._step()
    fake = member.fake
    with fake.lock:
        fake.partitions["t2"] = 1  # seen by a metadata check due at the poll expiry, were one made
    checks = len(fake.requests("Metadata"))
    step_until_left(member, clock)
    sent = len(fake.log)
    for _ in range(5):  # five metadata max ages
        parked_step(member, clock)
    assert len(fake.log) == sent and len(fake.requests("Metadata")) == checks
    assert member.state is MemberState.POLL_TIMEOUT and member.topics == ("t",)
    member.poll()
    member._loop._step()
    assert member.topics == ("t", "t2") and member.assignment == (TP("t", 0), TP("t", 1), TP("t2", 0))


class RecordingEvent(threading.Event):
    """A wake-up event that records how long the loop meant to wait, and does not wait."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return super().wait(0)


def test_the_loop_wakes_up_at_the_poll_expiry_not_only_at_heartbeats(stepped, clock):
    member = stepped(max_poll_interval_ms=300)  # expires between the heartbeats at 250 and 375 ms
    loop = member._loop
    loop._step()
    joined, wakeup = clock.now, RecordingEvent()
    member._status.wakeup = wakeup
    for _ in range(2):  # one wait for the next heartbeat, then one step that sends it
        loop._step()
        clock.advance(wakeup.timeouts[-1])
        loop._step()
    assert clock.now - joined == 0.25 and wakeup.timeouts == [0.125, 0.0, 0.125, 0.0]
    loop._step()
    assert wakeup.timeouts[-1] == pytest.approx(0.05) and member.state is MemberState.STABLE
    clock.advance(wakeup.timeouts[-1])
    loop._step()
    assert member.state is MemberState.POLL_TIMEOUT and len(member.fake.requests("Heartbeat")) == 2
    loop._step()
    assert wakeup.timeouts[-1] == SESSION_MS / 1000  # parked: only close() or poll() wake it earlier


def test_the_poll_timer_starts_when_a_generation_is_installed(stepped, clock):
    member = stepped()
    clock.advance(10 * STEPPED_POLL_MS / 1000)  # long before the join: does not count
    member._loop._step()
    joined = clock.now
    for _ in range(STEPPED_POLL_MS // INTERVAL_MS - 1):
        step(member, clock)
    assert member.state is MemberState.STABLE and clock.now - joined < STEPPED_POLL_MS / 1000
    step(member, clock)
    assert member.state is MemberState.POLL_TIMEOUT and clock.now - joined == STEPPED_POLL_MS / 1000


def test_a_member_that_keeps_polling_never_leaves(stepped, clock):
    member = stepped()
    member._loop._step()
    steps = 5 * SESSION_MS // INTERVAL_MS  # ten poll intervals
    for _ in range(steps):
        step(member, clock)
        member.poll()
    assert member.state is MemberState.STABLE and member.generation.generation_id == 1
    assert len(member.fake.requests("Heartbeat")) == steps and member.fake.requests("LeaveGroup") == []
    assert member.recorder.kinds() == ["assigned"]


# -- members on their own thread (real clock, small intervals) --------------------------------------
fake = coordinator_fixture({"t": 3, "u": 1})


@pytest.fixture
def started(fake):
    with members_on(fake, max_poll_interval_ms=POLL_MS) as start:
        yield start


def lost(events) -> bool:
    return [e[0] for e in events][:3] == ["assigned", "fenced", "revoked"]


def test_a_member_that_never_polls_leaves_and_the_listener_hears_it(fake, started):
    member, rec = started()
    assert rec.wait(lost)
    assert fake.wait_for(lambda: "m-1" not in fake.members, WAIT)  # the broker let it go
    (leave,) = fake.requests("LeaveGroup")
    assert (leave.members[0].member_id, leave.members[0].group_instance_id) == ("m-1", None)
    error = rec.events[1][1]
    assert isinstance(error, PollTimeoutExpired) and error.condition == "POLL_TIMEOUT_EXPIRED"
    assert f"{POLL_MS} ms" in str(error)
    assert rec.events[2][1] == ALL
    assert member.state is MemberState.POLL_TIMEOUT and member.generation == NO_GENERATION
    assert member.assignment == () and not member.is_leader
    member.raise_if_failed()  # not a failure
    with pytest.raises(StaleGenerationError):
        member.commit_offsets({TP("t", 0): 1})
    assert fake.requests("OffsetCommit") == []


@contextmanager
def polling(member: GroupMember) -> Iterator[None]:
    """The application makes progress: ``member.poll()`` now and every 20 ms on a thread of its own,
    until the block ends."""
    stop = threading.Event()

    def keep_polling() -> None:
        while not stop.wait(0.02):
            member.poll()

    poller = threading.Thread(target=keep_polling, daemon=True)
    member.poll()
    poller.start()
    try:
        yield
    finally:
        stop.set()
        poller.join(WAIT)


def test_after_poll_the_member_rejoins_and_is_assigned_again(fake, started):
    member, rec = started()
    assert rec.wait(lost)
    joins = len(fake.requests("JoinGroup"))
    with polling(member):
        assert rec.wait(lambda ev: [e[0] for e in ev] == ["assigned", "fenced", "revoked", "assigned"])
        assert member.wait_until_stable(WAIT) and member.assignment == ALL
        assert [j.member_id for j in fake.requests("JoinGroup")[joins:]] == ["", "m-2"]
        assert fake.requests("JoinGroup")[joins].reason == "poll resumed after poll timeout"


def test_a_member_that_keeps_polling_never_leaves_on_its_thread(fake, started):
    member, rec = started()
    with polling(member):
        assert member.wait_until_stable(WAIT)
        # 50 heartbeats at 20 ms: about five poll intervals of 200 ms
        assert fake.wait_for(lambda: len(fake.requests("Heartbeat")) >= 50, WAIT)
        assert member.state is MemberState.STABLE and rec.kinds() == ["assigned"]
        assert fake.requests("LeaveGroup") == []


def test_a_static_member_gives_up_its_generation_without_leave_group(fake, started):
    member, rec = started(group_instance_id="i-1")
    assert rec.wait(lost)
    assert fake.requests("LeaveGroup") == [] and "s-1" in fake.members  # Java keeps a static member's place
    assert member.state is MemberState.POLL_TIMEOUT and member.generation == NO_GENERATION
    beats = len(fake.requests("Heartbeat"))
    member.poll()
    assert rec.wait(lambda ev: [e[0] for e in ev][3:] == ["assigned"])
    assert fake.requests("JoinGroup")[-1].group_instance_id == "i-1"
    assert all(h.generation_id == 1 for h in fake.requests("Heartbeat")[:beats])


def test_close_after_the_poll_timeout_is_clean(fake, started):
    member, rec = started()
    assert rec.wait(lost)
    member.close(timeout_s=5)
    assert member.state is MemberState.CLOSED and not member._thread.is_alive()
    assert len(fake.requests("LeaveGroup")) == 1  # not a second time
    assert rec.kinds() == ["assigned", "fenced", "revoked"]
    member.raise_if_failed()
    member.poll()  # harmless after close
    assert member.state is MemberState.CLOSED and len(fake.requests("JoinGroup")) == 2


def test_leave_group_goes_out_before_a_stuck_listener_returns(fake, started):
    release = threading.Event()
    rec = Recorder()
    rec.hooks["fenced"] = lambda error: release.wait(WAIT)  # e.g. a Spark query that will not stop
    member, _ = started(rec)
    try:
        assert fake.wait_for(lambda: len(fake.requests("LeaveGroup")) == 1, WAIT)
        assert member.state is MemberState.POLL_TIMEOUT and member.assignment == ()
        assert rec.kinds() == ["assigned"]  # on_fenced is still running
    finally:
        release.set()
    assert rec.wait(lost)
