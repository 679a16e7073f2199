"""A settable monotonic clock for timer and member-loop tests (injected where the code takes a
``clock`` callable)."""
from __future__ import annotations


class FakeClock:
    """Returns ``now`` when called; only :meth:`advance` moves it."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
