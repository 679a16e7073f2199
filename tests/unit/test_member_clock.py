"""The member loop's heartbeat bookkeeping over many session timeouts, on an injected clock.

The loop is stepped from the test thread (no member thread, no sleeps): before each step the fake
clock is moved to the instant the next heartbeat is due, so every wait inside the loop is zero and
the test covers several session timeouts in milliseconds. The coordinator is the scripted
``FakeCoordinator`` at the transport boundary.
"""
from __future__ import annotations

import pytest

from groupmgr.assignors import TopicPartition as TP
from groupmgr.generation import MemberState
from groupmgr.member import GroupMember
from tests.support.fake_clock import FakeClock
from tests.support.fake_coordinator import Recorder, config, coordinator_fixture

SESSION_MS, INTERVAL_MS = 1000, 125   # binary fractions of a second: the clock sums are exact
SESSIONS = 5
COORDINATOR_LOAD_IN_PROGRESS = 14


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(now=1000.0)


fake = coordinator_fixture({"t": 2})


@pytest.fixture
def member(fake, clock):
    """A joined member whose loop the test steps by hand (``member._loop._step()``)."""
    recorder = Recorder()
    member = GroupMember(config(topics=("t",), session_timeout_ms=SESSION_MS, heartbeat_interval_ms=INTERVAL_MS,
                                metadata_max_age_ms=3_600_000), recorder, transport=fake, clock=clock)
    member.recorder = recorder
    member._loop._step()                      # the initial join: JoinGroup x2, SyncGroup
    assert member.state is MemberState.STABLE and member.generation.generation_id == 1
    yield member
    member._client.close()


def beat(member, clock) -> None:
    """Move the clock to the next heartbeat's due time and run one loop step."""
    clock.advance(member._loop._timer.time_to_next_heartbeat())
    member._loop._step()


def test_a_healthy_member_heartbeats_through_many_session_timeouts_without_rediscovery(member, fake, clock):
    started = clock.now
    steps = SESSIONS * SESSION_MS // INTERVAL_MS
    for _ in range(steps):
        beat(member, clock)
    assert clock.now - started == SESSIONS * SESSION_MS / 1000      # five whole session timeouts
    assert len(fake.requests("Heartbeat")) == steps                  # one heartbeat per interval
    assert set(fake.nodes("Heartbeat")) == {"coordinator-1"}
    assert len(fake.requests("FindCoordinator")) == 1                # found once, never re-discovered
    assert member._client.coordinator_id == "coordinator-1"
    assert member.generation.generation_id == 1 and member.state is MemberState.STABLE
    assert member.recorder.kinds() == ["assigned"] and len(fake.requests("JoinGroup")) == 2
    timer = member._loop._timer
    assert timer.last_received == clock.now and not timer.in_flight and timer.failures == 0
    assert not timer.session_expired()


def test_every_answer_restarts_the_session_timer(member, fake, clock):
    timer = member._loop._timer
    for _ in range(3 * SESSION_MS // INTERVAL_MS):
        beat(member, clock)
        assert timer.last_sent == timer.last_received == clock.now
        assert timer.time_to_next_heartbeat() == INTERVAL_MS / 1000
        assert not timer.session_expired(now=clock.now + SESSION_MS / 1000 - 0.001)
        assert timer.session_expired(now=clock.now + SESSION_MS / 1000)


def test_unanswered_heartbeats_rediscover_the_coordinator_after_one_session_timeout(member, fake, clock):
    """The other side of the bookkeeping: failures back off and do not extend the session; once a
    whole session passed without an answer the coordinator is marked dead and found again."""
    timer = member._loop._timer
    beat(member, clock)
    last_answer = timer.last_received
    assert last_answer == clock.now
    fake.inject("Heartbeat", *[COORDINATOR_LOAD_IN_PROGRESS] * 4)    # retriable, no rediscovery by itself
    delays = []
    for _ in range(4):
        beat(member, clock)
        delays.append(timer.time_to_next_heartbeat())
    assert timer.failures == 4 and timer.last_received == last_answer
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04])                     # retry_backoff_ms=5, doubling
    finds = len(fake.requests("FindCoordinator"))
    clock.now = last_answer + SESSION_MS / 1000                       # a whole session without an answer
    assert timer.session_expired()
    member._loop._step()
    assert finds == 1 and len(fake.requests("FindCoordinator")) == 2      # marked dead, found again
    assert member._client.coordinator_id == "coordinator-1"
    assert timer.failures == 0 and timer.last_received == clock.now  # answered again: session restarted
    assert member.generation.generation_id == 1 and member.recorder.kinds() == ["assigned"]


def test_assignment_survives_the_stepping(member):
    assert member.assignment == (TP("t", 0), TP("t", 1))


# -- metadata checks on the injected clock ----------------------------------------------------------
def clocked(fake, clock, **overrides):
    settings = dict(topics=("t",), session_timeout_ms=SESSION_MS, heartbeat_interval_ms=INTERVAL_MS,
                    metadata_max_age_ms=1000, request_timeout_ms=1000)
    member = GroupMember(config(**{**settings, **overrides}), Recorder(), transport=fake, clock=clock)
    member._loop._step()
    assert member.state is MemberState.STABLE
    return member


def metadata_requests(fake) -> int:
    return len(fake.requests("Metadata"))


@pytest.mark.parametrize("overrides", [{}, {"topics": (), "topic_pattern": "t"}], ids=["topics", "pattern"])
def test_metadata_is_checked_exactly_every_max_age(fake, clock, overrides):
    member = clocked(fake, clock, **overrides)
    loop, joined = member._loop, clock.now
    base = metadata_requests(fake)
    for _ in range(3):
        clock.now = loop._next_metadata_check - 0.0005
        loop._keep_alive()
        assert metadata_requests(fake) == base                 # not yet
        clock.now = loop._next_metadata_check
        loop._keep_alive()
        assert metadata_requests(fake) > base                  # due at exactly max age
        base = metadata_requests(fake)
        assert loop._next_metadata_check == clock.now + 1.0    # the next one a max age later
    assert clock.now == joined + 3.0
    assert member.generation.generation_id == 1 and len(fake.requests("JoinGroup")) == 2   # nothing changed
    member._client.close()


def test_a_metadata_check_holds_the_thread_a_third_of_the_session(fake, clock):
    member = clocked(fake, clock, topics=(), topic_pattern="t", session_timeout_ms=900, heartbeat_interval_ms=300)
    with fake.lock:
        fake.timeouts.clear()
    clock.now = member._loop._next_metadata_check
    member._loop._keep_alive()
    with fake.lock:
        waits = [t for name, t in fake.timeouts if name == "MetadataRequest"]
    assert waits and all(w == pytest.approx(0.3, abs=1e-12) for w in waits)   # min(1 s, 900 ms / 3)
    member._client.close()


def test_a_follower_checks_no_partition_counts(fake, clock):
    from groupmgr.consumer_protocol import encode_assignment, encode_subscription
    from groupmgr.assignors import Subscription
    from tests.support.fake_coordinator import Phantom
    fake.phantoms.append(Phantom("a-leader", {"range": encode_subscription(Subscription(("t",)))}))
    fake.leader_is_phantom = True
    fake.follower_assignment = encode_assignment([TP("t", 1)])
    member = clocked(fake, clock)
    assert not member.is_leader
    base = metadata_requests(fake)
    for _ in range(3):
        clock.now = member._loop._next_metadata_check
        member._loop._keep_alive()
    assert metadata_requests(fake) == base and member.state is MemberState.STABLE
    member._client.close()
