"""The JVM jars, resolved with Maven into a per-user cache the first time they are needed.

The POMs in ``pipelines/resources/jvm/`` (package data) pin three kinds of jars: ``broker``
(Apache Kafka and its tools: the local Kafka), ``spark`` (the Kafka connector, delta-spark and
s3a: a member's driver) and ``s3proxy`` (the tests' S3 server). :func:`ensure_jars` runs
``mvn dependency:copy-dependencies`` on a kind's POM, with a settings file that routes every
repository to Maven Central, into ``<cache>/jars/<key>/<kind>/``. The key is a hash of the POMs
and the settings (:func:`pins_key`): new pins resolve into a new directory, the old one stays for
whoever is still pinned to it. Of the ``spark`` kind, every jar pyspark already ships is dropped
(Spark's own copies win on the class path anyway), so Jackson, Hadoop and Parquet come from
pyspark only.

``bin/bootstrap`` resolves every kind (:mod:`pipelines.local.resolve_jars`); an installed ``scg``
resolves a kind when it first needs it (:func:`pipelines.runtime.install_paths.jar_files`). A
kind's directory appears whole or not at all: Maven writes into a temporary directory that is
renamed into place once it is complete, and a failure leaves nothing behind. Processes resolving
the same cache entry take turns (a lock file beside it); the second finds the work done.
``.complete`` marks an entry that holds every kind.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator
from fnmatch import fnmatchcase
from importlib.util import find_spec
from pathlib import Path

from groupmgr.core import ExitCategory, ScgError

KINDS = ("broker", "spark", "s3proxy")
# pyspark ships the Scala library the connectors are built against
EXCLUDED_ARTIFACTS = {"spark": "scala-library"}
_VERSION_SUFFIX = re.compile(r"-[0-9][^-]*(-[A-Za-z0-9]+)?\.jar$")  # "-2.18.2.jar", "-4.1.0-tests.jar"


class MavenNotFoundError(ScgError):
    """The jars are not in the cache yet and there is no ``mvn`` to resolve them."""

    condition = "MAVEN_NOT_FOUND"
    exit_category = ExitCategory.ENVIRONMENT

    def __init__(self, kinds: Iterable[str]):
        super().__init__(
            f"mvn not found: the {', '.join(kinds)} jars are resolved from Maven Central with Maven "
            "the first time they are needed. Install Maven (apt-get install maven, brew install "
            "maven) and retry, or set SCG_JARS_DIR to a directory holding broker/ and spark/.")


class JarsNotResolvedError(ScgError):
    """Maven could not resolve a kind's jars (no network, a repository without them); ``details``
    is Maven's output."""

    condition = "JARS_NOT_RESOLVED"
    exit_category = ExitCategory.ENVIRONMENT

    def __init__(self, kind: str, maven_log: Path):
        self.kind = kind
        self.details = str(maven_log)
        super().__init__(f"could not resolve {kind} jars: is Maven Central reachable? Nothing was "
                         "kept; rerun when the network is back.")


def pins_key(pom_dir: Path) -> str:
    """The cache entry's name: a hash of the POMs and the Maven settings, in name order. Equal to
    what bin/bootstrap computed before it called this module (``cat jvm/*.xml | sha256sum``), so
    existing caches stay valid."""
    digest = hashlib.sha256()
    for path in sorted(pom_dir.glob("*.xml")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def entry_dir(cache_root: Path, pom_dir: Path) -> Path:
    return cache_root / "jars" / pins_key(pom_dir)


def has_jars(entry: Path, kind: str) -> bool:
    return any((entry / kind).glob("*.jar"))


def ensure_jars(kinds: Iterable[str], *, pom_dir: Path, cache_root: Path, settings: Path,
                progress: Callable[[str], None]) -> Path:
    """The cache entry for the POMs in ``pom_dir``, holding ``kinds`` (resolved now when missing,
    one ``progress`` line each). Raises :class:`MavenNotFoundError` or
    :class:`JarsNotResolvedError`; nothing is kept of a kind that failed."""
    kinds = list(kinds)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown jar kinds {sorted(unknown)}; known: {KINDS}")
    entry = entry_dir(cache_root, pom_dir)
    if any(not has_jars(entry, kind) for kind in kinds):
        if shutil.which("mvn") is None:
            raise MavenNotFoundError(k for k in kinds if not has_jars(entry, k))
        entry.mkdir(parents=True, exist_ok=True)
        with locked(entry.with_name(entry.name + ".lock")):
            try:
                for kind in kinds:
                    if not has_jars(entry, kind):  # another process may have resolved it meanwhile
                        progress(f"resolving {kind} jars from Maven Central into {entry} (first use only)")
                        _resolve(kind, entry, pom_dir, cache_root, settings)
            finally:
                with contextlib.suppress(OSError):
                    entry.rmdir()  # only when nothing was resolved into it
    complete = entry / ".complete"
    if not complete.exists() and all(has_jars(entry, kind) for kind in KINDS):
        complete.touch()
    return entry


def _resolve(kind: str, entry: Path, pom_dir: Path, cache_root: Path, settings: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tmp.", dir=cache_root))
    log = tmp.with_name(tmp.name + ".log")
    command = ["mvn", "-q", "-B", "-s", str(settings), "-f", str(pom_dir / f"{kind}.pom.xml"),
               "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"]
    if kind in EXCLUDED_ARTIFACTS:
        command.append(f"-DexcludeArtifactIds={EXCLUDED_ARTIFACTS[kind]}")
    try:
        with open(log, "wb") as out:
            finished = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if finished.returncode != 0 or not any(tmp.glob("*.jar")):
            kept = entry.with_name(f"{entry.name}-{kind}.failed.log")  # the jars are not kept, the story is
            os.replace(log, kept)
            raise JarsNotResolvedError(kind, kept)
        if kind == "spark":
            drop_jars_pyspark_ships(tmp)
        target = entry / kind
        shutil.rmtree(target, ignore_errors=True)  # a kind directory without jars
        os.rename(tmp, target)
        entry.with_name(f"{entry.name}-{kind}.failed.log").unlink(missing_ok=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        log.unlink(missing_ok=True)


def artifact_name(jar_name: str) -> str:
    """``jackson-core-2.18.2.jar`` -> ``jackson-core``."""
    return _VERSION_SUFFIX.sub("", jar_name, count=1)


def drop_jars_pyspark_ships(directory: Path, pyspark_jars: Path | None = None) -> list[str]:
    """Removes each jar of an artifact pyspark ships in any version (pyspark has a jar named
    ``<artifact>-<digit>*.jar``); returns their names."""
    if pyspark_jars is None:
        spec = find_spec("pyspark")  # not imported: only its jars directory is needed
        if spec is None or not spec.submodule_search_locations:
            return []
        pyspark_jars = Path(spec.submodule_search_locations[0]) / "jars"
    shipped = [jar.name for jar in pyspark_jars.glob("*.jar")]
    dropped = sorted(jar.name for jar in directory.glob("*.jar")
                     if any(fnmatchcase(name, f"{artifact_name(jar.name)}-[0-9]*.jar") for name in shipped))
    for name in dropped:
        (directory / name).unlink()
    return dropped


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block: one installer at a
    time per cache entry, across processes."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
