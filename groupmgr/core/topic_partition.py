"""The partition value every layer shares."""
from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic; immutable, hashable, sorts by (topic, partition)."""

    topic: str
    partition: int
