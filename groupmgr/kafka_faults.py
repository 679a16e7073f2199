"""Transient or permanent: the one classification of Kafka client errors, and bounded backoff.

A **transient** fault goes away by itself (a broker restart, a leader or coordinator move, a
timeout); the caller retries it with backoff and never lets it end the member. A **permanent**
fault needs a person (authentication, authorization, a bad argument, an unsupported version, a
newer instance with our ``group_instance_id``); the caller stops with the fault's ``condition``.

Rules of :func:`classify_kafka` (pure, no I/O), first match wins:

1. ``GroupError`` (this package's broker errors): ``FENCED_INSTANCE_ID`` is permanent; otherwise
   ``retriable`` or ``fenced`` (rejoin) is transient, anything else permanent.
2. confluent-kafka ``KafkaException`` / ``KafkaError``: a broker error code (> 0) is transient iff
   Apache Kafka marks it retriable (kafka-python's code table mirrors Kafka's ``Errors``:
   NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, LEADER_NOT_AVAILABLE, REQUEST_TIMED_OUT,
   COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ...); a librdkafka local code (< 0) is transient iff
   it is in :data:`TRANSIENT_LOCAL_CODES` (``_TRANSPORT``, ``_TIMED_OUT``, ``_ALL_BROKERS_DOWN``,
   ...) or librdkafka itself says ``retriable()``; a ``fatal()`` error is always permanent.
3. kafka-python ``KafkaError``: its ``retriable`` flag.
4. ``ConnectionError`` / ``TimeoutError``: transient.

Anything else is not a Kafka error: :func:`classify_kafka` returns None and the caller decides.
``UNKNOWN_TOPIC_OR_PARTITION`` is retriable in Kafka (metadata may lag a new topic) but a topic
that stays unknown needs a person: it is transient with ``give_up_after_s`` set.
"""
from __future__ import annotations

import enum
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from groupmgr.group_errors import FencedInstanceId, GroupError, kafka_python_errors

T = TypeVar("T")


class FaultKind(enum.Enum):
    """How a failure should be handled."""

    TRANSIENT = "transient"   # retry with backoff, never fatal
    PERMANENT = "permanent"   # a person must fix it: stop with the named condition
    UNKNOWN = "unknown"       # not recognised: retried a bounded number of times, then fatal


@dataclass(frozen=True)
class Fault:
    """A classified failure: its kind, a stable condition name, and a one-line detail.

    ``give_up_after_s``: a transient fault that persists this long (same condition, no success in
    between) is treated as permanent; None means retry forever."""

    kind: FaultKind
    condition: str
    detail: str = ""
    give_up_after_s: float | None = None

    @property
    def transient(self) -> bool:
        return self.kind is FaultKind.TRANSIENT

    def headline(self) -> str:
        return f"[{self.condition}] {self.detail}".rstrip()


UNKNOWN_TOPIC_GIVE_UP_S = 300.0

# librdkafka's local (negative) error codes that mean "the cluster is not reachable right now".
TRANSIENT_LOCAL_CODES = frozenset({
    -195,  # _TRANSPORT
    -185,  # _TIMED_OUT
    -166,  # _TIMED_OUT_QUEUE
    -192,  # _MSG_TIMED_OUT
    -187,  # _ALL_BROKERS_DOWN
    -180,  # _WAIT_COORD
    -193,  # _RESOLVE
    -190,  # _UNKNOWN_PARTITION (metadata not refreshed yet)
    -188,  # _UNKNOWN_TOPIC (metadata not refreshed yet)
    -184,  # _QUEUE_FULL
    -164,  # _WAIT_CACHE
    -153,  # _RETRY
    -182,  # _NODE_UPDATE
})
# Codes that are transient only for a while: after give_up_after_s they need a person.
_SLOW_TO_GIVE_UP = {3: UNKNOWN_TOPIC_GIVE_UP_S, -188: UNKNOWN_TOPIC_GIVE_UP_S, -190: UNKNOWN_TOPIC_GIVE_UP_S}


def classify_kafka(exc: BaseException) -> Fault | None:
    """The fault of a Kafka client error (see the module rules), or None if ``exc`` is not one."""
    if isinstance(exc, GroupError):
        transient = (exc.retriable or exc.fenced) and not isinstance(exc, FencedInstanceId)
        return _fault(transient, exc.condition, exc)
    confluent = _confluent_error(exc)
    if confluent is not None:
        return classify_kafka_code(confluent.code(), confluent.name(), confluent.str(),
                                   retriable=confluent.retriable(), fatal=confluent.fatal())
    kafka_python = sys.modules.get("kafka.errors")  # not imported: no kafka-python error can exist
    if kafka_python is not None and isinstance(exc, kafka_python.KafkaError):
        code = getattr(exc, "errno", None)
        condition = str(getattr(exc, "message", "") or type(exc).__name__)
        give_up = _SLOW_TO_GIVE_UP.get(code) if isinstance(code, int) else None
        return _fault(bool(getattr(exc, "retriable", False)), condition, exc, give_up)
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return _fault(True, "CONNECTION_FAILED" if isinstance(exc, ConnectionError) else "TIMED_OUT", exc)
    return None


