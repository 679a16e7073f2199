"""A real Confluent-compatible Schema Registry on loopback: Apicurio Registry 3.3.

What runs is Apicurio's own distribution from Maven Central (``apicurio-registry-app``'s ``all``
tar.gz, a Quarkus fast-jar: ``quarkus-run.jar`` and ``lib/``), pinned by
``pipelines/resources/jvm/schema-registry/pom.xml``. :func:`install` resolves it with Maven and
unpacks it into ``<cache>/schema-registry/<key>/``, the key a hash of that POM and the shipped
Maven settings: the entry appears whole (unpacked in a temporary directory, then renamed) or not
at all, and a second install finds it and needs no network. ``bin/bootstrap`` runs
``python -m pipelines.local.schema_registry --install --link <root>/.scg/schema-registry``, which
also records a class-data-sharing archive of one start for the Java it finds (a faster start).

:class:`SchemaRegistry` starts one registry: its HTTP API on a free loopback port, the
Confluent-compatible API at :attr:`SchemaRegistry.url` (``http://127.0.0.1:<port>/apis/ccompat/v7``;
``https://`` only, given a certificate and key),
its health on a second free port (Quarkus' management interface), storage in memory (H2; gone when
it stops), the log in ``<workdir>/schema-registry.log``. ``start`` returns once ``/health/ready``
answers UP, within a bound; ``stop`` ends the process group (SIGTERM, then SIGKILL). ``detach``
records it in ``<workdir>/schema-registry.json`` so that it outlives this process (``scg kafka start
--schema-registry``); :meth:`SchemaRegistry.attach` finds it from another one, whose ``stop`` ends it. Apicurio's
own default global compatibility rule is none; this class sets ``BACKWARD``, Confluent's default,
unless told otherwise (``compatibility=None`` keeps Apicurio's).

Apicurio Registry 3.3 is built for Java 21: :func:`find_java` takes ``SCG_REGISTRY_JAVA_HOME``,
else the first Java 21+ of ``JAVA_HOME``, ``PATH`` and ``/usr/lib/jvm``.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from groupmgr.core import ExitCategory, ScgError
from pipelines.local.local_kafka import _pid_alive, free_port
from pipelines.local.resolve_jars import link, report_failure
from pipelines.local.resolve_jars import say as bootstrap_say
from pipelines.runtime.install_paths import IN_CHECKOUT, PROJECT_ROOT, cache_dir, conf_dir, maven_settings
from pipelines.runtime.jar_cache import locked

APICURIO_VERSION = "3.3.3"
PIN_DIR = conf_dir() / "jvm" / "schema-registry"
SHIPPED_SETTINGS = conf_dir() / "jvm" / "maven-settings.xml"
LINK = PROJECT_ROOT / ".scg" / "schema-registry"
MIN_JAVA = 21
HOST = "127.0.0.1"
CCOMPAT_PATH = "/apis/ccompat/v7"
HEALTH_PATH = "/health/ready"
DEFAULT_HEAP = "128m"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
STATE_FILE = "schema-registry.json"
PORT_TRIES = 3
# what Quarkus logs when another process took a port between free_port and its bind
_PORT_TAKEN = re.compile(r"in use by another process|already bound|Address already in use", re.IGNORECASE)


class SchemaRegistryError(ScgError):
    """Base of the local schema registry's errors: the machine cannot run one (exit 3)."""

    condition = "SCHEMA_REGISTRY_ERROR"
    exit_category = ExitCategory.ENVIRONMENT


class RegistryJavaNotFoundError(SchemaRegistryError):
    """No Java 21+ to run Apicurio Registry 3.3."""

    condition = "JAVA_21_NOT_FOUND"

    def __init__(self, detail: str = ""):
        super().__init__(
            f"the schema registry (Apicurio Registry {APICURIO_VERSION}) needs Java {MIN_JAVA}+ and none "
            f"was found{detail}. Install one (e.g. Temurin 21, or openjdk-21-jre-headless where Debian "
            "has it) and set SCG_REGISTRY_JAVA_HOME to its home, or put it on PATH.")


class RegistryInstallError(SchemaRegistryError):
    """The registry's distribution could not be resolved or unpacked; ``details`` is Maven's output
    when there is one."""

    condition = "SCHEMA_REGISTRY_NOT_INSTALLED"

    def __init__(self, reason: str, maven_log: Path | None = None):
        self.details = str(maven_log) if maven_log else None
        super().__init__(f"could not install the schema registry: {reason}. Nothing was kept; rerun "
                         "bin/bootstrap when that is fixed.")


