"""The range of every duration and count a pipeline file sets: what the Kafka, Spark or Python
setting it maps to can hold.

:data:`FIELD_RANGES` maps a field's dotted path to its :class:`Range`; the scalar parsers of
:mod:`pipelines.config.fields` refuse a value outside it as ``OUT_OF_RANGE``, naming the bound and
why it is there, and docs/configuration.md shows it. Every duration and count field has an entry
(a unit test compares them with the model's documented keys); :func:`range_of` gives a path
without one the widest range any setting here has, never none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1
# The longest wait a 64-bit count of nanoseconds holds (~292 years): Python's threading waits
# (threading.TIMEOUT_MAX) and the JVM's timers count in it; Spark's intervals (microseconds in a
# Java long) hold more.
NANOSECOND_CLOCK_MAX_MS = JAVA_LONG_MAX // 1_000_000


@dataclass(frozen=True)
class Range:
    """Values ``low`` to ``high`` inclusive (milliseconds for a duration); ``why`` says what sets
    ``high``."""

    low: int
    high: int
    why: str

    def holds(self, value: int) -> bool:
        return self.low <= value <= self.high


def _kafka_int(setting: str, note: str = "") -> Range:
    return Range(1, JAVA_INT_MAX, f"Kafka's {setting} is a Java int{note}")


FIELD_RANGES: Mapping[str, Range] = {
    "group.session_timeout": _kafka_int(
        "session.timeout.ms", "; a broker accepts only group.min.session.timeout.ms to "
        "group.max.session.timeout.ms (6s to 30m by default)"),
    "group.heartbeat_interval": _kafka_int("heartbeat.interval.ms"),
    "group.rebalance_timeout": _kafka_int("max.poll.interval.ms (the JoinGroup rebalance timeout)"),
    "group.metadata_max_age": Range(1, NANOSECOND_CLOCK_MAX_MS, "the member waits for it with Python's "
                                    "threading (at most threading.TIMEOUT_MAX)"),
    "source.max_offsets_per_trigger": Range(1, JAVA_LONG_MAX, "Spark's maxOffsetsPerTrigger is a Java long"),
    "source.min_offsets_per_trigger": Range(1, JAVA_LONG_MAX, "Spark's minOffsetsPerTrigger is a Java long"),
    "source.max_trigger_delay": Range(1, NANOSECOND_CLOCK_MAX_MS, "Spark's maxTriggerDelay and the "
                                      "member's timers count in a 64-bit clock"),
    "source.warm_up_limit": Range(0, NANOSECOND_CLOCK_MAX_MS, "the member waits for it with Python's "
                                  "threading (at most threading.TIMEOUT_MAX)"),
    "trigger.processing_time": Range(1, NANOSECOND_CLOCK_MAX_MS, "Spark's processingTime and the "
                                     "member's timers count in a 64-bit clock"),
    "format.max_value_bytes": Range(1, JAVA_INT_MAX, "a Kafka record is at most message.max.bytes, "
                                    "a Java int"),
}
WIDEST = Range(1, JAVA_LONG_MAX, "the widest setting here is a Java long")


def range_of(path: str) -> Range:
    """The range of the field at ``path`` (:data:`WIDEST` for a path not listed)."""
    return FIELD_RANGES.get(path, WIDEST)


def duration_text(ms: int) -> str:
    """``ms`` in the largest unit that writes it exactly, with its length in days when that is
    not whole: 1800000 -> "30m", 2147483647 -> "2147483647ms (24.9 days)"."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms ({ms / 86_400_000:,.1f} days)" if ms >= 86_400_000 else f"{ms}ms"


# Strings whose target system bounds their length, in UTF-8 bytes (other strings of a pipeline
# file, a transform's SQL say, are bounded only by the file: pipelines.config.yaml_limits).
FIELD_LENGTHS: Mapping[str, Range] = {
    "name": Range(1, 249, "a pipeline name is an id in every Delta commit's txn actions and in metric "
                  "labels; it takes a Kafka topic name's characters and length"),
    "group.id": Range(1, 2**15 - 1, "Kafka's protocol sends group.id as a string of at most 32767 bytes"),
    "group.instance_id": Range(1, 249, "Kafka refuses a group.instance.id longer than 249 characters"),
}


def length_of(path: str) -> Range | None:
    """The length range (UTF-8 bytes) of the string field at ``path``, or None when only the
    YAML bound applies."""
    return FIELD_LENGTHS.get(path)
