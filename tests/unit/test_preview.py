"""Pure helpers behind `scg assign`: spec parsing and the JSON-able preview."""

from __future__ import annotations

import json

import pytest

from groupmgr.assignors import Subscription, UnknownAssignorError
from groupmgr.assignors.preview import (
    MemberSpecError,
    TopicSpecError,
    parse_member_spec,
    parse_topic_spec,
    preview,
)


@pytest.mark.parametrize("spec, expected", [
    ("t:6", ("t", 6)), ("orders.v2_eu-1:12", ("orders.v2_eu-1", 12)), (" t:1 ", ("t", 1)),
])
def test_parse_topic_spec(spec, expected):
    assert parse_topic_spec(spec) == expected


@pytest.mark.parametrize("spec", ["t", "t:", ":6", "t:0", "t:-1", "t:six", "t:1.5", "bad topic:3", "a:b:3", "..:2",
                                  "t:²", "t:1234567890"])
def test_bad_topic_specs(spec):
    with pytest.raises(TopicSpecError) as info:
        parse_topic_spec(spec)
    assert isinstance(info.value, ValueError)
    assert info.value.spec == spec
    assert "--topic" in str(info.value)


def test_parse_member_spec_full_form():
    assert parse_member_spec("c1=inst1:t,u") == ("c1", Subscription(("t", "u"), group_instance_id="inst1"))


@pytest.mark.parametrize("spec, expected", [
    ("c1", ("c1", Subscription(("t", "u")))),
    ("c1=inst1", ("c1", Subscription(("t", "u"), group_instance_id="inst1"))),
    ("c1:u", ("c1", Subscription(("u",)))),
    ("c1:u, t,u", ("c1", Subscription(("u", "t")))),
])
def test_member_without_topics_subscribes_to_all_given_topics(spec, expected):
    assert parse_member_spec(spec, ("t", "u")) == expected


@pytest.mark.parametrize("spec", ["", "=inst", "c1=", "c1=:t", "c1:", "c1:t,,u", "c1:bad topic"])
def test_bad_member_specs(spec):
    with pytest.raises(MemberSpecError) as info:
        parse_member_spec(spec, ("t",))
    assert isinstance(info.value, ValueError)
    assert info.value.reason


def test_preview_range_javadoc_example_is_json_able():
    out = preview("range", ["t0:3", "t1:3"], ["C0", "C1"])
    assert out == {
        "assignor": "range",
        "topics": {"t0": 3, "t1": 3},
        "members": {
            "C0": {"instance": None, "partitions": {"t0": [0, 1], "t1": [0, 1]}},
            "C1": {"instance": None, "partitions": {"t0": [2], "t1": [2]}},
        },
    }
    assert json.loads(json.dumps(out)) == out


def test_preview_lists_static_members_first_and_keeps_instances():
    out = preview("roundrobin", ["t:4"], ["a", "z=inst-1"])
    assert list(out["members"]) == ["z", "a"]
    assert out["members"]["z"] == {"instance": "inst-1", "partitions": {"t": [0, 2]}}
    assert out["members"]["a"] == {"instance": None, "partitions": {"t": [1, 3]}}


def test_preview_shows_subscribed_topics_even_when_empty():
    out = preview("sticky", ["t:1", "u:1"], ["a:t", "b:t,u", "c:u"])
    partitions = {m: v["partitions"] for m, v in out["members"].items()}
    assert partitions["b"].keys() == {"t", "u"}
    assert sorted(p for v in partitions.values() for ps in v.values() for p in ps) == [0, 0]


@pytest.mark.parametrize("topics, members, error", [
    (["t:2", "t:3"], ["a"], TopicSpecError),
    ([], ["a"], TopicSpecError),
    (["t:2"], [], MemberSpecError),
    (["t:2"], ["a", "a:t"], MemberSpecError),
    (["t:2"], ["a:u"], MemberSpecError),
    (["t:2"], ["a=i", "b=i"], MemberSpecError),
])
def test_preview_rejects_inconsistent_specs(topics, members, error):
    with pytest.raises(error):
        preview("range", topics, members)


def test_preview_unknown_assignor_is_named():
    with pytest.raises(UnknownAssignorError):
        preview("nope", ["t:1"], ["a"])
