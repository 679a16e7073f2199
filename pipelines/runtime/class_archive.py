"""A class-data-sharing archive (Java AppCDS) of the classes a member's Spark driver loads.

A member's driver JVM spends most of its start-up loading, parsing and verifying the classes of
Spark, Delta and the Kafka connector. ``bin/bootstrap`` records them once
(:mod:`pipelines.local.record_class_archive`) and keeps the archive under ``.scg/jvm/`` (an
installed package: in its cache, :func:`~pipelines.runtime.install_paths.class_archive_dir`).
Each driver this project starts itself (``bin/scg run``, the demo, the tests; not one
spark-submit launched) then maps the archive instead of loading those classes again. Measured
on one idle 2-core machine, a lone member from process start to its batch path warmed up: 22.3 s
and 32.4 CPU-s without the archive, 14.0 s and 20.4 CPU-s with it; several drivers on one host
also share its pages.

The archive is only valid for the JVM and class path it was recorded with. Its key (the ``java``
binary and each jar's name, size and modification time on the driver's class path: the JVM
refuses an archive whose jars were written again, as a reinstalled pyspark's are) is written beside it; a driver
uses the archive only while the key matches, and bootstrap records a new one when it does not.
A JVM that still refuses the archive starts exactly as it would without it, and says nothing.
Not recording an archive (a JVM without dynamic CDS) only costs start-up time.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from pipelines.runtime.install_paths import class_archive_dir, jars_dir

# Without output: a refused archive must not print a warning into every member's log.
QUIET = "-Xlog:cds=off,cds+dynamic=off"


def archive_path() -> Path:
    return class_archive_dir() / "spark-classes.jsa"


def beside(archive: Path, suffix: str) -> Path:
    """``.key`` (the key it was recorded for), ``.failed`` (the key a recording failed for),
    ``.log`` (the recording driver's output), ``.partial`` (a recording in progress)."""
    return archive.with_name(archive.name + suffix)


def holds(path: Path, key: str) -> bool:
    return path.is_file() and path.read_text().strip() == key


def archive_key(java: str, jars: Iterable[tuple[str, int, int]]) -> str:
    """The identity of what an archive is valid for: the ``java`` binary and the class path's
    jars as (name, size, modification time in ns) triples, in any order."""
    text = "\n".join([java, *(" ".join(map(str, jar)) for jar in sorted(jars))])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def current_key() -> str | None:
    """The key of the driver JVM this process would start (pyspark's rule: ``$JAVA_HOME/bin/java``,
    else ``java`` on the PATH), or None when there is no java."""
    from importlib.util import find_spec

    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        return None
    pyspark = find_spec("pyspark")  # not imported: a cached bootstrap stays fast
    if pyspark is None or not pyspark.submodule_search_locations:
        return None
    jar_dirs = [Path(pyspark.submodule_search_locations[0]) / "jars", jars_dir() / "spark"]
    jars = [(jar.name, stat.st_size, stat.st_mtime_ns)
            for d in jar_dirs if d.is_dir() for jar in d.glob("*.jar") for stat in [jar.stat()]]
    return archive_key(os.path.realpath(java), jars)


def driver_java_options() -> str:
    """JVM options that make a driver started from this process map the archive, or "" when
    there is no archive recorded for the current JVM and jars."""
    archive = archive_path()
    if not archive.is_file() or not holds(beside(archive, ".key"), current_key() or ""):
        return ""
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto {QUIET}"
