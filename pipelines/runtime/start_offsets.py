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


def choose_start_offset(tp: TopicPartition, delta: Mapping[TopicPartition, int | None],
                        committed: Mapping[TopicPartition, int | None], policy: str,
                        earliest: int | None, latest: int | None) -> StartDecision | None:
    """Pure: ``tp``'s start offset by the precedence above; None when nothing decides it (the
    policy is ``error``, or the brokers' offset the policy needs is unknown). A recorded offset
    outside the log is kept as is: :mod:`pipelines.runtime.partition_checks` judges it."""
    if delta.get(tp) is not None:
        return StartDecision(int(delta[tp]), "delta")
    if committed.get(tp) is not None and committed[tp] >= 0:
        return StartDecision(int(committed[tp]), "kafka")
    if policy == "earliest" and earliest is not None:
        return StartDecision(earliest, "earliest")
    if policy == "latest" and latest is not None:
        return StartDecision(latest, "latest")
    return None


def choose_start_offsets(partitions: Iterable[TopicPartition],
                         delta: Mapping[TopicPartition, int | None],
                         committed: Mapping[TopicPartition, int | None],
                         policy: str,
                         earliest: Mapping[TopicPartition, int],
                         latest: Mapping[TopicPartition, int]) -> dict[TopicPartition, StartDecision]:
    """Pure: :func:`choose_start_offset` for every partition; raises NoStartingOffsetError naming
    the partitions nothing decides."""
    chosen: dict[TopicPartition, StartDecision] = {}
    missing: list[TopicPartition] = []
    for tp in sorted(set(partitions)):
        decision = choose_start_offset(tp, delta, committed, policy, earliest.get(tp), latest.get(tp))
        if decision is None:
            missing.append(tp)
        else:
            chosen[tp] = decision
    if missing:
        raise NoStartingOffsetError(missing)
    return chosen


def lowest_recorded(recorded: Iterable[Mapping[TopicPartition, int | None]]) -> dict[TopicPartition, int]:
    """Per partition, the lowest offset that several output tables hold (each table's recorded
    offsets in ``recorded``): where the pipeline goes on from, since a batch committed to some
    tables and not yet to the others is read again from there. A table that holds nothing of a
    partition yet (one added to the pipeline later) does not count; a partition no table holds
    is left out."""
    lowest: dict[TopicPartition, int] = {}
    for offsets in recorded:
        for tp, offset in offsets.items():
            if offset is not None and (tp not in lowest or offset < lowest[tp]):
                lowest[tp] = offset
    return lowest
