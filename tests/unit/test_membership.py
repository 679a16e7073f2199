"""The group-side helpers of a pipeline member: the watch for a group the brokers run
(KIP-848) and the offset committer that never raises."""
from types import SimpleNamespace

import pytest

from groupmgr.core import TopicPartition
from groupmgr.server_assignment import GroupRunByBroker
from pipelines.runtime.membership import OffsetCommitter, ServerAssignmentWatch


@pytest.mark.parametrize("policy", ["warn", "fail"])
def test_a_group_the_broker_runs_is_named_once_and_fails_only_when_asked(policy):
    lines = []
    group = SimpleNamespace(id="g", assignors=("sticky",), on_server_assignment=policy)
    answers = iter(["CLASSIC", "CONSUMER", "CONSUMER", RuntimeError("describe failed"), "CLASSIC"])

    def lookup():
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    watch = ServerAssignmentWatch(group, lookup, lines.append)
    errors = [watch.check() for _ in range(5)]
    named = [line for line in lines if "[GROUP_RUN_BY_BROKER]" in line]
    assert len(named) == 1 and "sticky" in named[0]
    assert sum("is a classic group again" in line for line in lines) == 1
    failing = [e for e in errors if e is not None]
    assert (len(failing) == 1 and isinstance(failing[0], GroupRunByBroker)) if policy == "fail" else failing == []


def test_the_watch_asks_only_when_an_assignment_arrived():
    asked = []
    watch = ServerAssignmentWatch(SimpleNamespace(id="g", assignors=("range",), on_server_assignment="warn"),
                                  lambda: asked.append(1) or "CLASSIC", lambda line: None)
    assert watch.check_when_due() is None and asked == []
    watch.assignment_arrived()
    watch.assignment_arrived()
    watch.check_when_due()
    watch.check_when_due()
    assert asked == [1]


def test_a_refused_offset_commit_is_reported_not_raised():
    lines, tp = [], TopicPartition("t", 0)

    class Member:
        def __init__(self, error=None):
            self.error, self.commits = error, []

        def commit_offsets(self, offsets, metadata):
            if self.error:
                raise self.error
            self.commits.append((offsets, metadata))

    ok = Member()
    assert OffsetCommitter(ok, lines.append)({tp: 5}, "delta:3") and ok.commits == [({tp: 5}, "delta:3")]
    assert not OffsetCommitter(Member(RuntimeError("ILLEGAL_GENERATION")), lines.append)({tp: 5}, "")
    assert "Kafka offset commit refused (RuntimeError: ILLEGAL_GENERATION)" in lines[0]
