"""streaming_query.wait_until_planned: a member joins once its scg-kafka query has been through a
trigger (pure unit: a scripted query, no Spark)."""
from __future__ import annotations

from pipelines.runtime.streaming_query import wait_until_planned


class ScriptedQuery:
    """Answers ``status`` with the next scripted message, then the last one."""

    def __init__(self, messages, active=True):
        self.messages, self.isActive, self.asked = list(messages), active, 0

    @property
    def status(self):
        self.asked += 1
        message = self.messages.pop(0) if len(self.messages) > 1 else self.messages[0]
        return {"message": message, "isDataAvailable": False, "isTriggerActive": False}


def test_it_waits_through_start_up_until_a_trigger_has_planned():
    query = ScriptedQuery(["Initializing sources", "Getting offsets from scg-kafka", "Waiting for data to arrive"])
    assert wait_until_planned(query, timeout_s=5, poll_s=0)
    assert query.asked == 3


def test_a_query_that_never_plans_is_given_up_at_the_bound_and_an_ended_one_at_once():
    assert not wait_until_planned(ScriptedQuery(["Initializing sources"]), timeout_s=0.05, poll_s=0.01)
    ended = ScriptedQuery(["Initializing sources"], active=False)
    assert not wait_until_planned(ended, timeout_s=5) and ended.asked == 0
