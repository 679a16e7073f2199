"""The member's Prometheus metrics and probe server (pipelines/runtime/metrics.py,
member_probes.py), scraped over real HTTP on loopback; no Spark, no Kafka."""
import socket
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from groupmgr.core import TopicPartition
from groupmgr.generation import MemberState
from pipelines.runtime.batch_writer import BatchReport
from pipelines.runtime.member_probes import MemberProbes
from pipelines.runtime.metrics import MemberMetrics, MetricsPortInUse, MetricsServer, Probe
from pipelines.runtime.owned_partitions import OwnedPartitions, StoppedPartition
from pipelines.runtime.partition_checks import PartitionVerdict
from pipelines.runtime.query_supervisor import QueryState
from tests.support.fake_clock import FakeClock

A, B = TopicPartition("t", 0), TopicPartition("t", 1)
LABELS = {"pipeline": "p", "group": "g", "member": "m"}


def samples(metrics: MemberMetrics) -> dict[tuple[str, tuple], float]:
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in LABELS))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def report(rows=10, dead=0, reasons=None, duration=1.5, commit=0.2):
    return BatchReport(1, (), rows, 0, dead, 3, duration, commit, True, reasons or {})


def test_a_batch_counts_rows_dead_letters_by_reason_durations_and_lag():
    m = MemberMetrics("p", "g", "m")
    m.batch(report(rows=10, dead=3, reasons={"not_json": 2, "value_too_large": 1}), {A: 40, B: 0})
    m.batch(report(rows=5, dead=1, reasons={"not_json": 1}, duration=0.3), {A: 12})
    got = samples(m)
    assert got[("scg_records_written_total", (("table", "output"),))] == 15
    assert got[("scg_records_written_total", (("table", "dead_letter"),))] == 4
    assert got[("scg_dead_letters_total", (("reason", "not_json"),))] == 3
    assert got[("scg_dead_letters_total", (("reason", "value_too_large"),))] == 1
    assert got[("scg_batch_duration_seconds_count", ())] == 2
    assert got[("scg_batch_duration_seconds_sum", ())] == pytest.approx(1.8)
    assert got[("scg_delta_commit_seconds_count", ())] == 2
    assert got[("scg_partition_lag_records", (("partition", "0"), ("topic", "t")))] == 12  # the latest
    assert got[("scg_partition_lag_records", (("partition", "1"), ("topic", "t")))] == 0


def test_every_series_carries_the_pipeline_group_and_member():
    from prometheus_client import generate_latest

    m = MemberMetrics("orders", "orders-group", "host-7")
    m.batch(report(), {A: 1})
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for sample in family.samples:
            assert {k: sample.labels[k] for k in LABELS} == {"pipeline": "orders", "group": "orders-group",
                                                               "member": "host-7"}, sample


def test_partitions_no_longer_owned_lose_their_lag_and_stopped_conditions_are_counted():
    m = MemberMetrics("p", "g", "m")
    m.batch(report(), {A: 5, B: 6})
    m.partitions([A, B], {B: "LEADER_NOT_AVAILABLE"})
    got = samples(m)
    assert got[("scg_owned_partitions", ())] == 2
    assert got[("scg_stopped_partitions", (("condition", "LEADER_NOT_AVAILABLE"),))] == 1
    m.partitions([A], {})
    got = samples(m)
    assert got[("scg_owned_partitions", ())] == 1
    assert ("scg_stopped_partitions", (("condition", "LEADER_NOT_AVAILABLE"),)) not in got
    assert ("scg_partition_lag_records", (("partition", "1"), ("topic", "t"))) not in got
    assert got[("scg_partition_lag_records", (("partition", "0"), ("topic", "t")))] == 5


