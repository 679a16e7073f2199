"""Broker error codes as exception classes, and the one function that classifies responses.

Every class carries three class-level facts (kafka-python ``errors.py`` style):

* ``retriable`` - the same request may succeed if sent again (after a backoff);
* ``fenced``    - this member's generation / member id is no longer valid: it has lost its
  partitions and must rejoin (or, for ``FencedInstanceId``, stop);
* ``rediscover`` - the coordinator must be looked up again before retrying.

``condition`` is the stable Kafka error name (``"NOT_COORDINATOR"``); tests and callers match on
the class or on ``condition``, never on message text. All classes are immutable after construction
and safe to share between threads.
"""
from __future__ import annotations

import importlib
from typing import ClassVar

from groupmgr.core import ScgError


class GroupError(ScgError):
    """Base of every consumer-group error raised by ``groupmgr``."""

    condition: ClassVar[str] = "GROUP_ERROR"
    error_code: ClassVar[int | None] = None
    retriable: ClassVar[bool] = False
    fenced: ClassVar[bool] = False
    rediscover: ClassVar[bool] = False

    def __init__(self, context: str = "") -> None:
        self.context = context
        super().__init__(f"[{self.condition}] {context}" if context else f"[{self.condition}]")


class BrokerError(GroupError):
    """A broker error code with no dedicated class; ``code`` and ``condition`` say which."""

    def __init__(self, code: int, context: str = "") -> None:
        self.code = code
        self.condition = _kafka_name(code)  # type: ignore[misc]  # instance override of ClassVar
        super().__init__(context)


class _Coordinator(GroupError):
    retriable = True
    rediscover = True


class CoordinatorNotAvailable(_Coordinator):
    """The group's coordinator is not available yet (retriable; look the coordinator up again)."""

    condition, error_code = "COORDINATOR_NOT_AVAILABLE", 15


class NotCoordinator(_Coordinator):
    """The broker asked is no longer the group's coordinator (retriable; look it up again)."""

    condition, error_code = "NOT_COORDINATOR", 16


class CoordinatorLoadInProgress(GroupError):
    """The coordinator is still loading the group's state (retriable)."""

    condition, error_code, retriable = "COORDINATOR_LOAD_IN_PROGRESS", 14, True


class CoordinatorUnreachable(_Coordinator):
    """No response from the coordinator: connection lost, refused, or the request timed out."""

    condition = "COORDINATOR_UNREACHABLE"


class RequestTimedOut(_Coordinator):
    """The coordinator did not answer in time (retriable; look it up again)."""

    condition, error_code = "REQUEST_TIMED_OUT", 7


class NetworkException(_Coordinator):
    """The connection to the coordinator broke (retriable; look it up again)."""

    condition, error_code = "NETWORK_EXCEPTION", 13


class UnstableOffsetCommit(GroupError):
    """A transactional offset commit is pending for the partition; retry shortly."""

    condition, error_code, retriable = "UNSTABLE_OFFSET_COMMIT", 88, True


class RebalanceInProgress(GroupError):
    """The group is rebalancing: revoke, then rejoin. Not fenced: the generation was valid."""

    condition, error_code = "REBALANCE_IN_PROGRESS", 27


class IllegalGeneration(GroupError):
    """This member's generation is stale: it has lost its partitions and must rejoin (fenced)."""

    condition, error_code, fenced = "ILLEGAL_GENERATION", 22, True


class UnknownMemberId(GroupError):
    """The coordinator no longer knows this member id: it must rejoin with a new one (fenced)."""

    condition, error_code, fenced = "UNKNOWN_MEMBER_ID", 25, True


class FencedInstanceId(GroupError):
    """Another process joined with this ``group_instance_id``; this one must stop (fatal, as in Java)."""

    condition, error_code, fenced = "FENCED_INSTANCE_ID", 82, True


