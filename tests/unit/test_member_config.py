"""MemberConfig: validated at construction, immutable, secrets masked in repr."""
from __future__ import annotations

import dataclasses

import pytest

from groupmgr.assignors import RangeAssignor, UnknownAssignorError
from groupmgr.member import MemberConfig

BASE = dict(bootstrap_servers="b:9092", group_id="g", topics=("t",))


def test_defaults_and_normalisation():
    cfg = MemberConfig(**{**BASE, "topics": ["a", "b"]})
    assert cfg.topics == ("a", "b") and cfg.assignors == ("range",)
    assert (cfg.session_timeout_ms, cfg.rebalance_timeout_ms, cfg.heartbeat_interval_ms) == (10000, 60000, 1000)
    assert cfg.group_instance_id is None


def test_frozen():
    cfg = MemberConfig(**BASE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.group_id = "other"
    with pytest.raises(TypeError):
        cfg.client_kwargs["x"] = 1


def test_client_kwargs_are_masked_in_repr():
    cfg = MemberConfig(**BASE, client_kwargs={"security_protocol": "SASL_SSL", "sasl_plain_password": "hunter2"})
    text = repr(cfg)
    assert "hunter2" not in text and "SASL_SSL" not in text
    assert "sasl_plain_password" in text and "group_id='g'" in text
    assert cfg.client_kwargs["sasl_plain_password"] == "hunter2"


@pytest.mark.parametrize("overrides", [
    {"topics": ()}, {"topics": "t"}, {"topics": ("",)}, {"group_id": ""}, {"bootstrap_servers": ""},
    {"assignors": ()}, {"session_timeout_ms": 0}, {"heartbeat_interval_ms": 10000},
    {"rebalance_timeout_ms": -1}, {"retry_backoff_ms": True}, {"metadata_max_age_ms": 1.5},
])
def test_invalid_values_rejected(overrides):
    with pytest.raises(ValueError):
        MemberConfig(**{**BASE, **overrides})


@pytest.mark.parametrize("overrides", [
    {"topic_pattern": "t.*"},  # and topics: not both
    {"topics": (), "topic_pattern": "("}, {"topics": (), "topic_pattern": ""}, {"topics": (), "topic_pattern": 5},
])
def test_invalid_pattern_settings_rejected(overrides):
    with pytest.raises(ValueError):
        MemberConfig(**{**BASE, **overrides})


def test_pattern_matches_whole_names_sorted():
    cfg = MemberConfig(**{**BASE, "topics": (), "topic_pattern": "orders-.*"})
    assert cfg.subscribed_topics(["orders-b", "orders-a", "old-orders-a", "orders"]) == ("orders-a", "orders-b")
    assert MemberConfig(**BASE).subscribed_topics(["x"]) == ("t",)


def test_join_spec_resolves_names_and_instances_in_order():
    spec = MemberConfig(**BASE, assignors=("roundrobin", RangeAssignor())).join_spec()
    assert [a.name for a in spec.assignors] == ["roundrobin", "range"]
    assert spec.join_timeout_s == pytest.approx(65.0)


def test_unknown_or_duplicate_assignor_rejected():
    with pytest.raises(UnknownAssignorError):
        MemberConfig(**BASE, assignors=("nope",)).join_spec()
    with pytest.raises(ValueError):
        MemberConfig(**BASE, assignors=("range", RangeAssignor())).join_spec()
