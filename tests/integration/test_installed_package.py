"""The project installs as a package: the wheel built from a copy of the sources, installed into a
fresh virtualenv outside the repository, gives a working ``scg`` that finds its package data.

No network: the wheel is built without build isolation (setuptools of the test extra), installed
with ``--no-deps --no-index``, and the virtualenv sees the project's installed dependencies
through a ``.pth`` line naming .venv's site-packages (a plain path: .venv's own ``.pth`` files,
the checkout's editable install among them, are not run, so only the wheel provides the
project's packages). A few seconds, no JVM; everything is removed at the end. In
tests/integration, not tests/unit: bin/mutation's copy of the tree has no pyproject.toml to build.
"""
from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import pytest

from pipelines.runtime.install_paths import PROJECT_ROOT, conf_dir
from pipelines.runtime.jar_cache import pins_key

PACKAGES = ("groupmgr", "pipelines", "sinks")
PACKAGE_DATA = ("pipelines/resources/jvm/spark.pom.xml", "pipelines/resources/jvm/broker.pom.xml",
                "pipelines/resources/jvm/s3proxy.pom.xml", "pipelines/resources/jvm/maven-settings.xml",
                "pipelines/resources/jvm/schema-registry/pom.xml",
                "pipelines/resources/kafka-log4j2.properties", "pipelines/resources/spark-log4j2.properties",
                "pipelines/resources/pipelines/demo.yaml", "pipelines/resources/pipelines/example-secure.yaml",
                "pipelines/resources/grafana/scg-dashboard.json",
                "groupmgr/py.typed", "pipelines/py.typed", "sinks/py.typed")


def _run(args, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, **kwargs)
    assert result.returncode == 0, f"{args}: {result.stdout}{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed():
    """(wheel, virtualenv) of the package built and installed outside the repository."""
    with tempfile.TemporaryDirectory(prefix="scg-installed-") as tmp:
        work = Path(tmp)
        source = work / "source"
        for name in PACKAGES:
            shutil.copytree(PROJECT_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("setup.cfg", "pyproject.toml", "README.md"):
            shutil.copy(PROJECT_ROOT / name, source / name)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", work / "dist", source])
        wheel = next((work / "dist").glob("spark_consumer_groups-*.whl"))
        venv = work / "venv"
        _run([sys._base_executable, "-m", "venv", "--without-pip", venv])
        python = venv / "bin" / "python"
        site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
        (Path(site) / "zz_scg_project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        _run([*pip, "--python", python, "install", "--no-deps", "--no-index", wheel])
        yield wheel, venv


def _env(work: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCG_", "PYTHON"))}
    return {**env, "SCG_CACHE_DIR": str(work / "cache"), "XDG_STATE_HOME": str(work / "state")}


def test_the_wheel_ships_the_package_data_and_declares_ranges(installed):
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert set(PACKAGE_DATA) <= names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "conf/", "bin/"))]
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert "Requires-Dist: pyarrow<27,>=26" in requires
    assert requires and not [line for line in requires if "==" in line]  # ranges; the pins are constraints
    assert "scg = pipelines.cli.main:main" in entry_points


def test_scg_version_and_validate_an_example_from_the_package_data(installed, tmp_path):
    _, venv = installed
    scg, python = venv / "bin" / "scg", venv / "bin" / "python"
    env = _env(tmp_path)
    setup = configparser.ConfigParser()
    setup.read(PROJECT_ROOT / "setup.cfg")
    version = _run([scg, "--version"], cwd=tmp_path, env=env).stdout.strip()
    assert version == f"scg {setup['metadata']['version']}"

    where = json.loads(_run([python, "-c", (
        "import json, pipelines; from pipelines.runtime import install_paths as p; print(json.dumps({"
        "'package': pipelines.__file__, 'conf': str(p.conf_dir()), 'checkout': p.IN_CHECKOUT, "
        "'jars': str(p.jars_dir()), 'state': str(p.state_dir())}))")], cwd=tmp_path, env=env).stdout)
    assert Path(where["package"]).is_relative_to(venv) and Path(where["conf"]).is_relative_to(venv)
    assert where["checkout"] is False
    # the jars an installed scg resolves are the ones bin/bootstrap resolves: same pins, same cache entry
    assert where["jars"] == str(tmp_path / "cache" / "jars" / pins_key(conf_dir() / "jvm"))
    assert where["state"] == str(tmp_path / "state" / "spark-consumer-groups")

    demo = Path(where["conf"]) / "pipelines" / "demo.yaml"
    validated = _run([scg, "validate", demo], cwd=tmp_path, env=env)
    assert validated.stdout.startswith("OK demo:"), validated.stdout
    assert not (tmp_path / "cache").exists()  # validate needs no jars
