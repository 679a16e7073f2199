"""Broker error code classification: one function, named classes with retriable/fenced flags."""
from __future__ import annotations

import kafka.errors as kafka_errors
import pytest

from groupmgr import group_errors as E


@pytest.mark.parametrize("code, cls, retriable, fenced, rediscover", [
    (15, E.CoordinatorNotAvailable, True, False, True),
    (16, E.NotCoordinator, True, False, True),
    (14, E.CoordinatorLoadInProgress, True, False, False),
    (27, E.RebalanceInProgress, False, False, False),
    (22, E.IllegalGeneration, False, True, False),
    (25, E.UnknownMemberId, False, True, False),
    (82, E.FencedInstanceId, False, True, False),
    (79, E.MemberIdRequired, False, False, False),
    (30, E.GroupAuthorizationFailed, False, False, False),
    (23, E.InconsistentGroupProtocol, False, False, False),
    (3, E.UnknownTopicOrPartition, False, False, False),
    (12, E.OffsetMetadataTooLarge, False, False, False),
    (81, E.GroupMaxSizeReached, False, False, False),
    (35, E.UnsupportedVersion, False, False, False),
    (88, E.UnstableOffsetCommit, True, False, False),
])
def test_known_codes_map_to_named_classes(code, cls, retriable, fenced, rediscover):
    with pytest.raises(cls) as info:
        E.raise_for_error_code(code, "ctx")
    error = info.value
    assert (error.retriable, error.fenced, error.rediscover) == (retriable, fenced, rediscover)
    assert error.condition == kafka_errors.for_code(code).message
    assert error.error_code == code


def test_no_error_returns_quietly():
    assert E.raise_for_error_code(0, "ctx") is None
    assert E.error_for_code(0) is None


def test_unknown_code_keeps_code_and_kafka_name():
    error = E.error_for_code(42, "ctx")  # INVALID_REQUEST has no dedicated class
    assert isinstance(error, E.BrokerError)
    assert (error.code, error.condition, error.retriable) == (42, "INVALID_REQUEST", False)
    never_seen = E.error_for_code(31999)
    assert never_seen.condition == "BROKER_ERROR_31999"


def test_every_dedicated_class_matches_kafka_python_name():
    for code, cls in E._BY_CODE.items():
        assert cls.condition == kafka_errors.for_code(code).message, cls


def test_stale_generation_copies_fenced_from_cause():
    fenced = E.StaleGenerationError("x", cause=E.IllegalGeneration("c"), generation_id=4)
    rebalancing = E.StaleGenerationError("x", cause=E.RebalanceInProgress("c"))
    assert fenced.fenced and not rebalancing.fenced
    assert fenced.generation_id == 4 and fenced.condition == "STALE_GENERATION"
    assert not E.StaleGenerationError("no generation").fenced


@pytest.mark.parametrize("exc, cls", [
    (kafka_errors.KafkaConnectionError("gone"), E.CoordinatorUnreachable),
    (kafka_errors.KafkaTimeoutError("slow"), E.CoordinatorUnreachable),
    (kafka_errors.NodeNotReadyError(1), E.CoordinatorUnreachable),
    (kafka_errors.KafkaProtocolError("correlation id mismatch"), E.CoordinatorUnreachable),
    (kafka_errors.SaslAuthenticationFailedError("bad password"), E.AuthenticationFailed),
    (kafka_errors.IncompatibleBrokerVersion("old"), E.UnsupportedVersion),
    (RuntimeError("bug"), E.ClientError),
])
def test_client_exceptions_are_translated(exc, cls):
    translated = E.translate_client_error(exc, "JoinGroup")
    assert type(translated) is cls
    assert translated.retriable == (cls is E.CoordinatorUnreachable)


def test_member_id_required_carries_member_id():
    error = E.MemberIdRequired("ctx", member_id="m-1")
    assert error.member_id == "m-1"