class RegistryStartError(SchemaRegistryError):
    """The registry exited or did not become ready in time; the message ends with its log."""

    condition = "SCHEMA_REGISTRY_DID_NOT_START"

    def __init__(self, reason: str, log_file: Path):
        self.reason, self.log_file, self.details = reason, log_file, str(log_file)
        super().__init__(f"the schema registry did not come up: {reason}. Its log {log_file}:\n{_tail(log_file)}")


# --- install --------------------------------------------------------------------------------------

def pins_key(pin_dir: Path = PIN_DIR, settings: Path = SHIPPED_SETTINGS) -> str:
    """The cache entry's name: a hash of the pinning POM and the shipped Maven settings."""
    digest = hashlib.sha256()
    for path in (pin_dir / "pom.xml", settings):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def entry_dir(cache_root: Path | None = None, pin_dir: Path = PIN_DIR) -> Path:
    return (cache_root or cache_dir()) / "schema-registry" / pins_key(pin_dir)


def is_installed(directory: Path) -> bool:
    return (directory / "quarkus-run.jar").is_file() and (directory / "lib").is_dir()


def install(progress: Callable[[str], None], *, cache_root: Path | None = None, pin_dir: Path = PIN_DIR,
            settings: Path | None = None) -> Path:
    """The unpacked distribution for the pins in ``pin_dir`` (resolved and unpacked now when
    missing, with one ``progress`` line). Raises :class:`RegistryInstallError`; a failure keeps
    nothing but Maven's output (``<key>.failed.log`` beside the entry, removed by a later success)."""
    if not (pin_dir / "pom.xml").is_file():
        raise RegistryInstallError(f"its pins {pin_dir / 'pom.xml'} are missing from this installation")
    entry = entry_dir(cache_root, pin_dir)
    if is_installed(entry):
        return entry
    if shutil.which("mvn") is None:
        raise RegistryInstallError("mvn not found (it is resolved from Maven Central with Maven); install "
                                   "Maven (apt-get install maven, brew install maven)")
    entry.parent.mkdir(parents=True, exist_ok=True)
    with locked(entry.with_name(entry.name + ".lock")):
        if is_installed(entry):  # another process installed it meanwhile
            return entry
        progress(f"installing the schema registry (Apicurio Registry {APICURIO_VERSION}, 160 MB from "
                 f"Maven Central) into {entry} (first use only)")
        _resolve_and_unpack(entry, pin_dir, settings or maven_settings())
    return entry


