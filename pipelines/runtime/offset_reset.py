"""Moving a pipeline's offsets on purpose (``scg offsets FILE reset``): the pure part.

A pipeline's output table, not its consumer group, holds where each partition goes on (start
precedence: table > group > policy, :mod:`pipelines.runtime.start_offsets`), so a reset must move
the tables' ``<name>:offset:<topic>:<partition>`` transactions, and the group's commits with them.
This module turns what the command read (the tables' and the group's offsets, the brokers' log
start and end, ListOffsets' answers for a timestamp) into a :class:`ResetPlan`, or refuses:

* ``--to`` is ``earliest`` (the log start), ``latest`` (the log end), a whole number (an offset),
  or an ISO-8601 time (the first offset whose record time is at or after it; a time without a
  zone is UTC). Anything else: ``RESET_BAD_TARGET``.
* ``--partitions`` is ``TOPIC:PARTITION[,TOPIC:PARTITION...]``; malformed: ``RESET_BAD_PARTITIONS``;
  a partition the pipeline's topics do not have: ``RESET_UNKNOWN_PARTITION``.
* The target must lie in the log: ``log start <= offset <= log end`` (``RESET_OUT_OF_RANGE``); a
  time with no record at or after it in a partition is refused, never mapped to the log end
  (``RESET_TIMESTAMP_PAST_END``); a partition the brokers did not describe cannot be checked
  (``RESET_LOG_UNKNOWN``).

Every refusal names each partition (or the argument) it is about and happens before anything is
written. Offsets are next-offset-to-read (docs/DESIGN.md, invariant 2). No I/O here.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from groupmgr.core import ExitCategory, ScgError, TopicPartition

EARLIEST, LATEST, OFFSET, TIMESTAMP = "earliest", "latest", "offset", "timestamp"
OFFSETS_RESET = "OFFSETS_RESET"       # the ``scg.event`` of a reset's commit in the Delta history
RESET_METADATA = "scg:reset:"         # the group commit's metadata prefix (followed by who reset)
_PARTITION = re.compile(r"^(?P<topic>[A-Za-z0-9._-]+):(?P<partition>\d+)$")


class OffsetResetError(ScgError):
    """Base of the reset's errors. Exit 2 unless a subclass says otherwise: the command's input
    is wrong and nothing was written."""

    condition = "RESET_ERROR"
    exit_category = ExitCategory.CONFIG
    advice = ""   # said once after the details, however many partitions they name

    def __init__(self, detail: str):
        self.detail = detail
        super().__init__(f"{detail}; {self.advice}" if self.advice else detail)


class BadResetTarget(OffsetResetError):
    """``--to`` is not ``earliest``, ``latest``, an offset or an ISO-8601 time."""

    condition = "RESET_BAD_TARGET"


class BadPartitionList(OffsetResetError):
    """``--partitions`` is not a list of ``TOPIC:PARTITION``."""

    condition = "RESET_BAD_PARTITIONS"


class UnknownResetPartition(OffsetResetError):
    """A partition the pipeline's topics do not have."""

    condition = "RESET_UNKNOWN_PARTITION"


class ResetOutOfRange(OffsetResetError):
    """A target offset below the log start or above the log end."""

    condition = "RESET_OUT_OF_RANGE"
    advice = "choose an offset within the log (scg offsets FILE show gives both ends)"


class TimestampPastEnd(OffsetResetError):
    """A partition has no record at or after the target time."""

    condition = "RESET_TIMESTAMP_PAST_END"
    advice = "leave those partitions out with --partitions, or reset them --to latest"


class GroupHasMembers(OffsetResetError):
    """The group has members and ``--force`` was not given; names them."""

    condition = "RESET_GROUP_HAS_MEMBERS"


class LogUnknown(OffsetResetError):
    """The brokers did not describe a partition's log, so its target cannot be checked (exit 1:
    try again once they answer)."""

    condition = "RESET_LOG_UNKNOWN"
    exit_category = ExitCategory.RUNTIME
    advice = "nothing was written; try again when the brokers answer"


class ResetIncomplete(OffsetResetError):
    """A write of the reset failed after another succeeded; the message says which were written.
    Run the same command again (exit 1)."""

    condition = "RESET_INCOMPLETE"
    exit_category = ExitCategory.RUNTIME


