"""When a member has rehearsed enough micro-batches before it joins its group (pure logic).

A fresh driver runs its first micro-batches slower than a warm one: its JVM loads classes and
compiles Spark's planning and execution paths as they are used, and the executors' Python
workers import their modules. A partition handed over to a member that just joined waits for
those batches. The batches get faster slowly and unevenly (one in three is slower than the one
before), so an ``scg-kafka`` member that joins a group whose partitions others read, with a
``source.warm_up_limit`` above 0 s, rehearses batches in its own query before it joins (nothing
is written) until a window of them is no faster than the window before, or up to that limit:
the time this costs delays only its own join, never the group. By default (0 s), and when
others read its partitions but someone waits for it (a backlog to share), it rehearses one
batch; when nobody else reads the partitions it would take (an empty group, its own static
instance still in the group), none (``warm_up.who_waits``, asked again after each batch).

:class:`WarmUpRounds` decides, from the durations of the rehearsed batches, whether to run another.
Not thread safe: one per warm-up, on the runner's main thread.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

MAX_BATCHES = 100      # rehearsed batches at most, the query's first included
MAX_SECONDS = 60.0     # ... and none whose trigger would come this long after the first ended
WINDOW = 10            # batches compared by their median with the WINDOW before them
GAIN = 0.9             # warm once a window's median is not below this fraction of the one before


@dataclass
class WarmUpRounds:
    """The durations (seconds) of the rehearsed batches so far and when the first ended
    (``time.monotonic()``). :meth:`more` is False once ``max_batches`` ran, the next batch's
    trigger (``trigger_s``, the query's interval) would come ``max_seconds`` or more after the
    first ended, or the median of the last ``window`` batches is not below ``gain`` × the median
    of the ``window`` before them (the query's first batch, which starts the JVM's work, is not
    compared). So a query whose trigger interval is ``max_seconds`` or longer rehearses one batch."""

    trigger_s: float = 0.0
    max_batches: int = MAX_BATCHES
    max_seconds: float = MAX_SECONDS
    window: int = WINDOW
    gain: float = GAIN
    durations: list[float] = field(default_factory=list)
    first_ended: float | None = None

    def add(self, seconds: float, now: float) -> None:
        """One more rehearsed batch, ``seconds`` long, that ended at ``now``."""
        self.durations.append(seconds)
        if self.first_ended is None:
            self.first_ended = now

    def stalled(self) -> bool:
        """The last ``window`` batches were, by their median, no faster than ``gain`` × the
        ``window`` before them."""
        compared = self.durations[1:]
        if len(compared) < 2 * self.window:
            return False
        last = statistics.median(compared[-self.window:])
        before = statistics.median(compared[-2 * self.window:-self.window])
        return last > self.gain * before

    def more(self, now: float) -> bool:
        """Whether to rehearse another batch."""
        if not self.durations:
            return True
        if len(self.durations) >= self.max_batches or now + self.trigger_s - self.first_ended >= self.max_seconds:
            return False
        return not self.stalled()

    def summary(self) -> str:
        """E.g. ``7 batches, 5.94s first, 0.85s best``."""
        if not self.durations:
            return "no batch"
        count = len(self.durations)
        return (f"{count} batch{'es' if count != 1 else ''}, {self.durations[0]:.2f}s first, "
                f"{min(self.durations):.2f}s best")
