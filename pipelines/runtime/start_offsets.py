"""Where a newly assigned partition starts reading.

Precedence (docs/DESIGN.md, data flow): the Delta table's recorded version (the next offset the table
needs) > the group's committed Kafka offset > the starting policy (earliest | latest | error).
All offsets follow Kafka's next-offset-to-read convention. Only partitions that fall through to the
policy need the brokers' earliest / latest offsets (:func:`needs_policy`), so a partition the table
or the group already knows never waits on ListOffsets.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from groupmgr.core import ScgError, TopicPartition


class NoStartingOffsetError(ScgError):
    """starting_offsets is ``error`` and neither Delta nor the group has an offset."""

    condition = "NO_STARTING_OFFSET"

    def __init__(self, partitions: list[TopicPartition]):
        self.partitions = partitions
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
        super().__init__(f"no recorded offset for {names} and source.starting_offsets is 'error'; "
                         "set it to earliest or latest to start these partitions")


@dataclass(frozen=True)
class StartDecision:
    """Where one partition starts (next offset to read) and which source decided it."""

    offset: int
    origin: str   # "delta" | "kafka" | "earliest" | "latest"


def needs_policy(partitions: Iterable[TopicPartition],
                 delta: Mapping[TopicPartition, int | None],
                 committed: Mapping[TopicPartition, int | None]) -> list[TopicPartition]:
    """Pure: the partitions (sorted) that neither the table nor the group has an offset for."""
    return [tp for tp in sorted(set(partitions))
            if delta.get(tp) is None and (committed.get(tp) is None or committed[tp] < 0)]


def choose_start_offsets(partitions: Iterable[TopicPartition],
                         delta: Mapping[TopicPartition, int | None],
                         committed: Mapping[TopicPartition, int | None],
                         policy: str,
                         earliest: Mapping[TopicPartition, int],
                         latest: Mapping[TopicPartition, int]) -> dict[TopicPartition, StartDecision]:
    """Pure: pick each partition's start offset by the precedence above.

    A recorded offset below the partition's earliest available offset (retention deleted the
    records) is kept as is: the sink then reports the gap, governed by fail_on_data_loss.
    """
    chosen: dict[TopicPartition, StartDecision] = {}
    missing: list[TopicPartition] = []
    for tp in sorted(set(partitions)):
        if delta.get(tp) is not None:
            chosen[tp] = StartDecision(int(delta[tp]), "delta")
        elif committed.get(tp) is not None and committed[tp] >= 0:
            chosen[tp] = StartDecision(int(committed[tp]), "kafka")
        elif policy == "earliest":
            chosen[tp] = StartDecision(earliest[tp], "earliest")
        elif policy == "latest":
            chosen[tp] = StartDecision(latest[tp], "latest")
        else:
            missing.append(tp)
    if missing:
        raise NoStartingOffsetError(missing)
    return chosen