def _resolve_and_unpack(entry: Path, pin_dir: Path, settings: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tmp.", dir=entry.parent))
    log = tmp.with_name(tmp.name + ".log")
    failed_log = entry.with_name(entry.name + ".failed.log")
    download, unpacked = tmp / "download", tmp / "app"
    command = ["mvn", "-q", "-B", "-s", str(settings), "-f", str(pin_dir / "pom.xml"),
               "dependency:copy-dependencies", f"-DoutputDirectory={download}"]
    try:
        with open(log, "wb") as out:
            finished = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        archives = sorted(download.glob("*.tar.gz"))
        if finished.returncode != 0 or len(archives) != 1:
            os.replace(log, failed_log)  # the files are not kept, the story is
            raise RegistryInstallError("Maven could not resolve it (is Maven Central reachable?)", failed_log)
        unpacked.mkdir()
        with tarfile.open(archives[0]) as archive:
            if hasattr(tarfile, "data_filter"):
                archive.extractall(unpacked, filter="data")
            else:  # Python before 3.11.4: the archive comes from Maven Central over TLS, checked by Maven
                archive.extractall(unpacked)
        if not is_installed(unpacked):
            raise RegistryInstallError(f"{archives[0].name} holds no quarkus-run.jar and lib/")
        shutil.rmtree(entry, ignore_errors=True)  # a directory without the distribution
        os.rename(unpacked, entry)
        failed_log.unlink(missing_ok=True)
    except (OSError, tarfile.TarError) as exc:
        raise RegistryInstallError(f"unpacking failed ({exc})") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        log.unlink(missing_ok=True)


def distribution_dir(progress: Callable[[str], None] | None = None) -> Path:
    """The installed distribution: in a checkout, what bin/bootstrap linked at ``.scg/schema-registry``
    when it is for the current pins; else the cache entry, installed now when missing."""
    if IN_CHECKOUT and is_installed(LINK) and LINK.resolve().name == pins_key():
        return LINK.resolve()  # the class archive holds the real path of the jars it was recorded from
    return install(progress or _say)


# --- Java -----------------------------------------------------------------------------------------

def java_major(java: Path) -> int:
    """The feature version of the Java at ``java`` (``bin/java``): from its home's ``release`` file,
    else asked of the JVM; 0 when it does not run."""
    release = Path(java).resolve().parent.parent / "release"
    with contextlib.suppress(OSError):
        found = re.search(r'^JAVA_VERSION="([^"]+)"', release.read_text(), re.MULTILINE)
        if found:
            return _feature(found.group(1))
    try:
        shown = subprocess.run([str(java), "-XshowSettings:properties", "-version"], capture_output=True,
                               text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return 0
    found = re.search(r"java\.specification\.version = (\S+)", shown)
    return _feature(found.group(1)) if found else 0


def _feature(version: str) -> int:
    parts = version.split(".")
    with contextlib.suppress(ValueError, IndexError):
        return int(parts[1]) if parts[0] == "1" else int(parts[0])
    return 0


def find_java() -> Path:
    """A ``java`` of version 21+: ``$SCG_REGISTRY_JAVA_HOME/bin/java`` (which must be one), else the
    first of ``$JAVA_HOME/bin/java``, ``java`` on PATH and ``/usr/lib/jvm/*/bin/java`` (newest first)."""
    chosen = os.environ.get("SCG_REGISTRY_JAVA_HOME")
    if chosen:
        java = Path(chosen) / "bin" / "java"
        if java_major(java) >= MIN_JAVA:
            return java
        raise RegistryJavaNotFoundError(f" (SCG_REGISTRY_JAVA_HOME={chosen} has no Java {MIN_JAVA}+ in bin/)")
    candidates: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    if shutil.which("java"):
        candidates.append(Path(shutil.which("java")))
    system = [p for p in Path("/usr/lib/jvm").glob("*/bin/java") if not p.parent.parent.is_symlink()]
    candidates += sorted(system, key=java_major, reverse=True)
    for java in candidates:
        if java.is_file() and java_major(java) >= MIN_JAVA:
            return java
    raise RegistryJavaNotFoundError()


# --- the server -----------------------------------------------------------------------------------

class SchemaRegistry:
    """One Apicurio Registry process on loopback; ``with SchemaRegistry(dir) as registry:`` starts
    and stops it. ``url`` is the Confluent-compatible base URL (what a Confluent client's
    ``schema.registry.url`` takes); ``started_in_s`` how long ``start`` took."""

    def __init__(self, workdir: Path, *, heap: str = DEFAULT_HEAP, compatibility: str | None = "BACKWARD",
                 ready_timeout_s: float = READY_TIMEOUT_S, java: Path | None = None,
                 distribution: Path | None = None, progress: Callable[[str], None] | None = None,
                 tls: tuple[Path, Path] | None = None):
        """``tls``: a server certificate (PEM, its chain after it) and its key: the API is then
        served over HTTPS only."""
        self.workdir = Path(workdir)
        self.tls = tls
        self.log_file = self.workdir / "schema-registry.log"
        self.heap, self.compatibility, self.ready_timeout_s = heap, compatibility, ready_timeout_s
        self.java, self.distribution, self.progress = java, distribution, progress
        self.port: int | None = None
        self.management_port: int | None = None
        self.started_in_s: float | None = None
        self.proc: subprocess.Popen | None = None
        self._attached_pid: int | None = None  # a detached registry's, found by attach
        self._record_archive_to: Path | None = None
        self._log_offset = 0

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API (``/subjects``, ``/schemas/ids/{id}``, ``/config`` ...)."""
        return self.base_url + CCOMPAT_PATH

    @property
    def health_url(self) -> str:
        return f"http://{HOST}:{self.management_port}{HEALTH_PATH}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else self._attached_pid

    @property
    def state_file(self) -> Path:
        return self.workdir / STATE_FILE

    def detach(self) -> "SchemaRegistry":
        """Records the running registry (pid, ports) in ``<workdir>/schema-registry.json``: it
        outlives this process (it runs in a session of its own), :meth:`attach` finds it."""
        recorded = {"pid": self.pid, "port": self.port, "management_port": self.management_port,
                    "url": self.url, "log_file": str(self.log_file)}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(recorded, indent=2))
        tmp.replace(self.state_file)
        return self

    @classmethod
    def attach(cls, workdir: Path) -> "SchemaRegistry | None":
        """The registry :meth:`detach` recorded in ``workdir`` (running or not), or None."""
        try:
            recorded = json.loads((Path(workdir) / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        registry = cls(workdir)
        registry.port, registry.management_port = recorded["port"], recorded["management_port"]
        registry._attached_pid = recorded["pid"]
        return registry

    def start(self) -> "SchemaRegistry":
        if self.running():
            return self
        began = time.monotonic()
        distribution = (self.distribution or distribution_dir(self.progress)).resolve()
        java = self.java or find_java()
        (self.workdir / "tmp").mkdir(parents=True, exist_ok=True)
        for attempt in range(1, PORT_TRIES + 1):
            self.port = free_port()
            while (management := free_port()) == self.port:
                pass
            self.management_port = management
            self._launch(java, distribution)
            try:
                self._wait_ready(began + self.ready_timeout_s)
                break
            except RegistryStartError as exc:
                self.stop()
                if attempt == PORT_TRIES or not _PORT_TAKEN.search(self._log_since_launch()):
                    raise exc from None
        self.started_in_s = time.monotonic() - began
        return self

    def _listener_options(self) -> list[str]:
        """The API's listener: plain HTTP on :attr:`port`, or with ``tls`` HTTPS there and no plain one."""
        if self.tls is None:
            return [f"-Dquarkus.http.port={self.port}"]
        cert, key = self.tls
        return [f"-Dquarkus.http.ssl-port={self.port}", "-Dquarkus.http.insecure-requests=disabled",
                f"-Dquarkus.http.ssl.certificate.files={cert}", f"-Dquarkus.http.ssl.certificate.key-files={key}"]

    def _launch(self, java: Path, distribution: Path) -> None:
        tmp = self.workdir / "tmp"
        command = [str(java), f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   "-Xss512k", "-XX:ReservedCodeCacheSize=64m", "-Djava.awt.headless=true",
                   f"-Djava.io.tmpdir={tmp}", *self._archive_options(java, distribution),
                   f"-Dquarkus.http.host={HOST}", *self._listener_options(),
                   f"-Dquarkus.management.host={HOST}", f"-Dquarkus.management.port={self.management_port}",
                   # one H2 connection at rest (Apicurio keeps 20), up to 10 under load
                   "-Dapicurio.datasource.jdbc.initial-size=1", "-Dapicurio.datasource.jdbc.min-size=1",
                   "-Dapicurio.datasource.jdbc.max-size=10",
                   f"-Dapicurio.storage.snapshot.location={tmp}", f"-Dapicurio.import.work-dir={tmp}"]
        if self.compatibility:
            command.append(f"-Dapicurio.rules.global.compatibility={self.compatibility}")
        command += ["-jar", str(distribution / "quarkus-run.jar")]
        with open(self.log_file, "ab") as out:
            self._log_offset = out.tell()
            out.write(f"$ {' '.join(command)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.workdir, start_new_session=True)

    def _log_since_launch(self) -> str:
        with contextlib.suppress(OSError), open(self.log_file, "rb") as log:
            log.seek(self._log_offset)
            return log.read().decode(errors="replace")
        return ""

    def _archive_options(self, java: Path, distribution: Path) -> list[str]:
        if self._record_archive_to is not None:
            return [f"-XX:ArchiveClassesAtExit={self._record_archive_to}"]
        archive = archive_path(java, distribution)
        return [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"] if archive.is_file() else []

    def _wait_ready(self, deadline: float) -> None:
        while not self._ready():
            if self.proc.poll() is not None:
                raise RegistryStartError(f"the process exited ({self.proc.returncode})", self.log_file)
            if time.monotonic() > deadline:
                raise RegistryStartError(f"not ready after {self.ready_timeout_s:.0f}s", self.log_file)
            time.sleep(0.05)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.health_url, timeout=1) as answer:
                return answer.status == 200 and b'"UP"' in answer.read()
        except (OSError, ValueError):  # not listening yet, or 503 while a check is down
            return False

    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self._attached_pid is not None and _pid_alive(self._attached_pid)

    def stop(self) -> None:
        """Ends the registry and every process of its group (it started a session of its own):
        SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``; returns once it is gone. An attached
        registry (another process started it) is waited for by its pid, and its record removed."""
        proc, self.proc = self.proc, None
        attached, self._attached_pid = self._attached_pid, None
        if attached is not None:
            _end_group(attached)
            self.state_file.unlink(missing_ok=True)
        if proc is None:
            return
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)

    def __enter__(self) -> "SchemaRegistry":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _end_group(pid: int) -> None:
    """SIGTERM to the group of ``pid`` (not a child of this process), SIGKILL after
    ``STOP_TIMEOUT_S``; returns once ``pid`` is gone or, killed, after a further bound."""
    for sig, bound in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 10.0)):
        if not _pid_alive(pid):
            return
        _signal_group(pid, sig)
        deadline = time.monotonic() + bound
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --- the class archive ----------------------------------------------------------------------------

