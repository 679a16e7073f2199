"""bin/bootstrap: idempotent and offline once cached; clear failures that leave nothing half-done;
bin/scg runs only its Python part for the commands that start no JVM; the class archive it
records is what a driver started here maps."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from pipelines.runtime.class_archive import archive_path, driver_java_options
from pipelines.runtime.install_paths import PROJECT_ROOT, conf_dir

pytestmark = pytest.mark.integration
BOOTSTRAP = PROJECT_ROOT / "bin" / "bootstrap"
UNREACHABLE = "http://127.0.0.1:9/"


def _run(env_extra: dict, cwd_root: Path = PROJECT_ROOT, path: str | None = None):
    env = {**os.environ, **env_extra}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(["bash", str(cwd_root / "bin" / "bootstrap")], env=env,
                          capture_output=True, text=True, timeout=300)


def _dead_maven_settings(tmp_path: Path) -> Path:
    settings = tmp_path / "settings.xml"
    settings.write_text(f"""<settings><mirrors><mirror><id>nowhere</id><mirrorOf>*</mirrorOf>
        <url>{UNREACHABLE}</url></mirror></mirrors></settings>""")
    return settings


def test_second_run_is_a_no_op_without_network(tmp_path):
    marker = PROJECT_ROOT / ".venv" / ".scg-installed"
    before = marker.stat().st_mtime_ns
    started = time.monotonic()
    result = _run({"PIP_INDEX_URL": UNREACHABLE + "simple",
                   "SCG_MAVEN_SETTINGS": str(_dead_maven_settings(tmp_path))})
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and result.stdout == ""
    assert marker.stat().st_mtime_ns == before
    assert (PROJECT_ROOT / ".scg" / "jars" / "broker").is_dir()
    print(f"cached bootstrap took {elapsed:.2f}s")


def test_jars_without_network_fail_clearly_and_keep_nothing(tmp_path):
    cache = tmp_path / "cache"
    result = _run({"SCG_CACHE_DIR": str(cache),
                   "SCG_MAVEN_SETTINGS": str(_dead_maven_settings(tmp_path)),
                   "MAVEN_OPTS": f"-Dmaven.repo.local={tmp_path / 'm2'}"})
    assert result.returncode == 3
    assert "Maven Central reachable" in result.stderr and "Nothing was kept" in result.stderr
    assert not list(cache.glob("jars/*/.complete"))
    assert not list(cache.glob("tmp.*"))
    assert (PROJECT_ROOT / ".scg" / "jars" / "spark").is_dir()  # the working install is untouched


def test_python_packages_without_network_fail_clearly_and_keep_nothing(tmp_path):
    root = tmp_path / "clone"
    for name in ("bin", "conf", "groupmgr", "pipelines", "sinks"):
        shutil.copytree(PROJECT_ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(PROJECT_ROOT / name, root / name)
    result = _run({"PIP_INDEX_URL": UNREACHABLE + "simple", "PIP_NO_CACHE_DIR": "1",
                   "PIP_RETRIES": "0", "PIP_TIMEOUT": "2", "PIP_FIND_LINKS": ""}, cwd_root=root)
    assert result.returncode == 3
    assert "PyPI reachable" in result.stderr and "Nothing was kept" in result.stderr
    assert not (root / ".venv").exists()


def _path_without_java(tmp_path: Path, fake_java: str | None = None) -> str:
    shim = tmp_path / "shim"
    shim.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        for tool in Path(directory).glob("*") if Path(directory).is_dir() else []:
            if tool.name != "java" and not (shim / tool.name).exists():
                (shim / tool.name).symlink_to(tool)
    if fake_java is not None:
        (shim / "java").write_text(fake_java)
        (shim / "java").chmod(0o755)
    return str(shim)


def test_missing_java_says_what_to_do(tmp_path):
    result = _run({}, path=_path_without_java(tmp_path))
    assert result.returncode == 3
    assert "java not found" in result.stderr and "Java 17" in result.stderr


def test_old_java_says_what_to_do(tmp_path):
    fake = "#!/bin/sh\necho '    java.specification.version = 11' >&2\n"
    result = _run({}, path=_path_without_java(tmp_path, fake_java=fake))
    assert result.returncode == 3
    assert "Java 17+ is required, found Java 11" in result.stderr


def _scg(args: list[str], env_extra: dict, path: str):
    return subprocess.run(["bash", str(PROJECT_ROOT / "bin" / "scg"), *args], env={**os.environ, **env_extra,
                          "PATH": path}, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args", [
    ["--version"], ["--help"], ["validate", str(conf_dir() / "pipelines" / "demo.yaml")],
    ["assign", "--assignor", "range", "--topic", "t:2", "--member", "a"],
], ids=["version", "help", "validate", "assign"])
def test_commands_that_start_no_jvm_need_neither_java_nor_jars(tmp_path, args):
    """bin/scg runs only the Python part of the bootstrap for them: no Java check, no jars
    resolved (the cache stays empty), no class archive."""
    cache = tmp_path / "cache"
    result = _scg(args, {"SCG_CACHE_DIR": str(cache), "SCG_MAVEN_SETTINGS": str(_dead_maven_settings(tmp_path))},
                  path=_path_without_java(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "[bootstrap]" not in result.stderr and not cache.exists()


def test_commands_that_start_a_jvm_still_run_the_whole_bootstrap(tmp_path):
    result = _scg(["kafka", "status", "--dir", str(tmp_path)], {}, path=_path_without_java(tmp_path))
    assert result.returncode == 3
    assert "java not found" in result.stderr


def test_a_driver_started_here_maps_the_class_archive_bootstrap_recorded(spark):
    """bin/bootstrap (run by bin/test) recorded Spark's classes for this JVM and these jars, and
    the session the tests share, started like a member's, maps that archive into its JVM."""
    archive = archive_path()
    assert archive.is_file(), f"no class archive: see {archive}.log"
    assert driver_java_options(), "the archive's key does not match this JVM and these jars"
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    assert str(archive) in Path(f"/proc/{pid}/maps").read_text()
