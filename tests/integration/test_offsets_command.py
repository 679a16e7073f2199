"""`scg offsets FILE show|reset` in process, against a real broker and real Delta tables (no Spark:
the tables are written as a pipeline writes them, through TxnDeltaTable claim + commit).

Checked: show reports both tables, the group and the log; a dry run writes nothing; a reset moves
exactly the named partitions in both tables (one commit each, naming the reset) and the group,
and fences the previous writer; a reset by time takes each partition's first offset at or after
it; every refusal (bad input, a group with members) exits 2 naming the partition or argument and
leaves the tables' Delta versions and the group's offsets as they were; --force removes the
members, which rejoin.
"""
from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from groupmgr.core import OffsetRange, TopicPartition
from groupmgr.describe import describe_group
from groupmgr.member import GroupMember, MemberConfig
from pipelines.cli.main import main
from pipelines.config import load_pipeline
from sinks.txn_table import FencedWriterError, TxnDeltaTable
from tests.support.kafka_data import create_topic, write_pipeline
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("v", pa.string())])
RECORDS, RECORDED = 10, 8            # per partition: produced, and recorded in the tables and the group
# Record i of each partition is stamped FIRST_MS + i s: ten minutes ago, well inside the broker's
# retention (a record time older than it lets the broker delete the records during the test).
FIRST_MS = (int(time.time()) - 600) * 1000


@pytest.fixture
def pipeline(bootstrap, unique_name, tmp_path):
    """A topic of 3 partitions with 10 timed records each; both tables and the group at offset 8,
    as a pipeline member leaves them. Yields (path, config, topic, epochs of the output table)."""
    topic = unique_name
    create_topic(bootstrap, topic, 3)
    _produce(bootstrap, topic, 3)
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path)
    config = load_pipeline(path)
    partitions = [TopicPartition(topic, p) for p in range(3)]
    ranges = [OffsetRange(topic, p, 0, RECORDED) for p in range(3)]
    table = TxnDeltaTable(config.sink.path, config.name, SCHEMA)
    dead = TxnDeltaTable(config.sink.dead_letter_path, config.name, SCHEMA)
    epochs, dead_epochs = table.claim(partitions), dead.claim(partitions)
    rows = pa.table({"topic": [topic] * 3 * RECORDED, "partition": [p for p in range(3) for _ in range(RECORDED)],
                     "offset": [o for _ in range(3) for o in range(RECORDED)], "v": ["x"] * 3 * RECORDED}, schema=SCHEMA)
    table.commit(rows, ranges, epochs)
    dead.commit(SCHEMA.empty_table(), ranges, dead_epochs)
    _commit_group(bootstrap, unique_name, topic, {p: RECORDED for p in range(3)})
    yield path, config, topic, epochs


