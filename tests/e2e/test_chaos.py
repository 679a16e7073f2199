"""A bounded chaos test (docs/DESIGN.md invariants 5, 9, 10): three `scg run` members of
one group on a 3-broker cluster read two topics while records are produced, and meet, one after the
other on a fixed schedule:

1. every broker SIGKILLed and started again in turn; right after the second restart the main topic
   grows from 6 to 9 partitions, so every member is assigned again while leaders move back;
2. at one moment a member SIGSTOPped and another SIGKILLed (mid-stream, no LeaveGroup), the killed
   one started again at once as a new process; the stopped one stays stopped until the running
   members own every partition and wrote a batch (past the 6 s session timeout), then SIGCONT: it is
   fenced and rejoins, its stale batch refused or harmless (one phase: the new process's Spark
   boots while the group waits out both sessions);
3. a retention deletion: a burst to one partition of the main topic, at once deleted up to its end
   (admin DeleteRecords); whether the members read the burst first is a race, both are valid;
4. the second topic deleted and created again (same partitions), then produced to again.

Every wait is on an event with a bound; no member process may exit by itself at any point (the
SIGKILLed one is accounted for). At the end the tables are read through delta-spark: no `id` twice,
every acknowledged record of the main topic outside the deleted range exactly once, every one inside
it either in the table or covered by exactly one ``data_loss`` marker (``source.on_data_loss:
skip``), the recreated topic's new records exactly once and the old incarnation's records kept. One
summary line gives the count of each fault and the result."""
from __future__ import annotations

import json
import signal
import time
from collections import Counter

import pytest

from groupmgr.core import TopicPartition
from pipelines.config import load_pipeline
from pipelines.local.local_kafka import LocalKafka
from sinks.txn_table import read_recorded_offsets
from tests.e2e.harness import BrokerNode, ClusterView, MemberProcess, SteadyProducer
from tests.support.kafka_data import create_topic, log_end_offsets, table_reached, write_pipeline
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e
PARTITIONS = 6
GROWN = 9            # main topic partitions after the growth right after the second broker restart
SECOND = 2           # partitions of the topic that is deleted and created again
SESSION_TIMEOUT_S = 6
MEMBERS = ("a", "b", "c")
# disjoint id ranges: an id names one produced record across topics and incarnations
OLD_SECOND_IDS, BURST_IDS, NEW_SECOND_IDS = 1_000_000, 2_000_000, 3_000_000
BURST = 300
NEW_SECOND_RECORDS = 120
# librdkafka learns a topic's new partitions at its next metadata refresh, every 5 minutes by
# default: without a short interval the grown partitions can stay empty, and the member that owns
# only those has nothing to write.
PRODUCER = {"enable.idempotence": True, "topic.metadata.refresh.interval.ms": 1000}


@pytest.fixture
def cluster(tmp_path):
    state_dir = tmp_path / "kafka"
    local = LocalKafka(state_dir)
    state = local.start(brokers=3)
    try:
        yield state_dir, state
    finally:
        local.stop()  # reads the state file, which BrokerNode.start keeps up to date


class Fleet:
    """The member processes of the test: who should be running, who was SIGKILLed on purpose.
    :meth:`check` fails the test as soon as any other member process has exited."""

    def __init__(self, path, log_dir):
        self.path, self.log_dir = path, log_dir
        self.current: dict[str, MemberProcess] = {}
        self.everyone: list[MemberProcess] = []
        self.killed: list[MemberProcess] = []   # SIGKILLed by the test
        self.stopped: list[MemberProcess] = []  # stopped by the test (SIGTERM) at the end

    def start(self, name: str) -> MemberProcess:
        member = MemberProcess(name, self.path, self.log_dir)
        self.current[name] = member
        self.everyone.append(member)
        return member

    def sigkill(self, name: str) -> MemberProcess:
        member = self.current.pop(name)
        self.killed.append(member)
        member.kill()
        return member

    def check(self) -> bool:
        for m in self.everyone:
            if m not in self.killed and m not in self.stopped:
                assert m.proc.poll() is None, f"member {m.name} exited ({m.proc.returncode}):\n{m.tail(80)}"
        return True

    def stop_all(self) -> None:
        """SIGTERM every current member; each must end cleanly (exit 0)."""
        for m in self.members():
            self.stopped.append(m)
            assert m.stop() == 0, f"{m.name} did not stop cleanly:\n{m.tail(80)}"

    def members(self, *names) -> list[MemberProcess]:
        return [self.current[n] for n in names] if names else list(self.current.values())

    def owned_once(self, count: int, members=None) -> bool:
        self.check()
        owned = [tp for m in (members or self.members()) for tp in m.owned()]
        return len(owned) == count and len(set(owned)) == count

    def wait_writing(self, what: str, members=None, timeout_s: float = 180) -> None:
        """Every one of ``members`` (default: all current) commits a batch from now on."""
        members = members or self.members()
        seen = {m.name: _batches(m) for m in members}
        wait_until(lambda: self.check() and all(_batches(m) > seen[m.name] for m in members), timeout_s, what)