class SessionExpired(_Coordinator):
    """No heartbeat answer for a whole session timeout: the coordinator is presumed dead and is
    re-discovered (as in Java). Not fenced by itself: the broker may still know this member (e.g.
    a new coordinator loaded the group); if not, it answers UNKNOWN_MEMBER_ID."""

    condition = "SESSION_EXPIRED"


class MemberIdRequired(GroupError):
    """First JoinGroup (v4+) answered with a member id to use in a second JoinGroup."""

    condition, error_code = "MEMBER_ID_REQUIRED", 79

    def __init__(self, context: str = "", member_id: str = "") -> None:
        self.member_id = member_id
        super().__init__(context)


class GroupAuthorizationFailed(GroupError):
    """The principal may not use this group (needs READ on the group)."""

    condition, error_code = "GROUP_AUTHORIZATION_FAILED", 30


class TopicAuthorizationFailed(GroupError):
    """The principal may not read a subscribed topic (needs READ/DESCRIBE on the topic)."""

    condition, error_code = "TOPIC_AUTHORIZATION_FAILED", 29


class InconsistentGroupProtocol(GroupError):
    """The member's protocol type or assignors share nothing with the group's members."""

    condition, error_code = "INCONSISTENT_GROUP_PROTOCOL", 23


class UnknownTopicOrPartition(GroupError):
    """A topic or partition in the request does not exist (any more)."""

    condition, error_code = "UNKNOWN_TOPIC_OR_PARTITION", 3


class OffsetMetadataTooLarge(GroupError):
    """The offset commit's metadata string is longer than the broker accepts."""

    condition, error_code = "OFFSET_METADATA_TOO_LARGE", 12


class GroupMaxSizeReached(GroupError):
    """The group already has ``group.max.size`` members; this one was refused."""

    condition, error_code = "GROUP_MAX_SIZE_REACHED", 81


class UnsupportedVersion(GroupError):
    """The broker does not support the request version the member sent."""

    condition, error_code = "UNSUPPORTED_VERSION", 35


class InvalidSessionTimeout(GroupError):
    """The session timeout is outside the broker's group.min/max.session.timeout.ms."""

    condition, error_code = "INVALID_SESSION_TIMEOUT", 26


class InvalidGroupId(GroupError):
    """The group id is empty or otherwise invalid."""

    condition, error_code = "INVALID_GROUP_ID", 24


class UnreleasedInstanceId(GroupError):
    """The static member's instance id is still held by another member."""

    condition, error_code = "UNRELEASED_INSTANCE_ID", 111


class AuthenticationFailed(GroupError):
    """SASL/SSL authentication with a broker failed (fatal: fix the security settings)."""

    condition = "AUTHENTICATION_FAILED"


class ClientError(GroupError):
    """The client library failed in a way that is neither a broker error nor a lost connection."""

    condition = "CLIENT_ERROR"


class ProtocolDecodeError(GroupError):
    """Consumer-protocol bytes (subscription or assignment) could not be decoded."""

    condition = "PROTOCOL_DECODE_ERROR"


class StaleGenerationError(GroupError):
    """An offset commit was rejected because this member's generation is no longer current.

    ``cause`` is the broker error (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
    REBALANCE_IN_PROGRESS) or None when the member had no current generation to commit with;
    ``fenced`` is copied from the cause. Never retried as another generation.
    """

    condition = "STALE_GENERATION"

    def __init__(self, context: str, cause: GroupError | None = None, generation_id: int = -1) -> None:
        self.cause = cause
        self.generation_id = generation_id
        self.fenced = bool(cause is not None and cause.fenced)  # type: ignore[misc]
        super().__init__(context)


class PollTimeoutExpired(GroupError):
    """The application did not call ``GroupMember.poll()`` for ``max_poll_interval_ms``: the member
    left the group (fenced: its partitions are lost) and rejoins at the next ``poll()``. Not a
    failure of the member (``raise_if_failed`` does not raise it); given to ``on_fenced``."""

    condition, fenced = "POLL_TIMEOUT_EXPIRED", True