@dataclass(frozen=True)
class ResetTarget:
    """Where ``--to`` moves the partitions: ``kind`` is earliest, latest, offset or timestamp;
    ``value`` the offset, or the time in milliseconds since the epoch (UTC)."""

    kind: str
    value: int | None = None

    def __str__(self) -> str:
        if self.kind == OFFSET:
            return f"offset {self.value}"
        if self.kind == TIMESTAMP:
            when = datetime.fromtimestamp(self.value / 1000, timezone.utc)
            return f"time {when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}"
        return self.kind


def parse_target(text: str) -> ResetTarget:
    """``--to``: earliest, latest, a whole number >= 0 (an offset) or an ISO-8601 date or time
    (UTC unless it names a zone). Raises BadResetTarget naming the argument."""
    given = (text or "").strip()
    if given.lower() in (EARLIEST, LATEST):
        return ResetTarget(given.lower())
    if given.isdigit():
        return ResetTarget(OFFSET, int(given))
    try:
        when = datetime.fromisoformat(given)
    except ValueError:
        raise BadResetTarget(f"--to {text!r}: give earliest, latest, an offset (a whole number >= 0) "
                             "or an ISO-8601 time such as 2026-01-31T12:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    millis = int(when.timestamp() * 1000)
    if millis < 0:
        raise BadResetTarget(f"--to {text!r}: a time before 1970 has no Kafka offset")
    return ResetTarget(TIMESTAMP, millis)


def parse_partitions(text: str | None) -> tuple[TopicPartition, ...] | None:
    """``--partitions``: ``TOPIC:PARTITION[,...]`` (None: every partition), sorted, each once.
    Raises BadPartitionList naming the entry that is not one."""
    if text is None:
        return None
    found = set()
    for entry in text.split(","):
        match = _PARTITION.match(entry.strip())
        if match is None:
            raise BadPartitionList(f"--partitions {text!r}: {entry.strip()!r} is not TOPIC:PARTITION "
                                   "(for example orders:0,orders:3)")
        found.add(TopicPartition(match["topic"], int(match["partition"])))
    return tuple(sorted(found))


def select_partitions(existing: Iterable[TopicPartition],
                      wanted: Sequence[TopicPartition] | None) -> tuple[TopicPartition, ...]:
    """The partitions a reset moves: ``wanted`` (every one of ``existing`` when None), each of
    which ``existing`` (the partitions of the pipeline's topics) must have. Raises
    UnknownResetPartition naming each one it lacks."""
    existing = sorted(set(existing))
    if wanted is None:
        if not existing:
            raise UnknownResetPartition("the pipeline's topics have no partitions (do they exist?)")
        return tuple(existing)
    have = set(existing)
    unknown = [tp for tp in wanted if tp not in have]
    if unknown:
        counts = {}
        for tp in existing:
            counts[tp.topic] = counts.get(tp.topic, 0) + 1
        known = ", ".join(f"{t} (0..{n - 1})" for t, n in sorted(counts.items())) or "none"
        raise UnknownResetPartition(f"no partition {_names(unknown)} in the pipeline's topics; "
                                    f"they have {known}")
    return tuple(sorted(set(wanted)))


@dataclass(frozen=True)
class PartitionState:
    """One partition as the command read it: the output and dead-letter tables' next offsets,
    the group's committed offset and its metadata, the log start and end (None: not recorded, or
    not answered; ``log_error`` then names why the brokers did not describe it) and the topic ID
    fingerprint the brokers describe."""

    tp: TopicPartition
    table: int | None = None
    dead_letters: int | None = None
    committed: int | None = None
    metadata: str = ""
    log_start: int | None = None
    log_end: int | None = None
    topic_id: int | None = None
    log_error: str | None = None

    @property
    def position(self) -> int | None:
        """Where the partition goes on: the table's offset, else the group's (start precedence)."""
        return self.table if self.table is not None else self.committed

    @property
    def lag(self) -> int | None:
        """Log end minus :attr:`position`; None when either is unknown."""
        if self.log_end is None or self.position is None:
            return None
        return max(self.log_end - self.position, 0)


@dataclass(frozen=True)
class ResetMove:
    """One partition's move: where each of the three places stands now, and ``to``."""

    tp: TopicPartition
    table_from: int | None
    dead_from: int | None
    group_from: int | None
    to: int

    def line(self) -> str:
        """``topic:partition: table A -> T, dead letters B -> T, group C -> T`` ("-": none)."""
        return (f"{_names([self.tp])}: table {_dash(self.table_from)} -> {self.to}, "
                f"dead letters {_dash(self.dead_from)} -> {self.to}, group {_dash(self.group_from)} -> {self.to}")


@dataclass(frozen=True)
class ResetPlan:
    """Every partition's move to ``target``, sorted by partition (immutable)."""

    target: ResetTarget
    moves: tuple[ResetMove, ...]

    @property
    def offsets(self) -> dict[TopicPartition, int]:
        return {m.tp: m.to for m in self.moves}

    def lines(self) -> list[str]:
        return [f"reset to {self.target}:"] + [f"  {m.line()}" for m in self.moves]


def resolve_target(state: PartitionState, target: ResetTarget, at_time: int | None = None) -> int:
    """``state``'s offset for ``target`` (``at_time``: ListOffsets' answer for a timestamp
    target; None or negative when no record is at or after it). Raises LogUnknown,
    ResetOutOfRange or TimestampPastEnd naming the partition."""
    name = _names([state.tp])
    if state.log_start is None or state.log_end is None:
        raise LogUnknown(f"{name}: the brokers did not describe its log ({state.log_error or 'no answer'})")
    if target.kind == EARLIEST:
        return state.log_start
    if target.kind == LATEST:
        return state.log_end
    if target.kind == TIMESTAMP:
        if at_time is None or at_time < 0 or at_time >= state.log_end:
            raise TimestampPastEnd(f"{name}: no record at or after {target} (log end {state.log_end})")
        return max(at_time, state.log_start)
    if not state.log_start <= target.value <= state.log_end:
        raise ResetOutOfRange(f"{name}: offset {target.value} is outside its log "
                              f"{state.log_start}..{state.log_end} (log start..log end)")
    return target.value


def build_plan(states: Sequence[PartitionState], target: ResetTarget,
               at_time: Mapping[TopicPartition, int | None] | None = None) -> ResetPlan:
    """The plan moving every partition of ``states`` to ``target``. Every partition is judged
    before any is refused: the error names all partitions refused for the first reason met."""
    at_time = at_time or {}
    moves, refused = [], []
    for state in sorted(states, key=lambda s: s.tp):
        try:
            to = resolve_target(state, target, at_time.get(state.tp))
        except OffsetResetError as error:
            refused.append(error)
            continue
        moves.append(ResetMove(state.tp, state.table, state.dead_letters, state.committed, to))
    if refused:
        first = type(refused[0])
        raise first("; ".join(e.detail for e in refused if type(e) is first))
    return ResetPlan(target, tuple(moves))


def members_text(members: Iterable[tuple[str, str | None, str]]) -> str:
    """(member id, group instance id, host) of each member, as one phrase."""
    return ", ".join(f"{member_id}" + (f" (instance {instance})" if instance else "") + (f" on {host}" if host else "")
                     for member_id, instance, host in members)


def refuse_members(group_id: str, members: Sequence[tuple[str, str | None, str]]) -> None:
    """Raise GroupHasMembers naming ``members`` (none: return)."""
    if members:
        raise GroupHasMembers(f"group {group_id} has {len(members)} member(s): {members_text(members)}; "
                              "stop them first, or pass --force to fence them (their next batch is "
                              "refused and they are removed from the group, so they rejoin and start "
                              "from the new offsets)")


def commit_info(plan: ResetPlan, recorded: Mapping[TopicPartition, int | None], who: str,
                command: str) -> dict[str, str]:
    """The commit info of a reset's commit in one table: ``scg.event`` = OFFSETS_RESET, who,
    each partition's offset before (``recorded``, read after the claim) and after, the command."""
    before = ",".join(f"{tp.topic}:{tp.partition}={_dash(recorded.get(tp))}" for tp in plan.offsets)
    after = ",".join(f"{tp.topic}:{tp.partition}={to}" for tp, to in plan.offsets.items())
    return {"scg.event": OFFSETS_RESET, "scg.reset.by": who, "scg.reset.from": before[:4000],
            "scg.reset.to": after[:4000], "scg.reset.command": command[:1000],
            "scg.detail": f"offsets reset to {plan.target} by {who}"}


def _names(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}:{tp.partition}" for tp in partitions)


def _dash(value) -> str:
    return "-" if value is None else str(value)
