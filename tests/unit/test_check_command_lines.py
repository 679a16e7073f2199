"""scg check's lines after connecting (pipelines.cli.check_command): the session timeout is ok only
when the coordinator accepted it, skipped with the reason when its answer says nothing; a step that
meets a transient fault is skipped, never FAILED nor a traceback."""
from __future__ import annotations

from types import SimpleNamespace

from groupmgr.join_probe import Answer, SessionTimeoutAnswer
from pipelines.cli.check_command import FAILED, OK, SKIPPED, _principal_checks
from pipelines.runtime.kafka_access import Inconclusive

CONFIG = SimpleNamespace(topics=["orders"], topic_pattern=None,
                         group=SimpleNamespace(id="g", session_timeout_ms=45000, rebalance_timeout_ms=45000))


class Access:
    def __init__(self, answer, group_existed=True, topics_error=None):
        self.answer, self.group_existed, self.topics_error = answer, group_existed, topics_error

    def topics_to_check(self, topics, pattern):
        if self.topics_error is not None:
            raise self.topics_error
        return list(topics)

    def check_topics(self, topics):
        return list(topics)

    def check_group(self):
        pass

    def check_session_timeout(self, session_timeout_ms, rebalance_timeout_ms):
        return self.answer


def lines(access):
    return {line.check: line for line in _principal_checks(access, CONFIG, connected=True)}


def test_an_accepted_session_timeout_is_ok():
    line = lines(Access(SessionTimeoutAnswer(Answer.ACCEPTED, "45000 ms accepted by the coordinator")))["session timeout"]
    assert line.outcome == OK and "accepted" in line.detail and "did not exist" not in line.detail


def test_an_unknown_answer_is_skipped_with_its_reason():
    answer = SessionTimeoutAnswer(Answer.UNKNOWN, "the coordinator answered NOT_COORDINATOR (16)")
    line = lines(Access(answer))["session timeout"]
    assert line.outcome == SKIPPED and "NOT_COORDINATOR" in line.detail


def test_a_group_that_did_not_exist_is_said_to_have_been_created_empty():
    line = lines(Access(SessionTimeoutAnswer(Answer.ACCEPTED, "45000 ms accepted by the coordinator"),
                        group_existed=False))["session timeout"]
    assert line.outcome == OK and "group g did not exist" in line.detail and "empty group" in line.detail


def test_a_transient_fault_listing_topics_is_skipped_not_failed():
    checked = lines(Access(SessionTimeoutAnswer(Answer.ACCEPTED, "ok"), topics_error=Inconclusive("timed out")))
    assert checked["topics orders"].outcome == SKIPPED and "timed out" in checked["topics orders"].detail
    assert all(line.outcome != FAILED for line in checked.values())
