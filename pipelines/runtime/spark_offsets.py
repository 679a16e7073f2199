"""Offsets in the JSON shapes Spark's Kafka source reads and writes: the one serialisation point.

All offsets follow Kafka's next-offset-to-read convention (docs/DESIGN.md, invariant 2).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from groupmgr.core import TopicPartition


def to_spark_json(offsets: Mapping[TopicPartition, int]) -> str:
    """Offsets as Spark's Kafka source JSON: ``{"topic": {"0": 42}}`` (keys sorted)."""
    nested: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        nested.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return json.dumps(nested, sort_keys=True)


def from_spark_json(text: str) -> dict[TopicPartition, int]:
    """Inverse of :func:`to_spark_json`."""
    raw = json.loads(text)
    return {TopicPartition(topic, int(p)): int(o) for topic, parts in raw.items()
            for p, o in parts.items()}


def assign_json(partitions: Iterable[TopicPartition]) -> str:
    """Spark's ``assign`` option: ``{"topic": [0, 1]}``."""
    nested: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        nested.setdefault(tp.topic, []).append(tp.partition)
    return json.dumps(nested, sort_keys=True)