def test_show_reset_and_refusals(pipeline, bootstrap, capsys):
    path, config, topic, epochs = pipeline
    t0 = f"{topic}:0"

    shown = _run(capsys, "offsets", path, "show", "--json")
    assert shown.code == 0, shown.err
    rows = json.loads(shown.out)["partitions"]
    assert [(r["table"], r["dead_letters"], r["group"], r["log_start"], r["log_end"], r["lag"]) for r in rows] \
        == [(RECORDED, RECORDED, RECORDED, 0, RECORDS, RECORDS - RECORDED)] * 3
    text = _run(capsys, "offsets", path, "show")
    assert text.code == 0 and "DEAD-LETTERS" in text.out and "LOG-START" in text.out

    before = _state(config, bootstrap, topic)
    dry = _run(capsys, "offsets", path, "reset", "--to", "earliest", "--dry-run")
    assert dry.code == 0, dry.err
    assert f"{t0}: table {RECORDED} -> 0, dead letters {RECORDED} -> 0, group {RECORDED} -> 0" in dry.out
    assert "dry run: nothing written" in dry.out
    assert _state(config, bootstrap, topic) == before

    reset = _run(capsys, "offsets", path, "reset", "--to", "3", "--partitions", t0)
    assert reset.code == 0, reset.err
    assert f"{t0}: table {RECORDED} -> 3" in reset.out and "offsets committed" in reset.out
    after = _state(config, bootstrap, topic)
    assert after.table == after.dead == after.group == {0: 3, 1: RECORDED, 2: RECORDED}
    assert (after.table_version, after.dead_version) == (before.table_version + 2, before.dead_version + 2)  # claim + reset
    for table_path in (config.sink.path, config.sink.dead_letter_path):
        last = DeltaTable(table_path).history(1)[0]
        assert last["scg.event"] == "OFFSETS_RESET"
        assert last["scg.reset.from"] == f"{t0}={RECORDED}" and last["scg.reset.to"] == f"{t0}=3"
        assert last["scg.reset.command"] == f"scg offsets {path} reset --to 3 --partitions {t0}"
        assert "@" in last["scg.reset.by"]
    assert DeltaTable(config.sink.path).to_pyarrow_table().num_rows == 3 * RECORDED  # no row touched
    assert _metadata(bootstrap, config.group.id, topic, 0).startswith("scg:reset:")
    stale = TxnDeltaTable(config.sink.path, config.name, SCHEMA)
    with pytest.raises(FencedWriterError):  # the writer that held t:0 before the reset is fenced
        stale.commit(SCHEMA.empty_table(), [OffsetRange(topic, 0, 3, 5)], epochs)

    at = _run(capsys, "offsets", path, "reset", "--to", _iso(FIRST_MS + 4500))
    assert at.code == 0, at.err
    assert _state(config, bootstrap, topic).table == {0: 5, 1: 5, 2: 5}  # first record at or after 4.5 s

    _delete_records(bootstrap, topic, 1, 2)
    settled = _state(config, bootstrap, topic)
    for argv, condition, named in [
        (["--to", str(RECORDS + 1)], "RESET_OUT_OF_RANGE", f"{topic}:2"),
        (["--to", "1", "--partitions", f"{topic}:1"], "RESET_OUT_OF_RANGE", f"{topic}:1"),
        (["--to", _iso(FIRST_MS + 60_000)], "RESET_TIMESTAMP_PAST_END", t0),
        (["--to", "0", "--partitions", f"{topic}:7"], "RESET_UNKNOWN_PARTITION", f"{topic}:7"),
        (["--to", "0", "--partitions", f"{topic}:0;1"], "RESET_BAD_PARTITIONS", "--partitions"),
        (["--to", "yesterday"], "RESET_BAD_TARGET", "--to"),
    ]:
        refused = _run(capsys, "offsets", path, "reset", *argv)
        assert refused.code == 2, (argv, refused.err)
        assert f"[{condition}]" in refused.err and named in refused.err, refused.err
        assert len(refused.err.strip().splitlines()) == 1
        assert _state(config, bootstrap, topic) == settled, argv


def test_members_refuse_the_reset_unless_forced(pipeline, bootstrap, capsys):
    path, config, topic, _ = pipeline
    member, heard = _member(config, topic)
    try:
        wait_until(lambda: heard.assigned >= 1, 60, "the member's first assignment")
        member_id = member.generation.member_id
        before = _state(config, bootstrap, topic)
        refused = _run(capsys, "offsets", path, "reset", "--to", "earliest")
        assert refused.code == 2 and "[RESET_GROUP_HAS_MEMBERS]" in refused.err and member_id in refused.err
        dry = _run(capsys, "offsets", path, "reset", "--to", "earliest", "--dry-run")
        assert dry.code == 2 and "[RESET_GROUP_HAS_MEMBERS]" in dry.err
        assert _state(config, bootstrap, topic) == before

        forced = _run(capsys, "offsets", path, "reset", "--to", "earliest", "--force")
        assert forced.code == 0, forced.err
        assert f"--force: fencing {member_id}" in forced.out
        after = _state(config, bootstrap, topic)
        assert after.table == after.dead == {0: 0, 1: 0, 2: 0}
        wait_until(lambda: heard.fenced >= 1 and heard.assigned >= 2, 60, "the removed member to rejoin")
        assert member.generation.member_id != member_id
    finally:
        member.close(timeout_s=10)


