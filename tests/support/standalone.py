"""A Spark standalone master and worker started from pyspark's own classes (no Spark download):
the same path as a real cluster, on loopback."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pyspark

from pipelines.local.local_kafka import free_port

SPARK_HOME = Path(pyspark.__file__).parent


class StandaloneCluster:
    """A master and ``workers`` workers (each with ``cores`` cores and ``memory``) on loopback."""

    def __init__(self, work_dir: Path, cores: int = 1, memory: str = "1g", workers: int = 1):
        self.work_dir, self.cores, self.memory, self.workers = Path(work_dir), cores, memory, workers
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "StandaloneCluster":
        self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(free_port()))
        self._wait_log("master", "I have been elected leader", 60)
        for index in range(self.workers):
            self._daemon(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", self.url,
                         "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                         "--webui-port", str(free_port()), "--work-dir", str(self.work_dir / f"work-{index}"))
        self._wait_log("master", "Registering worker", 60, count=self.workers)
        return self

    def _daemon(self, name: str, cls: str, *args: str) -> None:
        log = open(self.work_dir / f"{name}.log", "w")
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
        self.procs.append(subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), cls, *args],
                                           stdout=log, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True))

    def _wait_log(self, name: str, text: str, timeout_s: float, count: int = 1) -> None:
        deadline = time.monotonic() + timeout_s
        path = self.work_dir / f"{name}.log"
        while path.read_text(errors="replace").count(text) < count:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"standalone {name} did not report {text!r}:\n{path.read_text()[-3000:]}")
            time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
