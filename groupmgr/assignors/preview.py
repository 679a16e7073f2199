"""Pure helpers behind ``scg assign``: show what an assignor would do, without Kafka.

``scg assign --assignor range --topic t:6 --topic u:3 --member c1=inst1:t,u --member c2``

* ``--topic NAME:PARTITIONS`` (PARTITIONS >= 1), each topic at most once;
* ``--member ID[=INSTANCE][:TOPIC,TOPIC...]``: ``=INSTANCE`` makes it a static
  member (``group.instance.id``); without a topic list the member subscribes
  to every ``--topic``.

The result is validated (:func:`~groupmgr.assignors.validate.run_assignor`)
and JSON-able; members appear in the assignor's member order.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from groupmgr.core import ExitCategory, ScgError

from .api import Subscription
from .registry import get_assignor
from .validate import run_assignor

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


class SpecError(ScgError, ValueError):
    """A ``--topic`` or ``--member`` value is malformed; ``spec`` and ``reason`` say how."""

    kind = "spec"
    condition = "BAD_SPEC"
    exit_category = ExitCategory.CONFIG

    def __init__(self, spec: str, reason: str) -> None:
        self.spec = spec
        self.reason = reason
        super().__init__(f"bad --{self.kind} {spec!r}: {reason}")


class TopicSpecError(SpecError):
    """Bad ``--topic NAME:PARTITIONS``."""

    kind = "topic"
    condition = "BAD_TOPIC_SPEC"


class MemberSpecError(SpecError):
    """Bad ``--member ID[=INSTANCE][:TOPICS]``."""

    kind = "member"
    condition = "BAD_MEMBER_SPEC"


def _check_topic_name(spec: str, topic: str, error: type[SpecError]) -> str:
    if not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
        raise error(spec, f"topic name {topic!r} is not a legal Kafka topic name ([A-Za-z0-9._-], 1-249 chars)")
    return topic


def parse_topic_spec(spec: str) -> tuple[str, int]:
    """``"t:6"`` -> ``("t", 6)``; raises :class:`TopicSpecError` when malformed."""
    topic, colon, count_text = spec.strip().rpartition(":")
    if not colon:
        raise TopicSpecError(spec, "expected NAME:PARTITIONS, e.g. orders:6")
    _check_topic_name(spec, topic, TopicSpecError)
    if not re.fullmatch(r"[0-9]{1,9}", count_text) or int(count_text) < 1:
        raise TopicSpecError(spec, f"partition count {count_text!r} is not a whole number from 1 to 999999999")
    return topic, int(count_text)


def _parse_topic_list(spec: str, text: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in text.split(","))
    for topic in topics:
        if not topic:
            raise MemberSpecError(spec, "empty topic in the topic list")
        _check_topic_name(spec, topic, MemberSpecError)
    return tuple(dict.fromkeys(topics))


def parse_member_spec(spec: str, default_topics: Sequence[str] = ()) -> tuple[str, Subscription]:
    """``"c1=inst1:t,u"`` -> ``("c1", Subscription(("t", "u"), group_instance_id="inst1"))``.

    Without ``:TOPICS`` the member subscribes to ``default_topics``. Raises
    :class:`MemberSpecError` when malformed.
    """
    head, colon, topic_text = spec.strip().partition(":")
    member_id, equals, instance = head.partition("=")
    member_id, instance = member_id.strip(), instance.strip()
    if not member_id:
        raise MemberSpecError(spec, "member id is empty")
    if equals and not instance:
        raise MemberSpecError(spec, "group instance id after '=' is empty")
    if colon and not topic_text.strip():
        raise MemberSpecError(spec, "topic list after ':' is empty")
    topics = _parse_topic_list(spec, topic_text) if colon else tuple(default_topics)
    return member_id, Subscription(topics, group_instance_id=instance if equals else None)


def _parse_topics(topics: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for spec in topics:
        topic, count = parse_topic_spec(spec)
        if topic in counts:
            raise TopicSpecError(spec, f"topic {topic!r} given twice")
        counts[topic] = count
    if not counts:
        raise TopicSpecError("", "give at least one --topic NAME:PARTITIONS")
    return counts


def _parse_members(members: Iterable[str], counts: dict[str, int]) -> dict[str, Subscription]:
    subscriptions: dict[str, Subscription] = {}
    for spec in members:
        member_id, subscription = parse_member_spec(spec, tuple(counts))
        if member_id in subscriptions:
            raise MemberSpecError(spec, f"member id {member_id!r} given twice")
        unknown = [t for t in subscription.topics if t not in counts]
        if unknown:
            raise MemberSpecError(spec, f"topic(s) {', '.join(unknown)} not given with --topic")
        subscriptions[member_id] = subscription
    if not subscriptions:
        raise MemberSpecError("", "give at least one --member ID[=INSTANCE][:TOPICS]")
    instances = [s.group_instance_id for s in subscriptions.values() if s.group_instance_id is not None]
    duplicated = sorted({i for i in instances if instances.count(i) > 1})
    if duplicated:
        raise MemberSpecError("", f"group instance id(s) {', '.join(duplicated)} used by several members")
    return subscriptions


def preview(assignor_name: str, topics: Iterable[str], members: Iterable[str]) -> dict[str, Any]:
    """Run the named assignor on parsed specs; returns a JSON-able dict.

    Shape: ``{"assignor": name, "topics": {"t": 6}, "members": {member_id:
    {"instance": str | None, "partitions": {"t": [0, 1]}}}}`` with every
    subscribed topic listed per member (empty list if it got none of it).
    """
    counts = _parse_topics(topics)
    subscriptions = _parse_members(members, counts)
    assignor = get_assignor(assignor_name)
    assignment = run_assignor(assignor, counts, subscriptions)
    out: dict[str, Any] = {}
    for member_id, partitions in assignment.items():
        subscription = subscriptions[member_id]
        per_topic: dict[str, list[int]] = {t: [] for t in sorted(subscription.topics)}
        for tp in partitions:
            per_topic[tp.topic].append(tp.partition)
        out[member_id] = {"instance": subscription.group_instance_id, "partitions": per_topic}
    return {"assignor": assignor.name, "topics": counts, "members": out}