def _batches(member: MemberProcess) -> int:
    return member.count(r"\] batch \d+:")


def test_bounded_chaos(cluster, tmp_path, unique_name, request):
    state_dir, state = cluster
    bootstrap = state.bootstrap_servers
    main, second = unique_name, f"{unique_name}-re"
    create_topic(bootstrap, main, PARTITIONS, replication=3)
    create_topic(bootstrap, second, SECOND, replication=3)
    # one task thread per driver: three Spark drivers and three brokers share a loaded 2-core machine
    path = write_pipeline(tmp_path / "pipeline.yaml", bootstrap, f"{main}, {second}", unique_name, tmp_path,
                          extra='format: {type: json, schema: "id BIGINT, name STRING"}\n'
                                'spark: {spark.master: "local[1]"}\n')
    # the leader re-reads partition counts every 2 s, so a growth or a deletion is a prompt rebalance
    text = path.read_text().replace("  heartbeat_interval: 500ms\n", "  heartbeat_interval: 500ms\n"
                                                                     "  metadata_max_age: 2s\n")
    path.write_text(text.replace("  starting_offsets: earliest\n", "  starting_offsets: earliest\n"
                                                                   "  on_data_loss: skip\n"))
    config = load_pipeline(path)
    assert config.source.on_data_loss == "skip"
    view = ClusterView(bootstrap)
    faults: Counter = Counter()
    producers: list[SteadyProducer] = []
    fleet = Fleet(path, tmp_path)
    began = time.monotonic()
    phases: list[tuple[str, float]] = []

    def phase(name: str, t0: float) -> None:
        phases.append((name, round(time.monotonic() - t0, 1)))
        print(f"\nchaos phase {name}: {phases[-1][1]}s", flush=True)

    partitions = {main: PARTITIONS, second: SECOND}  # what the group must own once each

    def total() -> int:
        return sum(partitions.values())

    try:
        main_producer = SteadyProducer(bootstrap, main, rate_per_s=60, settings=PRODUCER).start()
        old_second = SteadyProducer(bootstrap, second, rate_per_s=20, settings=PRODUCER,
                                    first_id=OLD_SECOND_IDS).start()
        producers += [main_producer, old_second]
        for name in MEMBERS:
            fleet.start(name)
        wait_until(lambda: fleet.owned_once(total()) and all(_batches(m) > 0 for m in fleet.members()), 480,
                   "three members sharing the partitions and writing")
        phase("start", began)

        # 1. every broker SIGKILLed and started again in turn; the main topic grows after the second
        for node_id in sorted(n.node_id for n in state.nodes):
            t0 = time.monotonic()
            node = BrokerNode(state_dir, node_id)
            node.kill()
            faults["broker SIGKILL+restart"] += 1
            wait_until(lambda: fleet.check() and view.leads_nothing(node_id), 90,
                       f"leaders moved off broker {node_id}")
            node.start()
            wait_until(lambda: fleet.check() and view.in_every_isr(node_id), 120,
                       f"broker {node_id} back and in every ISR")
            if node_id == 2:
                # a rebalance right after a restart: every member is assigned again while leaders
                # and their epochs move, and the new partitions need ListOffsets
                _grow(bootstrap, main, GROWN)
                partitions[main] = GROWN
                faults["partition growth"] += 1
                wait_until(lambda: fleet.owned_once(total()), 180, f"the group owning all {total()} partitions")
            fleet.wait_writing(f"every member writing again after broker {node_id} restarted")
            phase(f"broker {node_id}", t0)
        # a describe that timed out while a broker restarted is not a recreated topic
        misread = {m.name: m.count("TOPIC_RECREATED") for m in fleet.members() if m.count("TOPIC_RECREATED")}
        assert not misread, f"broker restarts read as a recreated topic: {misread}"

        # 2. at one moment member b is SIGSTOPped and member a SIGKILLed (no LeaveGroup), and a is
        #    started again at once as a new process (its Spark boots while the group waits out the
        #    two sessions). b stays stopped, past the session timeout, until the running members own
        #    every partition and each wrote a batch; then SIGCONT: b must be fenced and rejoin (a
        #    stale batch of it is refused by the table)
        t0 = time.monotonic()
        b, c = fleet.current["b"], fleet.current["c"]
        b.signal(signal.SIGSTOP)
        faults["member SIGSTOP+SIGCONT"] += 1
        try:
            fleet.sigkill("a")
            faults["member SIGKILL+restart"] += 1
            a2 = fleet.start("a2")
            running = [a2, c]  # a2 may join before or after c took everything
            wait_until(lambda: fleet.owned_once(total(), running), 240,
                       "the running members owning every partition, b's and a's included")
            fleet.wait_writing("the running members writing after taking b's and a's partitions",
                               [m for m in running if m.owned()])
        finally:
            b_seen = len(b.lines)  # b's output from before the stop was read long ago
            stopped_s = time.monotonic() - t0
            b.signal(signal.SIGCONT)
        assert stopped_s > SESSION_TIMEOUT_S
        b.wait_for(r"generation \d+: assigned [1-9]", 180, after=b_seen)
        wait_until(lambda: fleet.owned_once(total()) and _batches(a2) > 0, 300,
                   "b rejoined, the restarted a2 writing, the partitions shared by three")
        fleet.wait_writing("every member writing after b rejoined")
        b_after = b.lines[b_seen:]
        b_fenced = sum("fenced by the group" in line for line in b_after)
        b_refused = sum("refused by the table" in line for line in b_after)
        phase("members SIGKILL+SIGSTOP", t0)

        # 3. a retention deletion: a burst to one partition, deleted at once up to its end
        t0 = time.monotonic()
        old_second.stop()  # the second topic's first incarnation is complete from here
        cut_tp = TopicPartition(main, GROWN - 1)
        burst = _burst(bootstrap, main, cut_tp.partition, range(BURST_IDS, BURST_IDS + BURST))
        cut = max(o for (_, _, o) in burst) + 1
        # every offset below the cut was a record (no compaction, no transactions), those acknowledged
        # without an offset included
        deleted = {(main, cut_tp.partition, o) for o in range(cut)}
        _delete_records(bootstrap, main, cut_tp.partition, cut)
        faults["retention deletion"] += 1
        wait_until(lambda: fleet.check() and (_recorded(config, cut_tp) or 0) >= cut, 180,
                   f"{main}-{cut_tp.partition} read or skipped past the deleted range (offset {cut})")
        phase("retention deletion", t0)

        # 4. the second topic deleted and created again (same partition count), then produced to
        t0 = time.monotonic()
        # the log's own ends (nothing of this topic was deleted, so its log holds every acknowledged
        # record; one acknowledged without an offset, see SteadyProducer, may be the last)
        old_ends = log_end_offsets(_log_coordinates(bootstrap, second, SECOND))
        wait_until(lambda: fleet.check() and table_reached(config.sink.path, config.name, old_ends), 180,
                   "the table holding the second topic's first incarnation")
        _delete_topic(bootstrap, second)
        wait_until(lambda: fleet.check() and _create(bootstrap, second, SECOND), 120, "the topic created again")
        faults["topic delete+recreate"] += 1
        new_second = SteadyProducer(bootstrap, second, rate_per_s=40, settings=PRODUCER,
                                    first_id=NEW_SECOND_IDS).start()
        producers.append(new_second)
        wait_until(lambda: fleet.check() and len(new_second.acked) >= NEW_SECOND_RECORDS, 120,
                   "records acknowledged by the new incarnation")
        new_acked = new_second.stop()

        def reset_seen(p: int) -> bool:
            regex = rf"{second}-{p}: \[[^\]]*TOPIC_RECREATED"
            return any(m.count(regex) > 0 for m in fleet.everyone)
        # the tables' offsets of both partitions were reset to the new incarnation (until then the
        # old incarnation's offsets could already stand past the new records' ends)
        wait_until(lambda: fleet.check() and all(reset_seen(p) for p in range(SECOND)), 180,
                   "both partitions of the recreated topic reset to the new incarnation")
        phase("topic recreate", t0)

        # the end: everything acknowledged reaches the table
        t0 = time.monotonic()
        main_acked = main_producer.stop()
        log = _log_coordinates(bootstrap, main, GROWN)
        assert main_acked <= log | deleted, \
            "acknowledged records of the main topic missing from the log"
        ends = {**log_end_offsets(main_acked | set(burst) | log),
                **log_end_offsets(new_acked | _log_coordinates(bootstrap, second, SECOND))}
        wait_until(lambda: fleet.check() and table_reached(config.sink.path, config.name, ends), 240,
                   "the table to hold every acknowledged record")
        fleet.check()
        retries = {m.name: m.count(r"restarting from the table's offsets") for m in fleet.everyone}
        fleet.stop_all()
        phase("drain", t0)
    finally:
        for producer in producers:
            producer.halt()

    # -- the tables, through delta-spark (a Spark of the test's own, started now the members are gone)
    spark = request.getfixturevalue("spark")
    table = spark.read.format("delta").load(config.sink.path).select("topic", "partition", "offset", "id")
    rows = [(r.topic, r.partition, r.offset, r.id) for r in table.collect()]
    dead = spark.read.format("delta").load(config.sink.dead_letter_path).collect()
    # (1) no id twice
    twice = sorted(i for i, n in Counter(r[3] for r in rows).items() if n > 1)
    assert not twice, f"{len(twice)} ids written twice, e.g. {twice[:20]}"
    produced_main = {**main_producer.acked_ids, **burst}
    main_rows = {(t, p, o): i for t, p, o, i in rows if t == main}
    assert len(main_rows) == sum(1 for r in rows if r[0] == main), "a main-topic coordinate twice"
    for coordinates, i in main_rows.items():  # the record at each coordinate is the one produced there
        assert produced_main.get(coordinates, i) == i, f"{coordinates}: id {i}, produced {produced_main[coordinates]}"
    # (2) every acknowledged record of the main topic outside the deleted range exactly once; the
    #     rows are exactly the log plus records of the deleted range read before the deletion
    kept = set(produced_main) - deleted
    assert kept <= set(main_rows), f"missing {len(kept - set(main_rows))} main-topic records, e.g. " \
                                   f"{sorted(kept - set(main_rows))[:5]}"
    assert set(main_rows) - deleted == log, f"rows outside the log: {sorted(set(main_rows) - deleted - log)[:5]}"
    # (3) the deleted range: in the table, or covered by exactly one data_loss marker, never both
    assert all(r.reason == "data_loss" for r in dead), f"dead letters besides markers: {[r.reason for r in dead]}"
    markers = [(r.topic, r.partition, json.loads(r.value)) for r in dead]
    assert all((t, p) == (main, cut_tp.partition) for t, p, _ in markers), f"unexpected markers {markers}"
    read_before, lost = 0, 0
    for coordinates in sorted(deleted):
        covering = [m for t, p, m in markers if m["lost_from"] <= coordinates[2] < m["lost_until"]]
        if coordinates in main_rows:
            assert not covering, f"{coordinates} is in the table and in a data_loss marker {covering}"
            read_before += 1
        else:
            assert len(covering) == 1, f"{coordinates} neither in the table nor in exactly one marker: {covering}"
            lost += 1
    # (4) the recreated topic: the old incarnation's records stay, the new one's exactly once
    second_ids = {i for t, _, _, i in rows if t == second}
    old_ids, new_ids = old_second.delivered_ids, new_second.delivered_ids
    assert old_ids <= second_ids, f"{len(old_ids - second_ids)} records of the old incarnation missing"
    assert new_ids <= second_ids, f"{len(new_ids - second_ids)} records of the new incarnation missing"
    assert second_ids <= set(range(OLD_SECOND_IDS, OLD_SECOND_IDS + old_second.sent)) | \
        set(range(NEW_SECOND_IDS, NEW_SECOND_IDS + new_second.sent)), \
        "rows of the second topic that were never produced"
    # (5) no member process exited by itself (checked in every wait above; each stopped with 0)
    fleet.check()
    # (6) one line to quote
    print(f"\nCHAOS faults: {dict(faults)} (b stopped {stopped_s:.0f}s, fenced lines {b_fenced}, "
          f"refused batches {b_refused}); result: PASS, {len(rows)} rows "
          f"(main {len(main_rows)}, second old {len(old_ids)} + new {len(new_ids)}), no id twice; "
          f"retention deletion of {main}-{cut_tp.partition} below offset {cut} ({len(deleted)} "
          f"records, the {BURST}-record burst included): {read_before} read before it, {lost} in "
          f"{len(markers)} data_loss marker(s); "
          f"restart lines per member {retries}; no member exited by itself; acknowledged without an offset "
          f"{sum(len(p.acked_unplaced_ids) for p in (main_producer, old_second, new_second))}; "
          f"phases (s) {phases}; total {time.monotonic() - began:.0f}s")


