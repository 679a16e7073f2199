"""Where the project's installed artefacts live.

bin/bootstrap installs the Python packages into ``<root>/.venv`` and links the resolved JVM jars
at ``<root>/.scg/jars/{broker,spark}``. ``SCG_JARS_DIR`` overrides the jar location (for example
on a cluster where the jars were shipped elsewhere); ``SCG_STATE_DIR`` overrides where local
Kafka keeps its data and state.
"""
from __future__ import annotations

import os
from pathlib import Path

from groupmgr.core import ExitCategory, ScgError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RESOURCES = Path(__file__).resolve().parents[1] / "resources"


class JarsNotInstalledError(ScgError):
    """The JVM jars are missing: bin/bootstrap has not run (or was interrupted)."""

    condition = "JARS_NOT_INSTALLED"
    exit_category = ExitCategory.ENVIRONMENT

    def __init__(self, directory: Path):
        self.directory = directory
        super().__init__(
            f"JVM jars not found in {directory}. Run bin/bootstrap (bin/scg and bin/test run it "
            "for you), or set SCG_JARS_DIR to a directory holding broker/ and spark/."
        )


def jars_dir() -> Path:
    return Path(os.environ.get("SCG_JARS_DIR", PROJECT_ROOT / ".scg" / "jars"))


def jar_files(kind: str) -> list[Path]:
    """All jars of one kind ("broker" or "spark"), sorted; raises JarsNotInstalledError."""
    directory = jars_dir() / kind
    jars = sorted(directory.glob("*.jar"))
    if not jars:
        raise JarsNotInstalledError(directory)
    return jars


def state_dir() -> Path:
    return Path(os.environ.get("SCG_STATE_DIR", PROJECT_ROOT / ".scg" / "state"))


def conf_dir() -> Path:
    """The configuration files shipped with the package (package data, ``pipelines/resources/``):
    ``jvm/`` (the JVM dependency pins and Maven settings), the log4j2 properties of the local
    Kafka and of Spark drivers, ``pipelines/`` (example pipelines) and ``grafana/`` (the
    dashboard). The same directory in a checkout and in an installed package."""
    return RESOURCES
