"""Does the group's coordinator accept a session timeout? Asked with a JoinGroup that cannot join.

The coordinator checks a JoinGroup's session timeout against ``group.min/max.session.timeout.ms``
before anything else, and refuses a JoinGroup that offers no assignor with
``INCONSISTENT_GROUP_PROTOCOL`` before it adds a member. So a JoinGroup with the session timeout
and no assignor is answered ``INVALID_SESSION_TIMEOUT`` when the timeout is out of range, and
``INCONSISTENT_GROUP_PROTOCOL`` when it is accepted: no member is added and no rebalance starts.

The group is not left untouched when it did not exist: the classic coordinator creates an empty
group for an unknown group id before it answers, so the group id then appears (``Empty``, no
members, no offsets) until the coordinator's periodic cleanup removes it
(``offsets.retention.check.interval.ms``, 10 minutes by default).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from kafka.protocol.consumer import JoinGroupRequest

from groupmgr.consumer_protocol import PROTOCOL_TYPE
from groupmgr.coordinator_client import CoordinatorClient
from groupmgr.group_errors import GroupError, InconsistentGroupProtocol, InvalidSessionTimeout


class Answer(enum.Enum):
    """The coordinator's answer about a session timeout."""

    ACCEPTED = "accepted"   # answered INCONSISTENT_GROUP_PROTOCOL: the timeout passed its check
    REFUSED = "refused"     # answered INVALID_SESSION_TIMEOUT
    UNKNOWN = "unknown"     # no answer (a retriable transport error) or another answer


@dataclass(frozen=True)
class SessionTimeoutAnswer:
    """:class:`Answer` and one line saying why."""

    answer: Answer
    detail: str


def check_session_timeout(client: CoordinatorClient, group_id: str, session_timeout_ms: int,
                          rebalance_timeout_ms: int, timeout_s: float) -> SessionTimeoutAnswer:
    """Ask the coordinator once whether it accepts ``session_timeout_ms``. ``ACCEPTED`` and
    ``REFUSED`` only on the answers that say so; ``UNKNOWN`` for any other answer code
    (``NOT_COORDINATOR``, ``GROUP_AUTHORIZATION_FAILED``, ...) and for a retriable transport error
    (the coordinator unreachable, a timeout). A transport error that is not retriable
    (authentication) propagates as its :mod:`groupmgr.group_errors` error."""
    request = JoinGroupRequest(group_id=group_id, session_timeout_ms=session_timeout_ms,
                               rebalance_timeout_ms=rebalance_timeout_ms, member_id="",
                               group_instance_id=None, protocol_type=PROTOCOL_TYPE, protocols=[],
                               reason="scg: session timeout check, joins nothing")
    try:
        error_code = client.send_once(request, lambda response: response.error_code, timeout_s=timeout_s)
    except GroupError as exc:
        if not exc.retriable:
            raise
        return SessionTimeoutAnswer(Answer.UNKNOWN, f"the coordinator did not answer: {exc.headline()}")
    if error_code == InvalidSessionTimeout.error_code:
        return SessionTimeoutAnswer(
            Answer.REFUSED,
            f"group {group_id}: the coordinator refuses session timeout {session_timeout_ms} ms "
            "(outside its group.min.session.timeout.ms..group.max.session.timeout.ms; "
            "Kafka's defaults: 6 s..30 min)")
    if error_code == InconsistentGroupProtocol.error_code:
        return SessionTimeoutAnswer(Answer.ACCEPTED, f"{session_timeout_ms} ms accepted by the coordinator")
    return SessionTimeoutAnswer(Answer.UNKNOWN, f"the coordinator answered {_code_name(error_code)}, "
                                                "which says nothing about the session timeout")


def _code_name(code: int) -> str:
    import kafka.errors as kafka_errors

    name = getattr(kafka_errors.for_code(code), "message", "") or "error code"
    return f"{name} ({code})"
