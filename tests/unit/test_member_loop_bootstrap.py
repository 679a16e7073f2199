"""How the member thread starts and ends (groupmgr.member_loop.MemberLoop.run), run in the test thread
against the scripted ``FakeCoordinator``: the transport is started before anything is sent, and a
client closed under a member that was not asked to stop is a failure, not a clean close."""
from __future__ import annotations

import pytest

from groupmgr.generation import MemberState
from groupmgr.group_errors import MemberClosedError
from groupmgr.member import GroupMember
from tests.support.fake_coordinator import WAIT, FakeCoordinator, Recorder, config


class StartRecording(FakeCoordinator):
    def __init__(self, partitions):
        super().__init__(partitions)
        self.starts: list[tuple[float, int]] = []

    def start(self, timeout_s: float) -> None:
        self.starts.append((timeout_s, len(self.log)))


def test_the_transport_is_started_once_with_the_request_timeout_before_any_request():
    fake = StartRecording({"t": 2})
    member = GroupMember(config(topics=("t",), request_timeout_ms=1500), Recorder(), transport=fake).start()
    try:
        assert member.wait_until_stable(WAIT)
    finally:
        member.close(timeout_s=5)
    assert fake.starts == [(1.5, 0)]          # once, 1.5 s, nothing sent before it


def test_a_client_closed_under_a_running_member_fails_it_with_member_closed():
    member = GroupMember(config(topics=("t",)), Recorder(), transport=FakeCoordinator({"t": 2}))
    member._client.close()                    # not member.close(): nobody asked the member to stop
    member._loop.run()
    assert member.state is MemberState.FAILED
    with pytest.raises(MemberClosedError):
        member.raise_if_failed()


def test_a_member_closed_on_request_ends_closed_without_failure():
    member = GroupMember(config(topics=("t",)), Recorder(), transport=FakeCoordinator({"t": 2})).start()
    assert member.wait_until_stable(WAIT)
    member.close(timeout_s=5)
    assert member.state is MemberState.CLOSED
    member.raise_if_failed()
