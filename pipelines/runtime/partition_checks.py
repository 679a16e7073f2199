"""Whether, and from where, one partition may be read (pure: no I/O).

Before a query starts, and again while a partition is stopped, the runner asks the brokers about
each owned partition's log (:class:`PartitionLog`: earliest offset, log end, the topic's ID) and
decides with :func:`check_partition`. Offsets are next-offset-to-read (docs/DESIGN.md, invariant 2).

Rules, first match wins:

1. The brokers could not describe the partition (no leader, unknown topic, timeout): the partition
   is **stopped** under that condition; the others run; it is re-checked with backoff and resumes
   by itself when the brokers answer.
2. No start offset (``starting_offsets: error`` and neither the table nor the group has one):
   stopped, ``NO_STARTING_OFFSET``; it resumes once an offset exists (or the policy changes).
3. The topic's ID is not the one the table recorded: the topic was deleted and created again.
   The new incarnation is read from its start (offset 0): the tables' offsets are **reset**
   (``TOPIC_RECREATED``, recorded in the tables' commit info). Rules 4-5 then apply to offset 0.
4. The start offset is above the log end: the log was truncated (an unclean leader election).
   The tables' offsets are reset to the log end (``LOG_TRUNCATED``): the records the table holds at
   and above it no longer exist in Kafka, and the new records that take those offsets are written,
   never taken for a replay.
5. The start offset is below the earliest offset: retention deleted records before they were read
   (``KAFKA_DATA_LOSS``). ``source.on_data_loss: fail`` stops the partition (it stays stopped and
   reported); ``skip`` moves it to the earliest offset and the lost range is written to the
   dead-letter table as one ``data_loss`` marker row. Nothing vanishes without a trace.
6. Otherwise the partition starts at its start offset.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from groupmgr.core import OffsetRange, ScgError, TopicPartition

TOPIC_RECREATED = "TOPIC_RECREATED"
LOG_TRUNCATED = "LOG_TRUNCATED"
DATA_LOSS = "KAFKA_DATA_LOSS"
NO_STARTING_OFFSET = "NO_STARTING_OFFSET"
DATA_LOSS_REASON = "data_loss"  # the dead-letter reason of a lost-range marker row
STOPPED_METADATA = "scg:stopped:"  # Kafka commit metadata prefix of a stopped partition (scg describe reads it)
METADATA_LIMIT = 1000  # characters of a stopped partition's commit metadata (brokers take 4096: offset.metadata.max.bytes)


def stopped_metadata(condition: str, detail: str) -> str:
    """The Kafka commit metadata of a partition stopped under ``condition`` (``scg describe``
    shows it as ``stopped: <condition>: <detail>``)."""
    return f"{STOPPED_METADATA}{condition}: {detail}"[:METADATA_LIMIT]


class SourceChanged(ScgError):
    """A batch found its source changed under the query: a topic recreated (new topic ID) or a
    partition's log gone back below the query's offsets. Transient: the query is restarted and the
    partition checks decide (:mod:`pipelines.runtime.partition_checks`)."""

    retriable = True

    def __init__(self, condition: str, detail: str):
        self.condition = condition  # type: ignore[misc]  # per instance
        super().__init__(f"[{condition}] {detail}")


def topic_fingerprint(topic_id: str) -> int:
    """A 63-bit number standing for a Kafka topic ID (a Delta transaction version is a signed
    64-bit integer; two IDs share a fingerprint with probability 2^-63)."""
    digest = hashlib.sha256(topic_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2 ** 63 - 1)


@dataclass(frozen=True)
class PartitionLog:
    """What the brokers say about one partition now."""

    earliest: int      # log start offset
    latest: int        # log end offset
    topic_id: int      # topic_fingerprint of the topic's ID


@dataclass(frozen=True)
class PartitionVerdict:
    """What to do with one partition.

    ``offset``: where the query starts (None when the partition is stopped). ``reset_to``: the
    offset both tables must record before the query starts, when a rule moved it (a recreated
    topic, a truncated log); None when the tables stay as they are. ``lost``: the range a ``skip``
    jumps over (its marker row goes to the dead-letter table). ``events``: the conditions that
    applied, in rule order. ``topic_id``: the fingerprint of the topic ID the brokers describe now
    (after a recreation the new one, which the tables record with the reset); None when the brokers
    did not describe the partition.
    """

    tp: TopicPartition
    offset: int | None
    condition: str | None = None          # why the partition is stopped
    detail: str = ""
    events: tuple[str, ...] = ()
    reset_to: int | None = None           # rules 3-4: the tables' offsets are set to this first
    lost: OffsetRange | None = None       # rule 5 with skip
    topic_id: int | None = None           # the brokers' topic ID fingerprint (log.topic_id)

    @property
    def runs(self) -> bool:
        return self.offset is not None


def check_partition(tp: TopicPartition, start: int | None, recorded_topic_id: int | None,
                    log: PartitionLog | None, probe_error: str | None, on_data_loss: str,
                    origin: str = "") -> PartitionVerdict:
    """Decide ``tp`` by the module rules. ``start``: the chosen start offset (None: no offset and
    the policy is ``error``); ``recorded_topic_id``: the table's fingerprint (None: none recorded);
    ``log``/``probe_error``: the brokers' answer or the condition of their failure."""
    if log is None:
        return PartitionVerdict(tp, None, probe_error or "PARTITION_UNAVAILABLE",
                                f"the brokers did not describe {_name(tp)}")
    if start is None:
        return PartitionVerdict(tp, None, NO_STARTING_OFFSET,
                                f"no recorded offset for {_name(tp)} and source.starting_offsets is 'error'",
                                topic_id=log.topic_id)
    events, details, reset_to = [], [], None
    if recorded_topic_id is not None and recorded_topic_id != log.topic_id:
        events.append(TOPIC_RECREATED)
        details.append(f"topic {tp.topic} was recreated (new topic ID); reading the new one from offset 0 "
                       f"(the table had reached {start})")
        start = reset_to = 0
    if start > log.latest:
        events.append(LOG_TRUNCATED)
        details.append(f"{_name(tp)} ends at {log.latest}, below the start offset {start} ({origin or 'recorded'}); "
                       f"the log was truncated, records from {log.latest} on are read as new")
        start = reset_to = log.latest
    if start < log.earliest:
        lost = OffsetRange(tp.topic, tp.partition, start, log.earliest)
        text = (f"offsets {start}..{log.earliest - 1} of {_name(tp)} were deleted before they were read "
                f"({log.earliest - start} records)")
        if on_data_loss != "skip":
            return PartitionVerdict(tp, None, DATA_LOSS, f"{text}; source.on_data_loss is 'fail'",
                                    tuple(events), topic_id=log.topic_id)
        events.append(DATA_LOSS)
        details.append(f"{text}; skipped (source.on_data_loss: skip), a data_loss row records the range")
        return PartitionVerdict(tp, log.earliest, None, "; ".join(details), tuple(events), reset_to, lost,
                                log.topic_id)
    return PartitionVerdict(tp, start, None, "; ".join(details), tuple(events), reset_to, None, log.topic_id)


def lost_range_value(lost: OffsetRange, detected_at_ms: int) -> bytes:
    """The value of a ``data_loss`` marker row: the lost range as JSON (offsets ``from`` inclusive,
    ``until`` exclusive, next-offset convention)."""
    return json.dumps({"lost_from": lost.start, "lost_until": lost.end, "records": lost.end - lost.start,
                       "detected_at_ms": detected_at_ms,
                       "rule": "source.on_data_loss: skip"}, sort_keys=True).encode()


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
