"""A real member's metrics endpoint, scraped over HTTP while records are produced (real Kafka,
Spark and Delta; a fixed assignment): readiness follows the query, the lag of each partition rises
and falls, batches and rows are counted, a dead letter is counted under its reason."""
from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from groupmgr.core import TopicPartition
from pipelines.config import load_pipeline
from pipelines.runtime.runner import PipelineRunner
from tests.support.kafka_data import create_topic, json_events, log_end_offsets, produce, table_reached, write_pipeline
from tests.support.static_member import StaticMember
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
WAIT_S = 180


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k in ("topic", "partition", "table",
                                                                              "reason")))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_member_serves_its_lag_batches_rows_and_dead_letters(bootstrap, spark, tmp_path, unique_name):
    topic = unique_name
    create_topic(bootstrap, topic, 2)
    produced = produce(bootstrap, topic, json_events(400))
    bad = produce(bootstrap, topic, [("k", "{not json"), ("k", "[1, 2")])
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path,
                          extra='format: {type: json, schema: "id BIGINT, name STRING"}\n'
                                "metrics: {port: 0, host: 127.0.0.1}\n")
    path.write_text(path.read_text().replace("  starting_offsets: earliest\n",
                                             "  starting_offsets: earliest\n  max_offsets_per_trigger: 40\n"))
    config = load_pipeline(path)
    partitions = [TopicPartition(topic, p) for p in range(2)]
    runner = PipelineRunner.open(config, spark, out=lambda _: None,
                                 member_factory=lambda cfg, listener: StaticMember(listener, partitions))
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: runner.server is not None, WAIT_S, "the metrics server")
        port = runner.server.port
        assert status(port, "/healthz") == 200
        lags: list[float] = []

        def caught_up() -> bool:
            got = scrape(port)
            lags.extend(v for (name, _), v in got.items() if name == "scg_partition_lag_records")
            return table_reached(config.sink.path, config.name, log_end_offsets(produced | bad))

        wait_until(caught_up, WAIT_S, "every record committed")
        wait_until(lambda: status(port, "/readyz") == 200, WAIT_S, "ready")
        got = scrape(port)
        assert got[("scg_records_written_total", (("table", "output"),))] == 400
        assert got[("scg_records_written_total", (("table", "dead_letter"),))] == 2
        assert got[("scg_dead_letters_total", (("reason", "malformed_json"),))] == 2
        assert got[("scg_batch_duration_seconds_count", ())] >= 400 // 40 // 2
        assert got[("scg_owned_partitions", ())] == 2 and got[("scg_rebalances_total", ())] == 1
        assert max(lags) > 0, lags                        # it rose while the backlog was read...
        for p in ("0", "1"):                               # ...and fell to nothing
            assert got[("scg_partition_lag_records", (("partition", p), ("topic", topic)))] == 0
    finally:
        stop.set()
        thread.join(120)
    assert not thread.is_alive() and runner.server is None
    with pytest.raises(urllib.error.URLError):
        status(port, "/healthz")                           # the server stopped with the member