def classify_kafka_code(code: int, name: str = "", detail: str = "", *, retriable: bool = False,
                        fatal: bool = False) -> Fault:
    """The fault of one Kafka error code (broker codes > 0, librdkafka local codes < 0)."""
    condition = (name or _broker_error_name(code)).lstrip("_") or f"KAFKA_ERROR_{code}"
    if condition == "NOT_LEADER_FOR_PARTITION":
        condition = "NOT_LEADER_OR_FOLLOWER"   # Kafka's current name of code 6
    if fatal:
        transient = False
    elif code > 0:
        transient = bool(getattr(kafka_python_errors().for_code(code), "retriable", False))
    else:
        transient = code in TRANSIENT_LOCAL_CODES or retriable
    kind = FaultKind.TRANSIENT if transient else FaultKind.PERMANENT
    return Fault(kind, condition, _one_line(detail), _SLOW_TO_GIVE_UP.get(code) if transient else None)


def _confluent_error(exc: BaseException):
    """The confluent_kafka KafkaError inside ``exc`` (KafkaException wraps one), else None."""
    try:
        from confluent_kafka import KafkaError, KafkaException
    except ImportError:  # pragma: no cover - confluent-kafka is a dependency
        return None
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    if isinstance(exc, KafkaError):  # pragma: no cover - KafkaError is not an exception class today
        return exc
    return None


def _broker_error_name(code: int) -> str:
    cls = kafka_python_errors().kafka_errors.get(code)
    return str(getattr(cls, "message", "") or "")


def _fault(transient: bool, condition: str, exc: BaseException, give_up: float | None = None) -> Fault:
    kind = FaultKind.TRANSIENT if transient else FaultKind.PERMANENT
    return Fault(kind, condition, _one_line(f"{type(exc).__name__}: {exc}"), give_up if transient else None)


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential backoff with jitter: attempt n (1-based) waits
    ``min(max_s, initial_s * multiplier**(n-1))`` scaled by a factor in ``[1-jitter, 1+jitter]``
    (never above ``max_s``). Pure: the random source is passed in."""

    initial_s: float = 0.5
    max_s: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def delay(self, attempt: int, rand: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (>= 1); ``rand`` in [0, 1) (random if None)."""
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        base = min(self.max_s, self.initial_s * self.multiplier ** min(attempt - 1, 64))
        u = random.random() if rand is None else rand
        return min(self.max_s, max(0.0, base * (1 - self.jitter + 2 * self.jitter * u)))


class FaultStreak:
    """Consecutive failures of one activity (reset by a success): the attempt number for the
    backoff, and since when the current condition persists (for ``give_up_after_s``).
    Not thread safe; the clock is injected."""

    def __init__(self, clock) -> None:
        self._clock = clock
        self.attempts = 0
        self._condition: str | None = None
        self._since = 0.0

    def failed(self, fault: Fault) -> int:
        """Record a failure; returns the attempt number (1 for the first failure of a streak)."""
        if fault.condition != self._condition:
            self._condition, self._since = fault.condition, self._clock()
        self.attempts += 1
        return self.attempts

    def persisted_s(self) -> float:
        """How long the current condition has persisted (0 without failures)."""
        return 0.0 if self._condition is None else self._clock() - self._since

    def gave_up(self, fault: Fault) -> bool:
        """True when ``fault`` is transient but has persisted past its ``give_up_after_s``."""
        return (fault.give_up_after_s is not None and fault.condition == self._condition
                and self.persisted_s() >= fault.give_up_after_s)

    def succeeded(self) -> None:
        self.attempts, self._condition, self._since = 0, None, 0.0


def call_with_retries(action: Callable[[], T], classify: Callable[[BaseException], Fault | None], *,
                      backoff: Backoff, deadline: float, clock: Callable[[], float],
                      wait: Callable[[float], bool],
                      on_retry: Callable[[Fault, int, float], None] = lambda fault, attempt, delay: None) -> T:
    """``action()`` until it succeeds. A transient fault (by ``classify``) is retried after
    ``backoff.delay(attempt)``, reported once per retry through ``on_retry(fault, attempt, delay)``;
    anything else, a wait that would pass ``deadline`` (on ``clock``; the waits alone never add up
    past it either, whatever the clock says), or ``wait(delay)`` returning True (stop requested)
    re-raises the last error."""
    attempt, budget = 0, deadline - clock()
    while True:
        try:
            return action()
        except Exception as exc:  # noqa: BLE001 - classified; re-raised unless transient
            fault = classify(exc)
            attempt += 1
            delay = backoff.delay(attempt)
            budget -= delay
            if fault is None or not fault.transient or clock() + delay > deadline or budget < 0:
                raise
            on_retry(fault, attempt, delay)
            if wait(delay):
                raise