def _recorded(config, tp: TopicPartition) -> int | None:
    try:
        return read_recorded_offsets(config.sink.path, config.name, [tp]).get(tp)
    except Exception:  # noqa: BLE001 - the table is being committed to; asked again
        return None


def _log_coordinates(bootstrap: str, topic: str, partitions: int) -> set[tuple[str, int, int]]:
    """Every (topic, partition, offset) in the topic's log (no compaction, no transactions: every
    offset from the low to the high watermark is a record)."""
    from confluent_kafka import Consumer, TopicPartition as CkTopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks-only", "log_level": 3})
    try:
        found = set()
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(CkTopicPartition(topic, p), timeout=30)
            found |= {(topic, p, o) for o in range(low, high)}
        return found
    finally:
        consumer.close()


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def _grow(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka.admin import NewPartitions

    admin = _admin(bootstrap)  # referenced until the answer: a destroyed client fails its futures
    admin.create_partitions([NewPartitions(topic, count)])[topic].result(timeout=60)


def _burst(bootstrap: str, topic: str, partition: int, ids) -> dict[tuple[str, int, int], int]:
    """Produce one record per id to ``partition``; returns the acknowledged coordinates' ids."""
    from confluent_kafka import Producer

    acked: dict[tuple[str, int, int], int] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 3, **PRODUCER})
    for i in ids:
        producer.produce(topic, key=f"burst{i}", value=json.dumps({"id": i, "name": f"burst{i}"}), partition=partition,
                         on_delivery=lambda err, msg, i=i: err is None and acked.__setitem__(
                             (msg.topic(), msg.partition(), msg.offset()), i))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(acked) == len(ids)
    return acked


def _delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    """What retention does: the partition's records below ``before`` are gone."""
    from confluent_kafka import TopicPartition as CkTopicPartition

    admin = _admin(bootstrap)
    futures = admin.delete_records([CkTopicPartition(topic, partition, before)])
    for future in futures.values():
        assert future.result(timeout=30).low_watermark == before


def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = _admin(bootstrap)
    admin.delete_topics([topic])[topic].result(timeout=60)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 60, f"topic {topic} deleted")


def _create(bootstrap: str, topic: str, partitions: int) -> bool:
    try:
        create_topic(bootstrap, topic, partitions, replication=3)
        return True
    except Exception:  # noqa: BLE001 - the deletion may still be in progress
        return False
