"""A JSON pipeline whose ``format.schema`` gains a field between runs: under the default
``sink.schema_evolution: fail`` the member's batch waits under SCHEMA_INCOMPATIBLE (a progress
line, `scg describe`) with nothing written, instead of committing files whose new column no reader
of the table sees; with ``add_columns`` the next run adds the column in the commit of its first
batch, and delta-spark reads it. A real broker, `scg run` processes, real Delta tables."""
from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from pipelines.config import load_pipeline
from tests.e2e.harness import MemberProcess
from tests.support.kafka_data import create_topic, partition_statuses, produce, write_pipeline
from tests.integration.test_cli import scg
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
PARTITIONS = 2
V1 = 'format: {type: json, schema: "id BIGINT, name STRING"}\n'
V2 = 'format: {type: json, schema: "id BIGINT, name STRING, city STRING"}\n'


def _pipeline(tmp_path, bootstrap, topic, fmt: str, evolution: str):
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, topic, topic, tmp_path, extra=fmt)
    text = path.read_text().replace("processing_time: 500ms", "available_now: true")
    path.write_text(text.replace("  dead_letter_path:", f"  schema_evolution: {evolution}\n  dead_letter_path:"))
    return path


def test_a_new_json_field_waits_under_fail_and_joins_the_table_with_add_columns(bootstrap, spark, tmp_path,
                                                                              unique_name):
    create_topic(bootstrap, unique_name, PARTITIONS)
    produce(bootstrap, unique_name, [(None, json.dumps({"id": i, "name": f"n{i}"})) for i in range(10)])
    path = _pipeline(tmp_path, bootstrap, unique_name, V1, "fail")
    first = scg("run", path, timeout=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    table_path = load_pipeline(path).sink.path
    written = DeltaTable(table_path).to_pyarrow_table().num_rows

    produce(bootstrap, unique_name, [(None, json.dumps({"id": i, "name": f"n{i}", "city": f"c{i}"}))
                                     for i in range(10, 20)])
    path = _pipeline(tmp_path, bootstrap, unique_name, V2, "fail")
    member = MemberProcess("fail", path, tmp_path)
    try:
        member.wait_for(r"SCHEMA_INCOMPATIBLE.*columns the table lacks: city.*schema_evolution is fail", 180)
        wait_until(lambda: all(s.startswith("stopped: SCHEMA_INCOMPATIBLE") for s in partition_statuses(path)), 120,
                   lambda: f"scg describe to show the partitions stopped: {partition_statuses(path)}")
        assert member.proc.poll() is None, member.tail()
    finally:
        member.stop()
    table = DeltaTable(table_path)  # the member's claims were committed, no row and no column
    assert table.to_pyarrow_table().num_rows == written == 10
    assert "city" not in [f.name for f in table.schema().fields]

    path = _pipeline(tmp_path, bootstrap, unique_name, V2, "add_columns")
    second = scg("run", path, timeout=600)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    rows = spark.read.format("delta").load(table_path).collect()
    assert sorted((r.id, r.city) for r in rows) == [(i, None) for i in range(10)] + [(i, f"c{i}") for i in range(10, 20)]
