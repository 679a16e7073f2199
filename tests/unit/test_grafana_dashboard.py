"""The Grafana dashboard in pipelines/resources/grafana/ (package data) asks only for metrics a
member serves, and shows every family the operations guide promises a panel for."""
import json
import re
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pipelines.runtime.metrics import MemberMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "pipelines" / "resources" / "grafana" / "scg-dashboard.json"
SHOWN = {"scg_partition_lag_records", "scg_records_written_total", "scg_batch_duration_seconds_bucket",
         "scg_delta_commit_seconds_bucket", "scg_dead_letters_total", "scg_rebalances_total",
         "scg_stopped_partitions", "scg_owned_partitions", "scg_query_restarts_total"}


def served_names() -> set[str]:
    """Every sample name a member can serve (each family touched once, so each appears)."""
    from groupmgr.core import TopicPartition
    from pipelines.runtime.batch_writer import BatchReport

    m = MemberMetrics("p", "g", "m")
    m.batch(BatchReport(1, (), 1, 0, 1, 1, 1.0, 0.1, True, {"malformed_json": 1}), {TopicPartition("t", 0): 1})
    m.partitions([TopicPartition("t", 0)], {TopicPartition("t", 0): "X"})
    m.assigned(1)
    m.restarting("X")
    m.commit_refused()
    m.describe(version="0")
    text = generate_latest(m.registry).decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def dashboard_metrics() -> set[str]:
    exprs = [t["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"] for t in panel["targets"]]
    assert exprs
    return {name for expr in exprs for name in re.findall(r"\bscg_[a-z_]+", expr)}


def test_every_query_names_a_metric_the_exporter_serves():
    unknown = dashboard_metrics() - served_names()
    assert not unknown, f"the dashboard asks for metrics no member serves: {sorted(unknown)}"


def test_the_dashboard_shows_lag_throughput_latency_dead_letters_rebalances_and_stopped_partitions():
    assert SHOWN <= dashboard_metrics()
