"""Start, stop and inspect a real Apache Kafka cluster (KRaft) on loopback.

``LocalKafka(state_dir).start(brokers=N, port=P)`` formats one data directory per node, starts one
JVM per node in its own process group, and returns once every broker is registered and answers
metadata requests. The cluster is described by ``<state_dir>/cluster.json``, which ``stop`` and
``status`` read, so a later CLI invocation can stop what an earlier one started. A start that fails
stops every process it launched and says why (port in use, Java missing, broker log tail).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from groupmgr.core import ExitCategory, ScgError
from pipelines.local import broker_config as node_config
from pipelines.runtime.install_paths import conf_dir, jar_files

HOST = "127.0.0.1"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0


class LocalKafkaError(ScgError):
    """Base of local-cluster errors: the machine cannot run a local Kafka (exit 3)."""

    condition = "LOCAL_KAFKA_ERROR"
    exit_category = ExitCategory.ENVIRONMENT


class PortInUseError(LocalKafkaError):
    """A port the local cluster needs is taken by another process."""

    condition = "PORT_IN_USE"

    def __init__(self, port: int):
        self.port = port
        super().__init__(
            f"port {port} on {HOST} is already in use. Stop what listens there "
            f"(see `ss -ltnp 'sport = :{port}'`), run `bin/scg kafka stop` if it is an earlier "
            f"local Kafka, or pass another --port.")


class JavaNotFoundError(LocalKafkaError):
    """No Java 17+ to run the broker."""

    condition = "JAVA_NOT_FOUND"

    def __init__(self):
        super().__init__("java not found on PATH. Install Java 17 "
                         "(apt-get install openjdk-17-jdk-headless) or put $JAVA_HOME/bin on PATH.")


class BrokerStartError(LocalKafkaError):
    """A broker process exited or did not become ready in time; the message points at its log."""

    condition = "BROKER_DID_NOT_START"

    def __init__(self, reason: str, log_file: Path):
        self.reason, self.log_file = reason, log_file
        tail = _tail(log_file)
        super().__init__(f"Kafka did not come up: {reason}. Broker log {log_file}:\n{tail}")


class AlreadyRunningError(LocalKafkaError):
    """A local cluster is already running from this state directory."""

    condition = "ALREADY_RUNNING"

    def __init__(self, bootstrap: str, state_file: Path):
        self.bootstrap = bootstrap
        super().__init__(f"a local Kafka from {state_file} already runs at {bootstrap}. "
                         "Use it, or run `bin/scg kafka stop` first.")


@dataclass(frozen=True)
class NodeProcess:
    """One running broker node: id, pid, ports and log file (as recorded in the state file)."""

    node_id: int
    client_port: int
    controller_port: int
    pid: int
    log_file: str


@dataclass(frozen=True)
class ClusterState:
    """The local cluster as recorded in its state file: cluster id and nodes."""

    bootstrap_servers: str
    cluster_id: str
    nodes: tuple[NodeProcess, ...]

    def alive_nodes(self) -> list[NodeProcess]:
        return [n for n in self.nodes if _pid_alive(n.pid)]


class LocalKafka:
    """A local cluster rooted at ``state_dir`` (one per directory). Not thread safe."""

    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)
        self.state_file = self.state_dir / "cluster.json"

    # -- public ------------------------------------------------------------------------------
    def start(self, brokers: int = 1, port: int | None = None,
              timeout_s: float = READY_TIMEOUT_S, progress=lambda msg: None) -> ClusterState:
        """Start ``brokers`` nodes; ``port`` is the first client port (next nodes use port+i)."""
        if shutil.which("java") is None:
            raise JavaNotFoundError()
        running = self.status()
        if running and running.alive_nodes():
            raise AlreadyRunningError(running.bootstrap_servers, self.state_file)
        nodes = _allocate_ports(brokers, port)
        classpath = os.pathsep.join(str(j) for j in jar_files("broker"))
        cluster_id = node_config.new_cluster_id()
        self._reset_dirs()
        processes: list[NodeProcess] = []
        try:
            for node in nodes:
                progress(f"starting Kafka node {node.node_id} on {HOST}:{node.client_port}")
                processes.append(self._launch(node, nodes, cluster_id, classpath))
                self._write_state(ClusterState(_bootstrap(nodes), cluster_id, tuple(processes)))
            state = ClusterState(_bootstrap(nodes), cluster_id, tuple(processes))
            _wait_ready(state, timeout_s, progress)
            return state
        except BaseException:
            _terminate(processes)
            self.state_file.unlink(missing_ok=True)
            raise

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Stop every node of this directory's cluster; returns how many processes were running."""
        state = self.status()
        if state is None:
            return 0
        alive = state.alive_nodes()
        _terminate(list(state.nodes), timeout_s)
        self.state_file.unlink(missing_ok=True)
        return len(alive)

    def status(self) -> ClusterState | None:
        if not self.state_file.exists():
            return None
        raw = json.loads(self.state_file.read_text())
        nodes = tuple(NodeProcess(**n) for n in raw["nodes"])
        return ClusterState(raw["bootstrap_servers"], raw["cluster_id"], nodes)

    # -- internals ---------------------------------------------------------------------------
    def _reset_dirs(self) -> None:
        shutil.rmtree(self.state_dir / "nodes", ignore_errors=True)
        (self.state_dir / "nodes").mkdir(parents=True)

    def _launch(self, node, nodes, cluster_id: str, classpath: str) -> NodeProcess:
        node_dir = self.state_dir / "nodes" / str(node.node_id)
        node_dir.mkdir(parents=True)
        props = node_dir / "server.properties"
        props.write_text(node_config.render_server_properties(node, nodes, node_dir / "data"))
        log_file = node_dir / "broker.log"
        java = _java_command(classpath, node_dir)
        fmt = subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", cluster_id,
                                     "-c", str(props)], capture_output=True, text=True)
        if fmt.returncode != 0:
            log_file.write_text(fmt.stdout + fmt.stderr)
            raise BrokerStartError("formatting the data directory failed", log_file)
        with open(log_file, "ab") as out:
            proc = subprocess.Popen(java + ["kafka.Kafka", str(props)], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        return NodeProcess(node.node_id, node.client_port, node.controller_port, proc.pid,
                           str(log_file))

    def _write_state(self, state: ClusterState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        tmp.replace(self.state_file)


def _java_command(classpath: str, node_dir: Path) -> list[str]:
    heap = os.environ.get("SCG_KAFKA_HEAP", "512m")
    return ["java", f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={conf_dir() / 'kafka-log4j2.properties'}",
            f"-Dkafka.logs.dir={node_dir}", "-cp", classpath]


def _allocate_ports(brokers: int, first_port: int | None) -> list[node_config.NodePorts]:
    if brokers < 1:
        raise ValueError("--brokers must be at least 1")
    client_ports = ([first_port + i for i in range(brokers)] if first_port
                    else [free_port() for _ in range(brokers)])
    for port in client_ports:
        if not port_is_free(port):
            raise PortInUseError(port)
    return [node_config.NodePorts(i + 1, p, free_port()) for i, p in enumerate(client_ports)]


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def _bootstrap(nodes) -> str:
    return ",".join(f"{HOST}:{n.client_port}" for n in nodes)


def _wait_ready(state: ClusterState, timeout_s: float, progress) -> None:
    """Return once all brokers are registered and serve metadata; bounded by ``timeout_s``."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": state.bootstrap_servers, "log_level": 0,
                         "logger": _SilentLogger()})
    deadline = time.monotonic() + timeout_s
    next_note = time.monotonic() + 5
    while time.monotonic() < deadline:
        for node in state.nodes:
            if not _pid_alive(node.pid):
                raise BrokerStartError(f"node {node.node_id} exited", Path(node.log_file))
        try:
            brokers = admin.list_topics(timeout=2).brokers
            if len(brokers) == len(state.nodes):
                return
        except Exception:  # noqa: BLE001 - not up yet; retried until the deadline
            pass
        if time.monotonic() > next_note:
            progress("waiting for Kafka to serve requests ...")
            next_note = time.monotonic() + 5
        time.sleep(0.3)
    raise BrokerStartError(f"not ready after {timeout_s:.0f}s", Path(state.nodes[0].log_file))


class _SilentLogger:
    """librdkafka logs connection refusals while the broker boots; they are expected here."""

    def log(self, *args, **kwargs):  # noqa: D401 - logging.Logger-compatible sink
        pass


def _terminate(nodes, timeout_s: float = STOP_TIMEOUT_S) -> None:
    pids = [n.pid for n in nodes if _pid_alive(n.pid)]
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if _pid_alive(pid):
            _signal_group(pid, signal.SIGKILL)
    kill_deadline = time.monotonic() + 10
    while time.monotonic() < kill_deadline and any(_pid_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        _reap(pid)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int, timeout_s: float = 10.0) -> None:
    """Collect the exit status of our own child ``pid`` (a JVM's main thread can look like a
    zombie while its other threads still exit, so wait, bounded). Not our child: nothing to do."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            return
        time.sleep(0.05)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