def test_rebalances_generation_restarts_commit_failures_and_info():
    m = MemberMetrics("p", "g", "m")
    assert samples(m)[("scg_rebalances_total", ())] == 0  # present before the first event
    m.assigned(4)
    m.assigned(5)
    m.restarting("NOT_LEADER_OR_FOLLOWER")
    m.commit_refused()
    m.describe(version="1.0", reader="scg-kafka")
    got = samples(m)
    assert got[("scg_rebalances_total", ())] == 2 and got[("scg_member_generation", ())] == 5
    assert got[("scg_query_restarts_total", (("reason", "NOT_LEADER_OR_FOLLOWER"),))] == 1
    assert got[("scg_kafka_commit_failures_total", ())] == 1
    assert got[("scg_member_info", (("reader", "scg-kafka"), ("version", "1.0")))] == 1


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_server_serves_metrics_and_both_probes_on_a_free_port():
    m = MemberMetrics("p", "g", "m")
    m.assigned(1)
    health = {"ok": Probe(True, "member stable"), "ready": Probe(False, "query starting")}
    server = MetricsServer(m.registry, lambda: health["ok"], lambda: health["ready"], "127.0.0.1", 0).start()
    try:
        status, body = get(server.port, "/metrics")
        assert status == 200 and 'scg_rebalances_total{group="g",member="m",pipeline="p"} 1.0' in body
        assert get(server.port, "/healthz") == (200, "ok: member stable\n")
        assert get(server.port, "/readyz") == (503, "not ok: query starting\n")
        health["ready"] = Probe(True, "reading 2 of 2 partition(s)")
        assert get(server.port, "/readyz")[0] == 200
        assert get(server.port, "/nothing")[0] == 404
    finally:
        server.stop()


def test_a_port_in_use_is_a_named_environment_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortInUse) as info:
            MetricsServer(MemberMetrics("p", "g", "m").registry, lambda: None, lambda: None, "127.0.0.1", port).start()
    assert info.value.condition == "METRICS_PORT_IN_USE" and info.value.exit_category == 3
    assert f"metrics.port {port}" in str(info.value)


class Supervisor:
    def __init__(self, state):
        self.state = state


def probes(state=QueryState.RUNNING, member=MemberState.STABLE, owned=(A, B), stopped=(), joined=True,
           query=True) -> MemberProbes:
    parts = OwnedPartitions(None, None, None, None, None, lambda line: None, FakeClock())
    parts.assign(owned)
    for tp in stopped:
        parts.stopped[tp] = StoppedPartition(PartitionVerdict(tp, None, "X"), 0.0, 0.0, 1)
    return MemberProbes(Supervisor(state), SimpleNamespace(state=member), parts, lambda: joined, lambda: query)


def test_health_fails_once_the_member_or_its_query_ended():
    assert probes().healthy() == Probe(True, "member stable, query running")
    assert probes(state=QueryState.FAILED).healthy() == Probe(False, "a failure a person must fix ends the member")
    assert probes(member=MemberState.FAILED).healthy() == Probe(False, "the group member is failed")
    assert probes(member=MemberState.CLOSED).healthy() == Probe(False, "the group member is closed")
    assert probes(state=QueryState.RESTARTING).healthy().ok is True  # a transient fault is not death
    assert probes(member=None).healthy() == Probe(True, "member starting, query running")


def test_ready_once_joined_and_reading_or_deliberately_idle():
    assert probes(joined=False).ready() == Probe(False, "not joined yet (warming up or joining the group)")
    assert probes().ready() == Probe(True, "reading 2 of 2 partition(s)")
    assert probes(stopped=(B,)).ready() == Probe(True, "reading 1 of 2 partition(s)")
    assert probes(owned=(), state=QueryState.IDLE).ready() == Probe(True, "joined; no partition assigned")
    assert probes(state=QueryState.STARTING).ready() == Probe(False, "query starting")
    assert probes(state=QueryState.RESTARTING).ready() == Probe(False, "query restarting")
    assert probes(query=False).ready() == Probe(False, "query running")


def test_an_upsert_batch_counts_the_rows_its_merge_inserted_updated_and_deleted():
    m = MemberMetrics("p", "g", "m")
    merged = {"inserted": 4, "updated": 2, "deleted": 1}
    m.batch(BatchReport(1, (), 7, 0, 0, 3, 1.0, 0.2, True, {}, merged), {})
    m.batch(BatchReport(2, (), 1, 0, 0, 4, 1.0, 0.2, True, {}, {"inserted": 0, "updated": 1, "deleted": 0}), {})
    got = samples(m)
    assert [got[("scg_upsert_rows_total", (("change", c),))] for c in ("inserted", "updated", "deleted")] == [4, 3, 1]