def archive_path(java: Path, distribution: Path) -> Path:
    """Where the class-data-sharing archive of ``distribution`` started by ``java`` lives: inside the
    distribution, named by a hash of that Java's home and version."""
    home = Path(java).resolve().parent.parent
    release = home / "release"
    identity = f"{home}\n{release.read_text() if release.is_file() else java_major(java)}"
    return distribution / "scg-cds" / f"{hashlib.sha256(identity.encode()).hexdigest()[:16]}.jsa"


def record_archive(progress: Callable[[str], None], distribution: Path | None = None,
                   java: Path | None = None, *, note_missing_java: bool = True) -> Path | None:
    """Records the archive of one start (the classes loaded until ready and by a first
    registration) when there is none for this Java yet; later starts map it. Returns it, or None
    (no Java 21+, or the start failed: a note)."""
    distribution = distribution or distribution_dir(progress)
    try:
        java = java or find_java()
    except RegistryJavaNotFoundError as exc:
        if note_missing_java:
            progress(f"note: {exc}")
        return None
    target = archive_path(java, distribution)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    progress("recording the schema registry's class archive (one start, a few seconds)")
    with tempfile.TemporaryDirectory(prefix="scg-registry-cds-") as work:
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        registry = SchemaRegistry(Path(work), java=java, distribution=distribution)
        registry._record_archive_to = partial
        try:
            registry.start()
            _exercise(registry)
        except SchemaRegistryError as exc:
            progress(f"note: no class archive recorded; the registry starts without one ({exc.headline()})")
            partial.unlink(missing_ok=True)
            return None
        finally:
            registry.stop()  # the JVM writes the archive as it exits
        if not partial.is_file():
            progress("note: the JVM wrote no class archive; the registry starts without one")
            return None
        os.replace(partial, target)
    return target


