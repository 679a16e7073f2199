"""`bin/scg demo` as a user runs it: N produced = N rows in Delta, nothing printed by a Kafka client
after the broker stops, and Ctrl-C stops everything."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from pipelines.runtime.install_paths import PROJECT_ROOT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


def start_demo(tmp_path, records: int) -> subprocess.Popen:
    env = {**os.environ, "SCG_STATE_DIR": str(tmp_path)}
    return subprocess.Popen([str(PROJECT_ROOT / "bin" / "scg"), "demo", "--records", str(records)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)


def broker_pids(tmp_path) -> list[int]:
    state = tmp_path / "demo" / "kafka" / "cluster.json"
    return [n["pid"] for n in json.loads(state.read_text())["nodes"]] if state.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = open(f"/proc/{pid}/stat").read()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_demo_lands_every_record_once(tmp_path):
    proc = start_demo(tmp_path, 3000)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    assert "3000 rows (3000 distinct Kafka coordinates), 3000 produced" in out
    assert "stopping Kafka" in out and not broker_pids(tmp_path)
    # Quiet to the end: every Kafka client the demo made is closed before it
    # stops its broker, so no rdkafka "Connection refused" line follows "stopping Kafka".
    lines = out.splitlines()
    stopping = next(i for i, line in enumerate(lines) if "stopping Kafka" in line)
    late = [line for line in lines[stopping:] if "rdkafka" in line or "Connection refused" in line]
    assert not late, "\n".join(late)


def test_ctrl_c_stops_everything_it_started(tmp_path):
    proc = start_demo(tmp_path, 3000)
    lines: list[str] = []
    deadline = time.monotonic() + 300
    for line in proc.stdout:  # bounded by the deadline check below and the demo's own limits
        lines.append(line)
        if "starting query" in line or "query started over reader" in line or time.monotonic() > deadline:
            break
    pids = broker_pids(tmp_path)
    assert pids and all(alive(p) for p in pids), "".join(lines[-20:])
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends to the foreground group
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "stopping Kafka" in rest
    wait_until(lambda: not any(alive(p) for p in pids), 30, "the demo's broker to be gone")
    assert not broker_pids(tmp_path)
