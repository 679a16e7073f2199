"""SIGTERM ends a member within its grace period whatever its query does.

A real member process on a real broker, whose first batch hangs in Python before its Delta commit
(tests/support/hung_batch_member.py): ``query.stop()`` waits for that batch, so only the watchdog
of pipelines/cli/run_member.py can end the process, ``GRACE_S`` after the signal, exit code 143.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipelines.runtime.install_paths import PROJECT_ROOT
from tests.support.kafka_data import create_topic, json_events, produce, write_pipeline
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

GRACE_S = 8.0
EXIT_LINE = (f"[scg] member did not stop within {GRACE_S:g} s after SIGTERM; exiting now "
             "(partitions are fenced by the next owner's claim)")


@pytest.mark.timeout(240)
def test_sigterm_ends_a_member_whose_batch_hangs_within_the_grace_period(bootstrap, tmp_path: Path, unique_name):
    create_topic(bootstrap, unique_name, 2)
    produce(bootstrap, unique_name, json_events(20))
    pipeline = write_pipeline(tmp_path / "p.yaml", bootstrap, unique_name, unique_name, tmp_path)
    hang = tmp_path / "hang"
    hang.touch()
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "tests.support.hung_batch_member", str(pipeline),
         "--hang", str(hang), "--grace", str(GRACE_S)],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    pump = threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in proc.stdout), daemon=True)
    pump.start()
    try:
        def in_flight() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"member exited ({proc.returncode}) before a batch was in flight:\n"
                                     + "\n".join(lines[-30:]))
            return Path(f"{hang}.waiting").exists()
        wait_until(in_flight, 180, lambda: "a batch in flight:\n" + "\n".join(lines[-30:]), poll_s=0.1)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # the Python process only, as a container runtime does
        code = proc.wait(GRACE_S + 20)
        took = time.monotonic() - signalled
        pump.join(10)
        output = "\n".join(lines)
        assert code == 143, output
        assert GRACE_S - 0.5 <= took <= GRACE_S + 10, f"exited {took:.1f} s after SIGTERM\n{output}"
        assert lines.count(EXIT_LINE) == 1, output
        assert "[scg] SIGTERM: stopping the member" in output
        assert "Traceback" not in output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        _end_group(proc.pid)  # the Spark JVM it started, if it outlived it


def _end_group(pgid: int, timeout_s: float = 30.0) -> None:
    """Wait for the member's process group (its Spark JVM ends when the driver's pipe closes);
    SIGKILL what is left past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
