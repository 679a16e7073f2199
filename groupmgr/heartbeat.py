"""Heartbeat timing as a tiny value-holding object (mirrors Kafka's ``Heartbeat.java``).

``HeartbeatTimer`` never reads the clock by itself except through the injected ``clock`` (a
callable returning monotonic seconds), so tests drive it with a fake clock. Every method takes an
optional ``now``; when omitted the injected clock is read once.

Three timers:

* heartbeat timer - when the next heartbeat is due (interval after a send, exponential backoff
  capped at the interval after failures; a shorter interval while hurried, see ``hurry``);
* session timer   - expires when no heartbeat succeeded for ``session_timeout_ms``;
* poll timer      - expires when the application has not called ``poll()`` for
  ``max_poll_interval_ms`` (Kafka's ``max.poll.interval.ms``; None: no poll timer, it never
  expires). Only ``poll()`` restarts it; ``reset()`` does not.

Not thread-safe: the owner (the member) guards it with its own lock or uses it from one thread.
"""
from __future__ import annotations

import time
from typing import Callable

Clock = Callable[[], float]


class HeartbeatTimer:
    """Deadlines for heartbeats and session expiry, in seconds of the injected clock."""

    def __init__(self, session_timeout_ms: int, heartbeat_interval_ms: int,
                 retry_backoff_ms: int = 100, clock: Clock = time.monotonic,
                 max_poll_interval_ms: int | None = None) -> None:
        if heartbeat_interval_ms <= 0 or session_timeout_ms <= 0:
            raise ValueError("heartbeat interval and session timeout must be positive")
        if max_poll_interval_ms is not None and max_poll_interval_ms <= 0:
            raise ValueError(f"max_poll_interval_ms must be positive, got {max_poll_interval_ms}")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be lower than "
                             f"session_timeout_ms ({session_timeout_ms})")
        self.session_timeout_s = session_timeout_ms / 1000
        self.interval_s = heartbeat_interval_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.max_poll_interval_s = None if max_poll_interval_ms is None else max_poll_interval_ms / 1000
        self._clock = clock
        self.in_flight = False
        self.failures = 0
        self.last_sent: float | None = None
        self.last_received: float | None = None
        self.last_poll: float | None = None
        self._hurried_interval_s, self._hurried_until = self.interval_s, float("-inf")
        self.reset()
        self.poll()

    def _now(self, now: float | None) -> float:
        return self._clock() if now is None else now

    # -- events ----------------------------------------------------------------------------
    def sent(self, now: float | None = None) -> None:
        """A heartbeat request went out: the next one is due one interval later."""
        now = self._now(now)
        self.in_flight = True
        self.last_sent = now
        self._heartbeat_due = now + self._interval(now)

    def received(self, now: float | None = None) -> None:
        """A heartbeat response arrived (any answer from the coordinator): the session is alive."""
        now = self._now(now)
        self.in_flight = False
        self.failures = 0
        self.last_received = now
        self._session_deadline = now + self.session_timeout_s

    def failed(self, now: float | None = None) -> None:
        """A heartbeat got no usable answer: retry after an exponential backoff (capped at the
        interval); the session timer keeps running."""
        now = self._now(now)
        self.in_flight = False
        self.failures += 1
        self._heartbeat_due = now + min(self.interval_s, self.retry_backoff_s * 2 ** (self.failures - 1))

    def poll(self, now: float | None = None) -> None:
        """The application is alive (Java's ``Heartbeat.poll``): restart the poll timer."""
        now = self._now(now)
        self.last_poll = now
        self._poll_deadline = float("inf") if self.max_poll_interval_s is None else now + self.max_poll_interval_s

    def reset(self, now: float | None = None) -> None:
        """Restart the heartbeat and session timers (after a successful join, or a coordinator
        change); the poll timer is left alone (only ``poll()`` restarts it)."""
        now = self._now(now)
        self.in_flight = False
        self._heartbeat_due = now + self._interval(now)
        self._session_deadline = now + self.session_timeout_s

    def hurry(self, interval_s: float, for_s: float, now: float | None = None) -> None:
        """Heartbeat every ``interval_s`` (never more rarely than the configured interval) for
        the next ``for_s`` seconds, then at the configured interval again. A member hears of a
        rebalance only in a heartbeat's answer: after a cooperative round, so the follow-up
        round that gives revoked partitions their new owner (KIP-429) waits less for it."""
        now = self._now(now)
        self._hurried_interval_s, self._hurried_until = min(interval_s, self.interval_s), now + for_s
        self._heartbeat_due = min(self._heartbeat_due, now + self._hurried_interval_s)

    def _interval(self, now: float) -> float:
        return self._hurried_interval_s if now < self._hurried_until else self.interval_s

    # -- queries ---------------------------------------------------------------------------
    def should_heartbeat(self, now: float | None = None) -> bool:
        """True when a heartbeat is due."""
        return self._now(now) >= self._heartbeat_due

    def time_to_next_heartbeat(self, now: float | None = None) -> float:
        """Seconds until the next heartbeat is due (0 when overdue)."""
        return max(0.0, self._heartbeat_due - self._now(now))

    def session_expired(self, now: float | None = None) -> bool:
        """True when no heartbeat succeeded for a whole session timeout."""
        return self._now(now) >= self._session_deadline

    def poll_timeout_expired(self, now: float | None = None) -> bool:
        """True when ``poll()`` was not called for ``max_poll_interval_ms`` (never without a poll timer)."""
        return self._now(now) >= self._poll_deadline

    def time_to_poll_expiry(self, now: float | None = None) -> float:
        """Seconds until the poll timer expires (0 when expired; infinity without a poll timer)."""
        return max(0.0, self._poll_deadline - self._now(now))
