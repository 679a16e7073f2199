"""Cooperative hand-off: with ``group.assignor: cooperative-sticky`` a rebalance pauses
only the partitions that move. Four `scg run` members share 16 partitions while records flow; a
fifth joins, then one leaves cleanly, then one is SIGKILLed. After each event every member whose
partitions did not change kept its query (no "revoked", no new "starting query" line, its batches
go on), the moved partitions flow in their new owners, and the table holds every record exactly
once (delta-spark). The group mixes both readers: a member with ``source.reader: scg-kafka``
restarts its query in no event, also when its partitions changed (one query from start to end)."""
from __future__ import annotations

import re
import time

import pytest

from pipelines.config import load_pipeline
from tests.e2e.harness import MemberProcess, SteadyProducer
from tests.support.kafka_data import create_topic, delta_coordinates, log_end_offsets, table_reached, write_pipeline
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e
PARTITIONS = 16


def _owned_once(members) -> bool:
    owned = [tp for m in members for tp in m.owned()]
    return len(owned) == PARTITIONS and len(set(owned)) == PARTITIONS


def _batches(member) -> int:
    return member.count(r"\] batch \d+:")


def _settled(members) -> bool:
    """Every partition owned once, and no member's last word is a pending revoke."""
    return _owned_once(members) and all(m.proc.poll() is None for m in members)


def _restarts(member, after: int) -> int:
    """Query stops and starts in ``member``'s lines after index ``after``."""
    return sum(1 for line in list(member.lines)[after:] if re.search(r"revoked \d+ partition|starting query", line))


def _query_starts(member) -> int:
    return member.count(r"starting query|query started over reader")


def _event(members, action, what: str) -> dict[str, float]:
    """Run ``action``; wait until the group settles and every member writes again; return per
    member whether its partitions changed (after checking that the unchanged ones kept their query)
    and the seconds the event took."""
    before = {m.name: (frozenset(m.owned()), len(m.lines), _batches(m)) for m in members}
    began = time.monotonic()
    remaining = action()
    wait_until(lambda: _settled(remaining), 240, f"the group settled after {what}")
    # the follow-up rebalance of a cooperative round has happened when every member wrote again
    seen = {m.name: _batches(m) for m in remaining}
    wait_until(lambda: all(_batches(m) > seen[m.name] for m in remaining), 240, f"every member writing after {what}")
    unchanged = [m for m in remaining if m.name in before and frozenset(m.owned()) == before[m.name][0]]
    for m in unchanged:
        assert _restarts(m, before[m.name][1]) == 0, f"{m.name} kept its partitions but restarted its query:\n{m.tail(30)}"
        assert _batches(m) > before[m.name][2]
    return {"unchanged": len(unchanged), "members": len(remaining), "seconds": round(time.monotonic() - began, 1)}


def test_a_rebalance_pauses_only_the_partitions_that_move(bootstrap, spark, tmp_path, unique_name):
    """One group, both readers: a and c read with Spark's Kafka source, b, d and e with scg-kafka
    (same group, same tables); b leaves, a is killed."""
    create_topic(bootstrap, unique_name, PARTITIONS)
    extra = 'format: {type: json, schema: "id BIGINT, name STRING"}\nspark: {spark.master: "local[1]"}\n'
    path = write_pipeline(tmp_path / "pipeline.yaml", bootstrap, unique_name, unique_name, tmp_path,
                          extra=extra, reader="spark-kafka")
    following = write_pipeline(tmp_path / "pipeline-scg-kafka.yaml", bootstrap, unique_name, unique_name, tmp_path,
                               extra=extra, reader="scg-kafka", warm_up_limit="15s")  # the suite's time
    for pipeline in (path, following):
        pipeline.write_text(pipeline.read_text().replace("  heartbeat_interval: 500ms\n",
                                                         "  heartbeat_interval: 500ms\n  assignor: cooperative-sticky\n"))
    config = load_pipeline(path)
    assert load_pipeline(following).source.reader == "scg-kafka" and config.source.reader == "spark-kafka"
    readers = {"a": path, "b": following, "c": path, "d": following, "e": following}
    producer = SteadyProducer(bootstrap, unique_name, rate_per_s=100).start()
    began = time.monotonic()
    members = [MemberProcess(n, readers[n], tmp_path) for n in ("a", "b", "c", "d")]
    wait_until(lambda: _settled(members) and all(_batches(m) for m in members), 420,
               "four members sharing 16 partitions and writing")
    results = {"start": {"seconds": round(time.monotonic() - began, 1)}}

    def join():
        members.append(MemberProcess("e", readers["e"], tmp_path))
        return list(members)

    def leave():
        assert members.pop(1).stop() == 0
        return list(members)

    def crash():
        members.pop(0).kill()
        return list(members)

    for what, action in (("a fifth member joined", join), ("a member left", leave), ("a member was killed", crash)):
        results[what] = _event(members, action, what)
        followers = [m for m in members if readers[m.name] == following]
        # an scg-kafka member runs one query, whatever the event did to its partitions
        assert all(_query_starts(m) == 1 for m in followers), {m.name: _query_starts(m) for m in followers}
    acked = producer.stop()
    began = time.monotonic()
    wait_until(lambda: table_reached(config.sink.path, config.name, log_end_offsets(acked)), 180,
               "the table to hold every produced record")
    for m in members:
        assert m.stop() == 0, m.tail(30)
    results["drain"] = {"seconds": round(time.monotonic() - began, 1)}
    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)), "duplicate (topic, partition, offset) rows"
    assert set(rows) == acked, f"missing {len(acked - set(rows))}, extra {len(set(rows) - acked)}"
    assert any(r.get("unchanged") for r in results.values()), results  # someone kept its query through an event
    print(f"\ncooperative hand-off: {results}; records {len(acked)}")
