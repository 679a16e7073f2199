"""A Spark task that dies after writing its file is retried by Spark and the table stays exact:
only the driver's commit references files, so the dead attempt's file stays unreferenced
(docs/DESIGN.md invariant 8). On the Spark SQL path's writer and on the Arrow path, whose retried
task reads its ranges from Kafka again."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.runtime.install_paths import PROJECT_ROOT, jar_files
from sinks.data_files import unreferenced_files
from tests.support.kafka_data import create_topic, produce

pytestmark = pytest.mark.integration


def _submit_job(table: Path, marker_dir: Path, *args: str) -> subprocess.CompletedProcess:
    spark_submit = Path(sys.executable).parent / "spark-submit"
    result = subprocess.run(
        [str(spark_submit), "--master", "local[2,3]", "--jars", ",".join(map(str, jar_files("spark"))),
         "--conf", "spark.driver.host=127.0.0.1",
         str(PROJECT_ROOT / "tests" / "support" / "task_retry_job.py"), str(table), str(marker_dir), *args],
        capture_output=True, text=True, timeout=600, cwd=PROJECT_ROOT,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
             "PYTHONPATH": str(PROJECT_ROOT)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_a_retried_task_leaves_an_unreferenced_file_never_a_row_twice(tmp_path):
    table = tmp_path / "table"
    result = _submit_job(table, tmp_path)
    assert (tmp_path / "failed-once").exists(), "the injected failure did not happen"
    assert "injected executor failure" in result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["rows_written"] == 2000
    rows = DeltaTable(str(table)).to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    coordinates = [(r["partition"], r["offset"]) for r in rows]
    assert len(coordinates) == len(set(coordinates)) == 2000
    assert unreferenced_files(str(table)).count >= 1


def test_a_retried_arrow_task_reads_its_ranges_again_and_leaves_no_row_twice(tmp_path, bootstrap, unique_name):
    create_topic(bootstrap, unique_name, 2)
    produce(bootstrap, unique_name, [(None, json.dumps({"id": n})) for n in range(3000)])
    table = tmp_path / "table"
    result = _submit_job(table, tmp_path, bootstrap, unique_name)
    assert (tmp_path / "failed-once").exists(), "the injected failure did not happen"
    assert "injected executor failure" in result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["rows_written"] == 3000
    rows = DeltaTable(str(table)).to_pyarrow_table(columns=["partition", "offset", "id"]).to_pylist()
    assert len({(r["partition"], r["offset"]) for r in rows}) == len(rows) == 3000
    assert sorted(r["id"] for r in rows) == list(range(3000))
    assert unreferenced_files(str(table)).count >= 1
