"""Pieces of one rebalance round (groupmgr.rebalance) checked on the round object with a stub client:
the subscription a member offers per assignor, and the member id when the broker keeps asking for one."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from groupmgr.assignors import RangeAssignor, TopicPartition as TP
from groupmgr.consumer_protocol import LATEST_VERSION, decode_subscription
from groupmgr.group_errors import MemberIdRequired
from groupmgr.rebalance import MAX_MEMBER_ID_ROUNDS, JoinSpec, RebalanceRound, _subscription_version


class UserData(RangeAssignor):
    """Range, sending the topics it is asked about as its subscription user data."""

    name = "with-user-data"

    def __init__(self):
        self.asked = []

    def subscription_user_data(self, topics):
        self.asked.append(tuple(topics))
        return ",".join(topics).encode()


def spec(*assignors) -> JoinSpec:
    return JoinSpec(group_id="g", topics=("t", "u"), assignors=assignors, session_timeout_ms=10_000,
                    rebalance_timeout_ms=30_000, rack_id="r-1")


def test_each_protocol_offers_the_subscription_with_its_assignors_user_data():
    assignor = UserData()
    round_ = RebalanceRound(None, spec(assignor, RangeAssignor()), "m-1", owned=[TP("t", 1)], owned_generation_id=4)
    request = round_._join_request()
    offered = [decode_subscription(p.metadata) for p in request.protocols]
    assert [o.version for o in offered] == [LATEST_VERSION, LATEST_VERSION]
    mine, plain = (o.subscription for o in offered)
    assert assignor.asked == [("t", "u")]
    assert (mine.topics, mine.user_data, mine.owned_partitions, mine.generation_id, mine.rack_id) == (
        ("t", "u"), b"t,u", (TP("t", 1),), 4, "r-1")
    assert (plain.topics, plain.user_data, plain.owned_partitions) == (("t", "u"), None, (TP("t", 1),))


class AlwaysNewId:
    """A coordinator client whose JoinGroup always answers MEMBER_ID_REQUIRED with a fresh id."""

    def __init__(self):
        self.member_ids = []

    def send_once(self, request, check, timeout_s=None):
        self.member_ids.append(request.member_id)
        return check(SimpleNamespace(error_code=MemberIdRequired.error_code,
                                     member_id=f"m-{len(self.member_ids)}"))


def test_a_member_id_never_accepted_fails_with_the_last_id_the_broker_gave():
    client = AlwaysNewId()
    round_ = RebalanceRound(client, spec(RangeAssignor()), "")
    with pytest.raises(MemberIdRequired) as raised:
        round_.run()
    assert client.member_ids == ["", "m-1", "m-2"][:MAX_MEMBER_ID_ROUNDS]
    assert raised.value.member_id == f"m-{MAX_MEMBER_ID_ROUNDS}" == round_.member_id


@pytest.mark.parametrize("metadata", [b"\x05", b"\xff", bytearray(b"\x07")])
def test_metadata_shorter_than_the_version_field_is_version_0(metadata):
    assert _subscription_version(metadata) == 0