class MemberClosedError(GroupError):
    """The member was closed (or failed); it cannot commit, fetch or rejoin any more."""

    condition = "MEMBER_CLOSED"


class ListenerError(GroupError):
    """A rebalance-listener callback raised; ``cause`` is its exception. Fatal for the member."""

    condition = "LISTENER_FAILED"

    def __init__(self, callback: str, cause: BaseException) -> None:
        self.callback = callback
        self.cause = cause
        super().__init__(f"{callback} raised {type(cause).__name__}: {cause}")


_BY_CODE: dict[int, type[GroupError]] = {
    cls.error_code: cls
    for cls in (CoordinatorNotAvailable, NotCoordinator, CoordinatorLoadInProgress, RequestTimedOut,
                NetworkException, RebalanceInProgress, IllegalGeneration, UnknownMemberId,
                FencedInstanceId, MemberIdRequired, GroupAuthorizationFailed, TopicAuthorizationFailed,
                InconsistentGroupProtocol, UnknownTopicOrPartition, OffsetMetadataTooLarge,
                GroupMaxSizeReached, UnsupportedVersion, InvalidSessionTimeout, InvalidGroupId,
                UnreleasedInstanceId, UnstableOffsetCommit)
    if cls.error_code is not None
}


def error_for_code(code: int, context: str = "") -> GroupError | None:
    """The exception for broker ``code`` (None for 0 = no error). Unknown codes give ``BrokerError``."""
    if code == 0:
        return None
    cls = _BY_CODE.get(code)
    if cls is None:
        return BrokerError(code, context)
    return cls(context)


def raise_for_error_code(code: int, context: str = "") -> None:
    """Raise the exception for a broker error code; return quietly for 0 (no error).

    This is the single place where response error codes are classified. ``context`` names the
    request and group (it ends up in the message only).
    """
    error = error_for_code(code, context)
    if error is not None:
        raise error


def kafka_python_errors():
    """kafka-python's ``errors`` module (Kafka's error codes and client exceptions), imported at
    first need: a process that only plans or reads batches (a Spark planner, an executor) then
    never pays for importing kafka-python."""
    return importlib.import_module("kafka.errors")


def _kafka_name(code: int) -> str:
    """The Kafka error name for ``code`` as kafka-python knows it (``UNKNOWN_SERVER_ERROR`` style)."""
    cls = kafka_python_errors().kafka_errors.get(code)
    message = getattr(cls, "message", None)
    return str(message) if message else f"BROKER_ERROR_{code}"


def translate_client_error(exc: BaseException, context: str = "") -> GroupError:
    """Map a kafka-python client exception (no broker error code) to a ``GroupError``.

    Lost connections, timeouts, unready nodes and garbled responses (the client closes that
    connection) become ``CoordinatorUnreachable`` (retriable, rediscover); authentication failures
    and version mismatches are fatal; anything else is a ``ClientError``, which the member loop
    retries a bounded number of times in a row (``member_loop.MAX_CLIENT_ERRORS``).
    """
    if isinstance(exc, GroupError):
        return exc
    text = f"{context}: {type(exc).__name__}: {exc}" if context else f"{type(exc).__name__}: {exc}"
    kafka_errors = kafka_python_errors()
    if isinstance(exc, (kafka_errors.SaslAuthenticationFailedError, kafka_errors.AuthorizationError,
                        kafka_errors.UnsupportedSaslMechanismError)):
        return AuthenticationFailed(text)
    if isinstance(exc, kafka_errors.UnsupportedVersionError):
        return UnsupportedVersion(text)
    if isinstance(exc, (kafka_errors.RetriableError, kafka_errors.KafkaConnectionError,
                        kafka_errors.UnknownBrokerIdError, kafka_errors.KafkaProtocolError,
                        ConnectionError, TimeoutError)):
        return CoordinatorUnreachable(text)  # a garbled frame also closes the connection
    return ClientError(text)
