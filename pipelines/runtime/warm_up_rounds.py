"""When a member has rehearsed enough micro-batches before it joins its group (pure logic).

A fresh driver runs its first micro-batches several times slower than a warm one: its JVM loads
classes and compiles Spark's planning and execution paths as they are used, and the executors'
Python workers import their modules. A partition handed over to a member that just joined waits
for those batches (measured on 2 cores with three drivers: the joining member's first batch took
2.3 s while the others' took 0.3-0.6 s, and its batches took 20 s to come down to theirs). So an
``scg-kafka`` member rehearses batches in its own query before it joins (nothing is written), until
they stop getting faster: the time this costs delays only its own join, never the group.

:class:`WarmUpRounds` decides, from the durations of the rehearsed batches, whether to run another.
Not thread safe: one per warm-up, on the runner's main thread.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MAX_BATCHES = 12       # rehearsed batches at most, the query's first included
MAX_SECONDS = 15.0     # ... and none whose trigger would come this long after the first ended
STALL_BATCHES = 2      # batches in a row that did not beat the best one before them: warm
GAIN = 0.9             # "beat": faster than this fraction of the best before


@dataclass
class WarmUpRounds:
    """The durations (seconds) of the rehearsed batches so far and when the first ended
    (``time.monotonic()``). :meth:`more` is False once ``max_batches`` ran, the next batch's
    trigger (``trigger_s``, the query's interval) would come ``max_seconds`` or more after the
    first ended, or the last ``stall_batches`` were each no faster than ``gain`` × the best before
    them. So a query whose trigger interval is ``max_seconds`` or longer rehearses one batch."""

    trigger_s: float = 0.0
    max_batches: int = MAX_BATCHES
    max_seconds: float = MAX_SECONDS
    stall_batches: int = STALL_BATCHES
    gain: float = GAIN
    durations: list[float] = field(default_factory=list)
    first_ended: float | None = None

    def add(self, seconds: float, now: float) -> None:
        """One more rehearsed batch, ``seconds`` long, that ended at ``now``."""
        self.durations.append(seconds)
        if self.first_ended is None:
            self.first_ended = now

    def stalled(self) -> bool:
        """The last ``stall_batches`` did not beat the best batch before them."""
        if len(self.durations) <= self.stall_batches:
            return False
        best_before = min(self.durations[:-self.stall_batches])
        return all(d > self.gain * best_before for d in self.durations[-self.stall_batches:])

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
