"""`bin/scg demo` ends quietly (issue 10, item 8): every Kafka client it made is closed before it
stops its broker, so no rdkafka "Connection refused" line follows "stopping Kafka"."""
from __future__ import annotations

import os
import subprocess

import pytest

from pipelines.runtime.install_paths import PROJECT_ROOT

pytestmark = pytest.mark.e2e


def test_no_client_outlives_the_demo_broker(tmp_path):
    env = {**os.environ, "SCG_STATE_DIR": str(tmp_path)}
    proc = subprocess.run([str(PROJECT_ROOT / "bin" / "scg"), "demo", "--records", "300", "--partitions", "2"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:]
    lines = out.splitlines()
    stopping = next(i for i, line in enumerate(lines) if "stopping Kafka" in line)
    assert lines[-1].endswith("done"), out[-2000:]
    late = [line for line in lines[stopping:] if "rdkafka" in line or "Connection refused" in line]
    assert not late, "\n".join(late)
