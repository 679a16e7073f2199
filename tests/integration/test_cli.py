"""The `scg` command line as a user runs it (bin/scg), against a real broker, Spark and Delta."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from pipelines.local.local_kafka import free_port
from pipelines.runtime.install_paths import PROJECT_ROOT
from tests.support.kafka_data import create_topic, json_events, produce, write_pipeline

pytestmark = pytest.mark.integration
SCG = str(PROJECT_ROOT / "bin" / "scg")


def scg(*args, timeout=300):
    return subprocess.run([SCG, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_missing_pipeline_file_exits_2_with_one_clear_line(tmp_path):
    for command in ("validate", "run"):
        result = scg(command, tmp_path / "nope.yaml")
        assert result.returncode == 2
        assert "nope.yaml" in result.stderr and "Traceback" not in result.stderr


def test_kafka_start_status_stop(tmp_path):
    port = free_port()
    started = scg("kafka", "start", "--port", port, "--dir", tmp_path)
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip().splitlines()[-1] == f"127.0.0.1:{port}"
        status = scg("kafka", "status", "--dir", tmp_path)
        assert status.returncode == 0 and f"127.0.0.1:{port}" in status.stdout
    finally:
        stopped = scg("kafka", "stop", "--dir", tmp_path)
    assert "stopped 1" in stopped.stdout
    assert scg("kafka", "status", "--dir", tmp_path).returncode == 1


def test_kafka_start_with_schema_registry_then_stop_ends_both(tmp_path):
    port = free_port()
    started = scg("kafka", "start", "--port", port, "--dir", tmp_path, "--schema-registry")
    try:
        assert started.returncode == 0, started.stderr
        lines = started.stdout.strip().splitlines()
        assert lines[-1] == f"127.0.0.1:{port}"
        url = lines[-2]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/apis/ccompat/v7")
        with urllib.request.urlopen(f"{url}/subjects", timeout=10) as answer:
            assert answer.status == 200 and json.loads(answer.read()) == []
        pid = json.loads((tmp_path / "schema-registry" / "schema-registry.json").read_text())["pid"]
        status = scg("kafka", "status", "--dir", tmp_path)
        assert status.returncode == 0 and url in status.stdout and f"127.0.0.1:{port}" in status.stdout
    finally:
        stopped = scg("kafka", "stop", "--dir", tmp_path)
    assert stopped.returncode == 0 and "stopped 1" in stopped.stdout and "schema registry" in stopped.stdout
    deadline = time.monotonic() + 30
    while _process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _process_alive(pid)
    with pytest.raises(OSError):  # connection refused: nothing listens on its port any more
        urllib.request.urlopen(f"{url}/subjects", timeout=5)
    assert scg("kafka", "status", "--dir", tmp_path).returncode == 1


def _process_alive(pid: int) -> bool:
    """``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        os.kill(pid, 0)
        stat = open(f"/proc/{pid}/stat").read()
    except (ProcessLookupError, FileNotFoundError):
        return False
    except PermissionError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_kafka_start_on_a_busy_port_exits_3(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = scg("kafka", "start", "--port", busy.getsockname()[1], "--dir", tmp_path)
    assert result.returncode == 3
    assert "already in use" in result.stderr and "--port" in result.stderr


def test_run_available_now_then_describe_shows_no_lag(bootstrap, tmp_path, unique_name):
    create_topic(bootstrap, unique_name, 4)
    produced = produce(bootstrap, unique_name, json_events(400))
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, unique_name, unique_name, tmp_path)
    path.write_text(path.read_text().replace("processing_time: 500ms", "available_now: true"))
    run = scg("run", path, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    described = scg("describe", "--pipeline", path, "--json")
    assert described.returncode == 0, described.stderr
    rows = json.loads(described.stdout)["partitions"]
    assert len(rows) == 4
    assert sum(r["delta_version"] for r in rows) == len(produced)
    assert all(r["lag"] == 0 and r["committed"] == r["delta_version"] == r["log_end"] for r in rows)
    table = scg("describe", "--pipeline", path)
    assert "DELTA-VERSION" in table.stdout


def test_run_with_executors_lacking_the_packages_exits_3_before_joining(bootstrap, tmp_path, unique_name):
    """The executors' Python is checked while the member opens its tables: a Python without this
    project's packages still ends the start, named, before the member joins its group."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    create_topic(bootstrap, unique_name, 2)
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, unique_name, unique_name, tmp_path)
    run = subprocess.run([SCG, "run", str(path)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYSPARK_PYTHON": str(bare / "bin" / "python")})
    output = run.stdout + run.stderr
    assert run.returncode == 3, output[-3000:]
    assert "the executors' Python lacks pyarrow" in output and "PYSPARK_PYTHON" in output, output[-3000:]
    assert "joining consumer group" not in output
