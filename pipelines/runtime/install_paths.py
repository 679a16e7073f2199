"""Where the project's installed artefacts live, in a checkout and in an installed package.

The files ``scg`` reads at run time are package data under ``pipelines/resources/``
(:func:`conf_dir`), the same in both. The JVM jars are resolved by Maven into a per-user cache
(:mod:`pipelines.runtime.jar_cache`; ``SCG_CACHE_DIR``, default ``~/.cache/spark-consumer-groups``):
bin/bootstrap resolves them all and links the cache entry at ``<root>/.scg/jars``; an installed
``scg`` resolves a kind when it first needs it (:func:`jar_files`). ``SCG_JARS_DIR`` overrides
the jar location (for example on a cluster where the jars were shipped elsewhere; nothing is
resolved then), ``SCG_MAVEN_SETTINGS`` the Maven settings file, ``SCG_STATE_DIR`` where local
Kafka and the demo keep their data: ``<root>/.scg/state`` in a checkout, else
``~/.local/state/spark-consumer-groups`` (``XDG_STATE_HOME``).
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from groupmgr.core import ExitCategory, ScgError
from pipelines.runtime import jar_cache

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RESOURCES = Path(__file__).resolve().parents[1] / "resources"
# A checkout (bin/bootstrap beside the packages; an editable install too), not site-packages.
IN_CHECKOUT = (PROJECT_ROOT / "bin" / "bootstrap").is_file() and (PROJECT_ROOT / "setup.cfg").is_file()
APP = "spark-consumer-groups"


class JarsNotInstalledError(ScgError):
    """The JVM jars are missing where ``SCG_JARS_DIR`` says they are."""

    condition = "JARS_NOT_INSTALLED"
    exit_category = ExitCategory.ENVIRONMENT

    def __init__(self, directory: Path):
        self.directory = directory
        super().__init__(
            f"JVM jars not found in {directory}. Point SCG_JARS_DIR at a directory holding broker/ "
            "and spark/, or unset it: scg then resolves them into its cache (bin/bootstrap does in "
            "a checkout).")


def package_version() -> str:
    """The installed version of spark-consumer-groups ("unknown (not installed)" outside an install)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spark-consumer-groups")
    except PackageNotFoundError:
        return "unknown (not installed)"


def conf_dir() -> Path:
    """The configuration files shipped with the package (package data, ``pipelines/resources/``):
    ``jvm/`` (the JVM dependency pins and Maven settings), the log4j2 properties of the local
    Kafka and of Spark drivers, ``pipelines/`` (example pipelines) and ``grafana/`` (the
    dashboard). The same directory in a checkout and in an installed package."""
    return RESOURCES


def cache_dir() -> Path:
    """The per-user download cache (bin/bootstrap's too): ``SCG_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/spark-consumer-groups``, else ``~/.cache/spark-consumer-groups``."""
    if os.environ.get("SCG_CACHE_DIR"):
        return Path(os.environ["SCG_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / APP


def maven_settings() -> Path:
    """``SCG_MAVEN_SETTINGS``, else the shipped settings that route every repository to Central."""
    return Path(os.environ.get("SCG_MAVEN_SETTINGS") or conf_dir() / "jvm" / "maven-settings.xml")


def jars_dir() -> Path:
    """``SCG_JARS_DIR``; else, in a checkout bin/bootstrap has run in, ``<root>/.scg/jars``; else
    the cache entry of the shipped pins (which may not hold every kind yet: :func:`jar_files`)."""
    if os.environ.get("SCG_JARS_DIR"):
        return Path(os.environ["SCG_JARS_DIR"])
    linked = PROJECT_ROOT / ".scg" / "jars"
    if IN_CHECKOUT and linked.is_dir():
        return linked
    return jar_cache.entry_dir(cache_dir(), conf_dir() / "jvm")


def jar_files(kind: str, progress: Callable[[str], None] | None = None) -> list[Path]:
    """All jars of one kind ("broker", "spark" or "s3proxy"), sorted. Without ``SCG_JARS_DIR``,
    a kind not resolved yet is resolved now (one ``progress`` line, default: on standard error);
    raises :class:`JarsNotInstalledError`, :class:`~pipelines.runtime.jar_cache.MavenNotFoundError`
    or :class:`~pipelines.runtime.jar_cache.JarsNotResolvedError`."""
    directory = jars_dir() / kind
    jars = sorted(directory.glob("*.jar"))
    if not jars and not os.environ.get("SCG_JARS_DIR"):
        entry = jar_cache.ensure_jars([kind], pom_dir=conf_dir() / "jvm", cache_root=cache_dir(),
                                      settings=maven_settings(), progress=progress or _say)
        directory = entry / kind
        jars = sorted(directory.glob("*.jar"))
    if not jars:
        raise JarsNotInstalledError(directory)
    return jars


def _say(message: str) -> None:
    print(f"scg: {message}", file=sys.stderr, flush=True)


def state_dir() -> Path:
    if os.environ.get("SCG_STATE_DIR"):
        return Path(os.environ["SCG_STATE_DIR"])
    if IN_CHECKOUT:
        return PROJECT_ROOT / ".scg" / "state"
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / APP


def class_archive_dir() -> Path:
    """Where the class-data-sharing archive lives (:mod:`pipelines.runtime.class_archive`):
    ``<root>/.scg/jvm`` in a checkout, else ``<cache>/jvm``."""
    return PROJECT_ROOT / ".scg" / "jvm" if IN_CHECKOUT else cache_dir() / "jvm"
