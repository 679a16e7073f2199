"""`spark-submit pipelines/cli/submit.py FILE` — the README's cluster path — on a standalone
master + worker, and on local[2] with checkpoints on a Hadoop filesystem that is not the local
disk, with the group member inside the driver (docs/DESIGN.md invariant 5)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.runtime.install_paths import PROJECT_ROOT, jar_files
from tests.support.kafka_data import (create_topic, delta_coordinates, json_events, produce,
                                      write_pipeline)
from tests.support.standalone import StandaloneCluster

pytestmark = pytest.mark.integration
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


def submit(master: str, pipeline: Path, timeout_s: float = 600,
           conf: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    jars = ",".join(str(j) for j in jar_files("spark"))
    extra = [arg for key, value in (conf or {}).items() for arg in ("--conf", f"{key}={value}")]
    command = [str(SPARK_SUBMIT), "--master", master, "--jars", jars, *extra,
               "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
               "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
               "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.host=127.0.0.1",
               str(PROJECT_ROOT / "pipelines" / "cli" / "submit.py"), str(pipeline)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env,
                          cwd=PROJECT_ROOT)


def _available_now_pipeline(bootstrap, tmp_path, name) -> tuple[Path, set]:
    create_topic(bootstrap, name, 3)
    produced = produce(bootstrap, name, json_events(300))
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, name, name, tmp_path)
    path.write_text(path.read_text().replace("processing_time: 500ms", "available_now: true"))
    return path, produced


def test_spark_submit_to_a_standalone_cluster_writes_every_record_once(bootstrap, spark, tmp_path, unique_name):
    path, produced = _available_now_pipeline(bootstrap, tmp_path, unique_name)
    with StandaloneCluster(tmp_path) as standalone:
        result = submit(standalone.url, path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "generation" in result.stdout
    rows = delta_coordinates(spark, tmp_path / "table")
    assert len(rows) == len(set(rows)) and set(rows) == produced


def test_checkpoints_resolve_through_hadoop_when_the_default_fs_is_not_the_local_disk(
        bootstrap, spark, tmp_path, unique_name):
    """fs.defaultFS is a viewfs mount table whose /scg-ckpt is elsewhere: a scheme-less
    checkpoint_root must be read (offset log) and cleaned where Spark writes it, not on the
    driver's local disk (pathlib would find nothing at /scg-ckpt and fail every batch)."""
    path, produced = _available_now_pipeline(bootstrap, tmp_path, unique_name)
    path.write_text(path.read_text().replace(f"checkpoint_root: {tmp_path / 'checkpoints'}",
                                             "checkpoint_root: /scg-ckpt/root"))
    mounted = tmp_path / "viewfs-ckpt"
    mounted.mkdir()
    result = submit("local[2]", path, conf={
        "spark.hadoop.fs.defaultFS": "viewfs://scg/",
        "spark.hadoop.fs.viewfs.mounttable.scg.link./scg-ckpt": f"file://{mounted}",
        "spark.hadoop.fs.viewfs.mounttable.scg.linkFallback": "file:///",
    })
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "generation" in result.stdout
    assert not Path("/scg-ckpt").exists()
    generations = list((mounted / "root").iterdir())
    assert generations, "Spark wrote no checkpoint under the mounted directory"
    assert all(not any(g.iterdir()) for g in generations), "stopped queries' checkpoints were not removed"
    rows = delta_coordinates(spark, tmp_path / "table")
    assert len(rows) == len(set(rows)) and set(rows) == produced