def test_without_tables_only_the_group_moves_and_no_table_is_created(bootstrap, unique_name, tmp_path, capsys):
    topic = unique_name
    create_topic(bootstrap, topic, 2)
    _produce(bootstrap, topic, 2)
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path)
    config = load_pipeline(path)
    shown = json.loads(_run(capsys, "offsets", path, "show", "--json").out)
    assert not shown["tables"]["output"]["exists"] and not shown["tables"]["dead_letters"]["exists"]
    assert [(r["table"], r["group"], r["lag"]) for r in shown["partitions"]] == [(None, None, None)] * 2

    reset = _run(capsys, "offsets", path, "reset", "--to", "latest", "--partitions", f"{topic}:1")
    assert reset.code == 0, reset.err
    assert "does not exist yet" in reset.out and "offsets committed" in reset.out
    group = {p.partition: p.committed for p in describe_group(bootstrap, config.group.id).partitions}
    assert group == {1: RECORDS}
    for table_path in (config.sink.path, config.sink.dead_letter_path):
        assert not (tmp_path / table_path).exists()


# -- helpers ---------------------------------------------------------------------------------------
class _Result:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err


def _run(capsys, *argv) -> _Result:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return _Result(code, captured.out, captured.err)


class _State:
    def __init__(self, config, bootstrap, topic):
        partitions = [TopicPartition(topic, p) for p in range(3)]
        table, dead = DeltaTable(config.sink.path), DeltaTable(config.sink.dead_letter_path)
        self.table_version, self.dead_version = table.version(), dead.version()
        self.table = {tp.partition: table.transaction_version(f"{config.name}:offset:{topic}:{tp.partition}")
                      for tp in partitions}
        self.dead = {tp.partition: dead.transaction_version(f"{config.name}:offset:{topic}:{tp.partition}")
                     for tp in partitions}
        group = describe_group(bootstrap, config.group.id)
        self.group = {p.partition: p.committed for p in group.partitions if p.topic == topic}

    def __eq__(self, other):
        return vars(self) == vars(other)

    def __repr__(self):
        return repr(vars(self))


def _state(config, bootstrap, topic) -> _State:
    return _State(config, bootstrap, topic)


def _iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, timezone.utc).isoformat(timespec="milliseconds")


def _metadata(bootstrap, group, topic, partition) -> str:
    rows = describe_group(bootstrap, group).partitions
    return next(p.metadata for p in rows if (p.topic, p.partition) == (topic, partition))


def _produce(bootstrap, topic, partitions):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    try:
        for p in range(partitions):
            for i in range(RECORDS):
                producer.produce(topic, value=json.dumps({"id": i, "name": "n"}), partition=p,
                                 timestamp=FIRST_MS + i * 1000)
        assert producer.flush(60) == 0
    finally:
        producer = None


def _commit_group(bootstrap, group, topic, offsets):
    from groupmgr.coordinator_client import CoordinatorClient, KafkaTransport
    from groupmgr.generation import NO_GENERATION
    from groupmgr.offsets import OffsetAndMetadata, commit_offsets

    transport = KafkaTransport(bootstrap, "test", None)
    client = CoordinatorClient(transport, group)
    try:
        transport.start(30)
        commit_offsets(client, group, NO_GENERATION, None,
                       {TopicPartition(topic, p): OffsetAndMetadata(o, "delta:1") for p, o in offsets.items()})
    finally:
        client.close()


def _delete_records(bootstrap, topic, partition, before):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([CkTopicPartition(topic, partition, before)])
    for future in futures.values():
        assert future.result(timeout=30).low_watermark == before


class _Heard:
    """What a test member's listener heard (counts)."""

    def __init__(self):
        self.assigned = self.fenced = 0
        self.lock = threading.Lock()

    def on_revoked(self, partitions):
        pass

    def on_assigned(self, generation, partitions):
        with self.lock:
            self.assigned += 1

    def on_fenced(self, error):
        with self.lock:
            self.fenced += 1


def _member(config, topic):
    heard = _Heard()
    member_config = MemberConfig(bootstrap_servers=config.kafka.bootstrap_string, group_id=config.group.id,
                                 topics=(topic,), assignors=("range",), client_id="offsets-test",
                                 session_timeout_ms=6000, heartbeat_interval_ms=200, rebalance_timeout_ms=15000,
                                 max_poll_interval_ms=3_600_000, retry_backoff_ms=50, request_timeout_ms=10000)
    return GroupMember(member_config, heard).start(), heard
