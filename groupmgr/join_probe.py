"""Does the group's coordinator accept a session timeout? Asked without joining the group.

The coordinator checks a JoinGroup's session timeout against ``group.min/max.session.timeout.ms``
before anything else, and refuses a JoinGroup that offers no assignor with
``INCONSISTENT_GROUP_PROTOCOL`` before it adds a member. So a JoinGroup with the session timeout
and no assignor is answered ``INVALID_SESSION_TIMEOUT`` when the timeout is out of range, and
otherwise refused without touching the group: no member is added, no rebalance starts.
"""
from __future__ import annotations

from kafka.protocol.consumer import JoinGroupRequest

from groupmgr.consumer_protocol import PROTOCOL_TYPE
from groupmgr.coordinator_client import CoordinatorClient
from groupmgr.group_errors import InvalidSessionTimeout


def check_session_timeout(client: CoordinatorClient, group_id: str, session_timeout_ms: int,
                          rebalance_timeout_ms: int, timeout_s: float) -> None:
    """Raise :class:`InvalidSessionTimeout` when the coordinator refuses ``session_timeout_ms``;
    return when it accepts it. Other answers are left to the member's own join (returns);
    transport errors propagate as :mod:`groupmgr.group_errors` errors."""
    request = JoinGroupRequest(group_id=group_id, session_timeout_ms=session_timeout_ms,
                               rebalance_timeout_ms=rebalance_timeout_ms, member_id="",
                               group_instance_id=None, protocol_type=PROTOCOL_TYPE, protocols=[],
                               reason="scg: session timeout check, joins nothing")
    error_code = client.send_once(request, lambda response: response.error_code, timeout_s=timeout_s)
    if error_code == InvalidSessionTimeout.error_code:
        raise InvalidSessionTimeout(
            f"group {group_id}: the coordinator refuses session timeout {session_timeout_ms} ms "
            "(outside its group.min.session.timeout.ms..group.max.session.timeout.ms; "
            "Kafka's defaults: 6 s..30 min)")
