"""Start, stop and inspect a real Apache Kafka cluster (KRaft) on loopback.

``LocalKafka(state_dir).start(brokers=N, port=P)`` formats one data directory per node, starts one
JVM per node in its own process group, and returns once every broker is registered and answers
metadata requests. The cluster is described by ``<state_dir>/cluster.json``, which ``stop`` and
``status`` read, so a later CLI invocation can stop what an earlier one started. A start that fails
stops every process it launched and says why (port in use, Java missing, broker log tail).

``start(secure=True)`` starts a secured cluster instead (no plaintext listener; see
``broker_config``): per node a SASL_SSL listener (SCRAM-SHA-512) on ``client_port`` and an SSL
listener requiring client certificates on ``mtls_port``; the nodes talk to each other (inter-broker
and KRaft controller traffic) over TLS with the broker certificate. The CA, broker and client
certificates live in ``<state_dir>/tls`` and the generated passwords of the SCRAM users ``admin``
(a super user) and ``scg-client`` in ``<state_dir>/secrets`` (mode 0600); both are reused by later
starts. ``ClusterState.security`` (:class:`ClusterSecurity`) records where they are (paths, never
secrets) and builds client settings for confluent-kafka, kafka-python and pipeline files.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from groupmgr.core import ExitCategory, ScgError
from pipelines.local import broker_config as node_config
from pipelines.local import certificates
from pipelines.runtime.install_paths import conf_dir, jar_files
from pipelines.runtime.kafka_access import SilentLogger

HOST = "127.0.0.1"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
ADMIN_USER = "admin"
CLIENT_USER = certificates.CLIENT_NAME


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
    mtls_port: int | None = None


@dataclass(frozen=True)
class ClusterSecurity:
    """Where a secured cluster's client material is (paths only, never secrets), and the client
    settings built from it.

    ``sasl_ssl_bootstrap``: SCRAM-SHA-512 over TLS (users ``admin_username``, a super user, and
    ``client_username``); ``mtls_bootstrap``: TLS with the client certificate, whose principal is
    ``client_principal``. The SCRAM client user and the certificate are the same principal
    (``User:scg-client``), so one set of ACLs serves both listeners. Passwords are read from
    their files only when a settings dict is built."""

    sasl_ssl_bootstrap: str
    mtls_bootstrap: str
    sasl_mechanism: str
    ca_file: str
    client_cert_file: str
    client_key_file: str
    client_principal: str
    admin_username: str
    admin_password_file: str
    client_username: str
    client_password_file: str

    # -- confluent-kafka (librdkafka) settings ----------------------------------------------
    def admin_config(self) -> dict[str, str]:
        """confluent-kafka settings of the admin super user (SASL_SSL)."""
        return self.scram_config(self.admin_username, _read_secret(self.admin_password_file))

    def scram_config(self, username: str | None = None, password: str | None = None) -> dict[str, str]:
        """confluent-kafka settings over SASL_SSL; the client user unless others are given."""
        if username is None:
            username = self.client_username
        if password is None:
            password = _read_secret(self.client_password_file)
        return {"bootstrap.servers": self.sasl_ssl_bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": self.sasl_mechanism, "sasl.username": username,
                "sasl.password": password, "ssl.ca.location": self.ca_file}

    def mtls_config(self, cert_file: str | Path | None = None, key_file: str | Path | None = None,
                    with_certificate: bool = True) -> dict[str, str]:
        """confluent-kafka settings over the mutual-TLS listener: the client certificate (or
        ``cert_file``/``key_file``), or none at all with ``with_certificate=False``."""
        conf = {"bootstrap.servers": self.mtls_bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": self.ca_file}
        if with_certificate:
            conf["ssl.certificate.location"] = str(cert_file or self.client_cert_file)
            conf["ssl.key.location"] = str(key_file or self.client_key_file)
        return conf

    # -- kafka-python settings (the group member's client) ----------------------------------
    def kafka_python_scram(self, username: str | None = None,
                           password: str | None = None) -> dict[str, Any]:
        """kafka-python keyword arguments over SASL_SSL; the client user unless others are given."""
        conf = self.scram_config(username, password)
        return {"bootstrap_servers": conf["bootstrap.servers"].split(","),
                "security_protocol": "SASL_SSL", "sasl_mechanism": self.sasl_mechanism,
                "sasl_plain_username": conf["sasl.username"],
                "sasl_plain_password": conf["sasl.password"], "ssl_cafile": self.ca_file}

    def kafka_python_mtls(self, cert_file: str | Path | None = None,
                          key_file: str | Path | None = None) -> dict[str, Any]:
        """kafka-python keyword arguments over the mutual-TLS listener."""
        return {"bootstrap_servers": self.mtls_bootstrap.split(","), "security_protocol": "SSL",
                "ssl_cafile": self.ca_file, "ssl_certfile": str(cert_file or self.client_cert_file),
                "ssl_keyfile": str(key_file or self.client_key_file)}

    # -- pipeline files ----------------------------------------------------------------------
    def pipeline_kafka(self, listener: str = "sasl_ssl") -> dict[str, Any]:
        """The ``kafka:`` section of a pipeline file for the client user on ``listener``
        (``sasl_ssl`` or ``mtls``): bootstrap servers and ``security`` (the password as
        ``sasl_password_file``, never inline)."""
        if listener == "sasl_ssl":
            return {"bootstrap_servers": self.sasl_ssl_bootstrap, "security": {
                "protocol": "SASL_SSL", "sasl_mechanism": self.sasl_mechanism,
                "sasl_username": self.client_username,
                "sasl_password_file": self.client_password_file, "ssl_ca_location": self.ca_file}}
        if listener == "mtls":
            return {"bootstrap_servers": self.mtls_bootstrap, "security": {
                "protocol": "SSL", "ssl_ca_location": self.ca_file,
                "ssl_certificate_location": self.client_cert_file,
                "ssl_key_location": self.client_key_file}}
        raise ValueError(f"listener {listener!r}: use 'sasl_ssl' or 'mtls'")


@dataclass(frozen=True)
class ClusterState:
    """The local cluster as recorded in its state file: cluster id, nodes and, for a secured
    cluster, where its client material is (``bootstrap_servers`` is then the SASL_SSL listener)."""

    bootstrap_servers: str
    cluster_id: str
    nodes: tuple[NodeProcess, ...]
    security: ClusterSecurity | None = None

    def alive_nodes(self) -> list[NodeProcess]:
        return [n for n in self.nodes if _pid_alive(n.pid)]


class LocalKafka:
    """A local cluster rooted at ``state_dir`` (one per directory). Not thread safe."""

    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)
        self.state_file = self.state_dir / "cluster.json"

    # -- public ------------------------------------------------------------------------------
    def start(self, brokers: int = 1, port: int | None = None,
              timeout_s: float = READY_TIMEOUT_S, progress=lambda msg: None,
              secure: bool = False, grant_client_all: bool = False) -> ClusterState:
        """Start ``brokers`` nodes; ``port`` is the first client port (next nodes use port+i).

        ``secure``: SASL_SSL listeners on port+i and mutual-TLS listeners on port+brokers+i (free
        ports without ``port``); the client user starts without ACLs unless ``grant_client_all``."""
        if shutil.which("java") is None:
            raise JavaNotFoundError()
        running = self.status()
        if running and running.alive_nodes():
            raise AlreadyRunningError(running.bootstrap_servers, self.state_file)
        nodes = _allocate_ports(brokers, port, secure)
        classpath = os.pathsep.join(str(j) for j in jar_files("broker"))
        cluster_id = node_config.new_cluster_id()
        broker_security, security, scram = self._prepare_security(nodes) if secure else (None, None, [])
        self._reset_dirs()
        processes: list[NodeProcess] = []
        try:
            for node in nodes:
                progress(f"starting Kafka node {node.node_id} on {HOST}:{node.client_port}"
                         + (f" (SASL_SSL) and {HOST}:{node.mtls_port} (mutual TLS)" if secure else ""))
                processes.append(self._launch(node, nodes, cluster_id, classpath, broker_security,
                                              scram))
                self._write_state(ClusterState(_bootstrap(nodes), cluster_id, tuple(processes),
                                               security))
            state = ClusterState(_bootstrap(nodes), cluster_id, tuple(processes), security)
            _wait_ready(state, timeout_s, progress)
            if grant_client_all and security is not None:
                from pipelines.local.acls import AclAdmin, everything_acls

                AclAdmin(security.admin_config()).grant(security.client_principal, everything_acls())
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
        security = ClusterSecurity(**raw["security"]) if raw.get("security") else None
        return ClusterState(raw["bootstrap_servers"], raw["cluster_id"], nodes, security)

    # -- internals ---------------------------------------------------------------------------
    def _reset_dirs(self) -> None:
        shutil.rmtree(self.state_dir / "nodes", ignore_errors=True)
        (self.state_dir / "nodes").mkdir(parents=True)

    def _prepare_security(self, nodes):
        """Certificates and SCRAM passwords (made or reused), the nodes' TLS settings, what the
        state file records, and the ``--add-scram`` arguments (salted, no password in them)."""
        root = self.state_dir.resolve()  # the recorded paths work from any directory
        certs = certificates.ensure_certificates(root / "tls")
        secret_dir = root / "secrets"
        admin_file = _password_file(secret_dir / f"{ADMIN_USER}.password")
        client_file = _password_file(secret_dir / f"{CLIENT_USER}.password")
        broker_security = node_config.BrokerSecurity(
            truststore_file=certs.ca_file,
            certificate_chain=certificates.read_pem(certs.broker_cert_file),
            private_key=certificates.read_pem(certs.broker_key_file),
            super_users=(certs.broker_principal, f"User:{ADMIN_USER}"))
        security = ClusterSecurity(
            sasl_ssl_bootstrap=_bootstrap(nodes),
            mtls_bootstrap=",".join(f"{HOST}:{n.mtls_port}" for n in nodes),
            sasl_mechanism=node_config.SCRAM_MECHANISM, ca_file=str(certs.ca_file),
            client_cert_file=str(certs.client.cert_file), client_key_file=str(certs.client.key_file),
            client_principal=certs.client.principal, admin_username=ADMIN_USER,
            admin_password_file=str(admin_file), client_username=CLIENT_USER,
            client_password_file=str(client_file))
        scram = [node_config.scram_credential(ADMIN_USER, _read_secret(admin_file)),
                 node_config.scram_credential(CLIENT_USER, _read_secret(client_file))]
        return broker_security, security, scram

    def _launch(self, node, nodes, cluster_id: str, classpath: str,
                security: node_config.BrokerSecurity | None = None,
                scram: list[str] = ()) -> NodeProcess:
        node_dir = self.state_dir / "nodes" / str(node.node_id)
        node_dir.mkdir(parents=True)
        props = node_dir / "server.properties"
        text = node_config.render_server_properties(node, nodes, node_dir / "data", HOST, security)
        _write_private(props, text)  # a secured node's file holds its private key
        log_file = node_dir / "broker.log"
        java = _java_command(classpath, node_dir)
        scram_args = [arg for credential in scram for arg in ("--add-scram", credential)]
        fmt = subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", cluster_id,
                                     "-c", str(props), *scram_args], capture_output=True, text=True)
        if fmt.returncode != 0:
            log_file.write_text(fmt.stdout + fmt.stderr)
            raise BrokerStartError("formatting the data directory failed", log_file)
        with open(log_file, "ab") as out:
            proc = subprocess.Popen(java + ["kafka.Kafka", str(props)], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        return NodeProcess(node.node_id, node.client_port, node.controller_port, proc.pid,
                           str(log_file), node.mtls_port)

    def _write_state(self, state: ClusterState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        tmp.replace(self.state_file)


def _java_command(classpath: str, node_dir: Path) -> list[str]:
    heap = os.environ.get("SCG_KAFKA_HEAP", "512m")
    return ["java", f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={conf_dir() / 'kafka-log4j2.properties'}",
            f"-Dkafka.logs.dir={node_dir}", "-cp", classpath]


def _allocate_ports(brokers: int, first_port: int | None,
                    secure: bool = False) -> list[node_config.NodePorts]:
    """Client ports first_port+i (and, secured, mutual-TLS ports first_port+brokers+i), or free
    ports; controller ports are always free ports. No port is handed out twice."""
    if brokers < 1:
        raise ValueError("--brokers must be at least 1")
    wanted = brokers * (2 if secure else 1)
    fixed = [first_port + i for i in range(wanted)] if first_port else []
    for port in fixed:
        if not port_is_free(port):
            raise PortInUseError(port)
    taken: set[int] = set(fixed)

    def fresh() -> int:
        while (port := free_port()) in taken:
            pass
        taken.add(port)
        return port

    ports = fixed or [fresh() for _ in range(wanted)]
    return [node_config.NodePorts(i + 1, ports[i], fresh(), ports[brokers + i] if secure else None)
            for i in range(brokers)]


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


def _password_file(path: Path) -> Path:
    """``path``, holding a random password (made if missing; the directory 0700, the file 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    if not path.exists() or not _read_secret(path):
        _write_private(path, secrets.token_urlsafe(24))
    return path


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (created 0600, replaced atomically)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    tmp.replace(path)


def _read_secret(path: str | Path) -> str:
    return Path(path).read_text(encoding="utf-8").strip()


def _wait_ready(state: ClusterState, timeout_s: float, progress) -> None:
    """Return once all brokers are registered and serve metadata; bounded by ``timeout_s``."""
    from confluent_kafka.admin import AdminClient

    conf = (state.security.admin_config() if state.security
            else {"bootstrap.servers": state.bootstrap_servers})
    admin = AdminClient({**conf, "log_level": 0, "logger": SilentLogger()})
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