def _exercise(registry: SchemaRegistry) -> None:
    """What a client does first, so that the archive holds those classes too: registers a schema
    and reads it back through the Confluent-compatible API (errors ignored: only classes matter)."""
    schema = json.dumps({"type": "record", "name": "Recorded", "fields": [{"name": "a", "type": "string"}]})
    calls = [("POST", "/subjects/scg-cds-value/versions", {"schema": schema}), ("GET", "/schemas/ids/1", None),
             ("GET", "/subjects/scg-cds-value/versions/latest", None)]
    for method, path, body in calls:
        request = urllib.request.Request(registry.url + path, method=method,
                                         data=json.dumps(body).encode() if body else None,
                                         headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        with contextlib.suppress(OSError, ValueError):
            urllib.request.urlopen(request, timeout=10).close()


# --- bin/bootstrap's step -------------------------------------------------------------------------

def _say(message: str) -> None:
    print(f"scg: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.local.schema_registry",
                                     description="bin/bootstrap's schema registry step")
    parser.add_argument("--install", action="store_true", required=True,
                        help="resolve and unpack the pinned distribution into the cache (once per pins)")
    parser.add_argument("--link", type=Path, help="a symbolic link to point at the cache entry")
    parser.add_argument("--no-archive", action="store_true", help="do not record the class archive")
    args = parser.parse_args(argv)
    installing = not (PIN_DIR / "pom.xml").is_file() or not is_installed(entry_dir())
    try:
        entry = install(bootstrap_say)
    except RegistryInstallError as exc:
        return report_failure(exc)
    if args.link:
        link(entry, args.link)
    if not args.no_archive:
        # never fails the bootstrap; a missing Java 21+ is said once, when the registry is installed
        record_archive(bootstrap_say, distribution=entry, note_missing_java=installing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
