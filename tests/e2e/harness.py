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
from tests.support.waiting import wait_until


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
        return wait_until(found, timeout_s, lambda: f"{self.name}: /{pattern}/\n{self.tail()}")

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
        """``sig`` to the member's whole process group (its Spark JVM included)."""
        os.killpg(self.proc.pid, sig)

    def stop(self, timeout_s: float = 90.0) -> int:
        """SIGTERM to the `scg run` process, as a scheduler stops a driver (clean: finish the
        batch, leave the group, stop Spark) and wait; SIGKILL the group past the bound."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
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


def record_key(record_id: int) -> str:
    """The key :class:`SteadyProducer` gives the record of ``record_id``."""
    return f"k{record_id % 31}"


class SteadyProducer:
    """Produces small JSON records round-robin over a topic's partitions until stopped; records
    the acknowledged (topic, partition, offset) set and, in ``acked_ids``, the record ``id`` at each
    of them. ``settings`` add producer settings; ids count up from ``first_id`` (give producers of
    one test disjoint ranges to tell their records apart, e.g. across a topic's incarnations).
    With ``tombstone_every`` N, every record whose id is N - 1 modulo N is a tombstone (no value)
    of its key (``tombstone(id)``).

    An idempotent producer can learn that a record is in the log without learning its offset: a
    batch retried after a broker restart is answered DUPLICATE_SEQUENCE_NUMBER, which librdkafka
    reports as delivered with no offset. Such records are in ``acked_unplaced_ids`` (their ids),
    not in ``acked``; a test that needs every record's place reads the log itself."""

    def __init__(self, bootstrap: str, topic: str, rate_per_s: int = 400, settings: dict | None = None,
                 first_id: int = 0, tombstone_every: int = 0):
        self.topic, self.rate, self.tombstone_every = topic, rate_per_s, tombstone_every
        self.acked: set[tuple[str, int, int]] = set()
        self.acked_ids: dict[tuple[str, int, int], int] = {}
        self.acked_unplaced_ids: set[int] = set()
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                   "log_level": 3, **(settings or {})})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._next = self.first_id = first_id

    @property
    def sent(self) -> int:
        """How many records were handed to the producer so far."""
        return self._next - self.first_id

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
        value = None if self.tombstone(i) else f'{{"id": {i}, "name": "n{i}"}}'
        self._producer.produce(self.topic, key=record_key(i), value=value,
                               on_delivery=lambda err, msg: self._on_delivery(err, msg, i))

    def tombstone(self, record_id: int) -> bool:
        """Whether the record of ``record_id`` is a tombstone."""
        return bool(self.tombstone_every) and record_id % self.tombstone_every == self.tombstone_every - 1

    def _on_delivery(self, err, msg, record_id: int) -> None:
        if err is not None:
            return
        if msg.offset() is None or msg.offset() < 0:
            self.acked_unplaced_ids.add(record_id)
            return
        coordinates = (msg.topic(), msg.partition(), msg.offset())
        self.acked.add(coordinates)
        self.acked_ids[coordinates] = record_id

    @property
    def delivered_ids(self) -> set[int]:
        """The ids of every record the broker acknowledged, placed or not."""
        return set(self.acked_ids.values()) | self.acked_unplaced_ids

    def stop(self) -> set[tuple[str, int, int]]:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(60) == 0
        return self.acked

    def halt(self) -> None:
        """Stop producing without waiting for deliveries (cleanup after a failed test)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)


class BrokerNode:
    """One node of a LocalKafka cluster (``pipelines.local.local_kafka``) that a test SIGKILLs and
    starts again: the same command line, working directory and environment as the process it
    replaces (read from /proc before the kill), the same data directory, output appended to the
    node's log. The new pid is written into the cluster's state file, so ``LocalKafka.stop()``
    still stops every node."""

    def __init__(self, state_dir: Path, node_id: int):
        self.state_file = Path(state_dir) / "cluster.json"
        self.node_id = node_id
        node = self._recorded()
        self.pid, self.client_port, self.log_file = node["pid"], node["client_port"], node["log_file"]
        self._argv = Path(f"/proc/{self.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        self._cwd = os.readlink(f"/proc/{self.pid}/cwd")
        raw_env = Path(f"/proc/{self.pid}/environ").read_bytes().rstrip(b"\0").split(b"\0")
        self._env = dict(item.decode().split("=", 1) for item in raw_env if b"=" in item)

    def _recorded(self) -> dict:
        import json

        state = json.loads(self.state_file.read_text())
        return next(n for n in state["nodes"] if n["node_id"] == self.node_id)

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        try:
            return Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def kill(self, timeout_s: float = 30.0) -> None:
        """SIGKILL the node's process group; returns once the process is gone and its port closed."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        wait_until(lambda: self._reap() or not self.alive(), timeout_s, f"broker {self.node_id} to die")
        wait_until(lambda: not _port_open(self.client_port), timeout_s, f"broker {self.node_id}'s port to close")

    def _reap(self) -> bool:
        try:
            return os.waitpid(self.pid, os.WNOHANG)[0] == self.pid
        except ChildProcessError:  # not our child (or already reaped)
            return False

    def start(self) -> None:
        """Start the node again with the recorded command (its data directory is kept)."""
        import json

        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen([a.decode() for a in self._argv], cwd=self._cwd, env=self._env,
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.pid, self._proc = proc.pid, proc  # LocalKafka.stop() reaps it through the state file
        state = json.loads(self.state_file.read_text())
        for node in state["nodes"]:
            if node["node_id"] == self.node_id:
                node["pid"] = proc.pid
        tmp = self.state_file.with_suffix(".restart.tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


class ClusterView:
    """What the cluster's metadata says about its brokers and partition replicas (confluent-kafka
    AdminClient; every call bounded)."""

    def __init__(self, bootstrap: str):
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "logger": _Quiet()})

    def _metadata(self):
        try:
            return self.admin.list_topics(timeout=5)
        except Exception:  # noqa: BLE001 - no answer now; the caller's wait retries
            return None

    def brokers(self) -> set[int]:
        metadata = self._metadata()
        return set(metadata.brokers) if metadata else set()

    def leads_nothing(self, node_id: int) -> bool:
        """True once no partition (internal topics included) has ``node_id`` as its leader."""
        metadata = self._metadata()
        return bool(metadata) and all(p.leader != node_id for t in metadata.topics.values()
                                      for p in t.partitions.values())

    def in_every_isr(self, node_id: int) -> bool:
        """True once ``node_id`` is a live broker in the in-sync replicas of every partition it
        replicates (internal topics included)."""
        metadata = self._metadata()
        if not metadata or node_id not in metadata.brokers:
            return False
        return all(node_id in p.isrs for t in metadata.topics.values() for p in t.partitions.values()
                   if node_id in p.replicas)


class _Quiet:
    """librdkafka logs refused connections while a broker is down; they are expected here."""

    def log(self, *args, **kwargs):
        pass
