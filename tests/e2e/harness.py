"""Multi-process harness: pipeline members as real `scg run` processes, a steady producer, and
checks that read the Delta table's recorded offsets. Every wait polls with a deadline."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from pipelines.runtime.install_paths import PROJECT_ROOT


def wait_until(predicate, timeout_s: float, what: str, poll_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(poll_s)


RUNNING: list["MemberProcess"] = []  # killed after each test by tests/e2e/conftest.py


class MemberProcess:
    """One `python -m pipelines.cli run FILE` process with its output collected line by line;
    ``command`` replaces the module and arguments (e.g. a member with test hooks)."""

    def __init__(self, name: str, pipeline: Path, log_dir: Path, env: dict | None = None,
                 command: list[str] | None = None):
        self.name = name
        self.lines: list[str] = []
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "w")
        args = command or ["-m", "pipelines.cli", "run", str(pipeline)]
        self.proc = subprocess.Popen(
            [sys.executable, "-u", *args], cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **(env or {})}, start_new_session=True)
        threading.Thread(target=self._pump, daemon=True).start()
        RUNNING.append(self)

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._log.write(line)
            self._log.flush()

    def count(self, pattern: str) -> int:
        regex = re.compile(pattern)
        return sum(1 for line in list(self.lines) if regex.search(line))

    def wait_for(self, pattern: str, timeout_s: float = 120.0, after: int = 0) -> str:
        """The first line matching ``pattern`` among lines[after:]."""
        regex = re.compile(pattern)

        def found():
            if self.proc.poll() is not None and not self._match(regex, after):
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}):\n{self.tail()}")
            return self._match(regex, after)
        return wait_until(found, timeout_s, f"{self.name}: /{pattern}/\n{self.tail()}")

    def _match(self, regex, after: int):
        return next((line for line in list(self.lines)[after:] if regex.search(line)), None)

    def owned(self) -> set[tuple[str, int]]:
        """Partitions from the latest 'assigned' line (empty after a 'revoked' line)."""
        owned: set[tuple[str, int]] = set()
        for line in list(self.lines):
            if "assigned" in line and "partition(s)" in line:
                owned = {(m.group(1), int(m.group(2)))
                         for m in re.finditer(r"([\w.-]+)-(\d+)(?=[,\]])", line.split("[", 1)[1])}
            elif "revoked" in line or "fenced by the group" in line:
                owned = set()
        return owned

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def stop(self, timeout_s: float = 90.0) -> int:
        """SIGTERM (clean: finish the batch, leave the group) and wait; SIGKILL past the bound."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not stop within {timeout_s}s:\n{self.tail()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
        self.proc.wait(30)

    def tail(self, n: int = 25) -> str:
        return "\n".join(list(self.lines)[-n:])


class SteadyProducer:
    """Produces small JSON records round-robin over a topic's partitions until stopped; records
    the acknowledged (topic, partition, offset) set."""

    def __init__(self, bootstrap: str, topic: str, rate_per_s: int = 400):
        self.topic, self.rate = topic, rate_per_s
        self.acked: set[tuple[str, int, int]] = set()
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                   "log_level": 3})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._next = 0

    def start(self) -> "SteadyProducer":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(max(self.rate // 20, 1)):
                self._send()
            self._producer.poll(0)
            time.sleep(0.05)

    def _send(self) -> None:
        i = self._next
        self._next += 1
        self._producer.produce(self.topic, key=f"k{i % 31}", value=f'{{"id": {i}, "name": "n{i}"}}',
                               on_delivery=self._on_delivery)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked.add((msg.topic(), msg.partition(), msg.offset()))

    def stop(self) -> set[tuple[str, int, int]]:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(60) == 0
        return self.acked
