"""The JVM jars are resolved into the user cache on first need (pipelines.runtime.jar_cache), the
way bin/bootstrap does: keyed by the POMs, once, a kind whole or not at all, a named error without
Maven. Maven is a stand-in script here (the real one runs in bin/bootstrap and its tests)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from groupmgr.core import ExitCategory
from pipelines.runtime import install_paths, jar_cache
from pipelines.runtime.install_paths import conf_dir
from pipelines.runtime.jar_cache import (KINDS, JarsNotResolvedError, MavenNotFoundError, artifact_name,
                                         drop_jars_pyspark_ships, ensure_jars, pins_key)

POMS = conf_dir() / "jvm"
# Writes one jar per kind into -DoutputDirectory and records its arguments; FAIL=1 fails like a
# Maven without network, after writing a jar.
FAKE_MVN = """#!/bin/sh
echo "$@" >> "{calls}"
for arg in "$@"; do
  case "$arg" in
    -DoutputDirectory=*) out="${{arg#-DoutputDirectory=}}" ;;
    -f) next=pom ;;
    *) [ "$next" = pom ] && pom="$arg"; next= ;;
  esac
done
name=$(basename "$pom" .pom.xml)
touch "$out/$name-core-1.0.jar"
if [ -n "$FAIL" ]; then echo "[ERROR] Could not transfer artifact: Connection refused"; exit 1; fi
"""


@pytest.fixture
def fake_mvn(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    calls = tmp_path / "mvn-calls"
    calls.touch()
    (tools / "mvn").write_text(FAKE_MVN.format(calls=calls))
    (tools / "mvn").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    return calls


def _ensure(cache: Path, kinds, lines: list | None = None):
    return ensure_jars(kinds, pom_dir=POMS, cache_root=cache, settings=POMS / "maven-settings.xml",
                       progress=(lines if lines is not None else []).append)


def test_the_key_is_the_one_bootstrap_computed_from_the_shipped_poms():
    files = sorted(str(p) for p in POMS.glob("*.xml"))
    by_shell = subprocess.run(f"cat {' '.join(files)} | sha256sum | cut -c1-16", shell=True,
                              capture_output=True, text=True, check=True).stdout.strip()
    assert pins_key(POMS) == by_shell
    assert sorted(p.name for p in POMS.glob("*.pom.xml")) == sorted(f"{kind}.pom.xml" for kind in KINDS)


def test_a_missing_kind_is_resolved_once_with_one_progress_line(tmp_path, fake_mvn):
    lines: list[str] = []
    entry = _ensure(tmp_path / "cache", ["broker"], lines)
    assert entry == tmp_path / "cache" / "jars" / pins_key(POMS)
    assert [p.name for p in (entry / "broker").glob("*.jar")] == ["broker-core-1.0.jar"]
    assert len(lines) == 1 and "resolving broker jars from Maven Central" in lines[0] and str(entry) in lines[0]
    call = fake_mvn.read_text().splitlines()
    assert len(call) == 1 and f"-f {POMS / 'broker.pom.xml'}" in call[0]
    assert "dependency:copy-dependencies" in call[0] and f"-s {POMS / 'maven-settings.xml'}" in call[0]
    assert not (entry / ".complete").exists()  # not every kind yet

    again: list[str] = []
    assert _ensure(tmp_path / "cache", ["broker"], again) == entry
    assert again == [] and len(fake_mvn.read_text().splitlines()) == 1
    assert not list((tmp_path / "cache").glob("tmp.*"))


def test_every_kind_marks_the_entry_complete_and_spark_excludes_scala(tmp_path, fake_mvn):
    entry = _ensure(tmp_path / "cache", KINDS)
    assert (entry / ".complete").is_file()
    assert all(any((entry / kind).glob("*.jar")) for kind in KINDS)
    spark_call = next(line for line in fake_mvn.read_text().splitlines() if "spark.pom.xml" in line)
    assert "-DexcludeArtifactIds=scala-library" in spark_call


def test_a_failed_resolution_keeps_no_jars_and_names_maven_output(tmp_path, fake_mvn, monkeypatch):
    monkeypatch.setenv("FAIL", "1")
    cache = tmp_path / "cache"
    with pytest.raises(JarsNotResolvedError) as raised:
        _ensure(cache, ["spark"])
    error = raised.value
    assert error.exit_category == ExitCategory.ENVIRONMENT and error.condition == "JARS_NOT_RESOLVED"
    assert "Maven Central reachable" in str(error) and "Nothing was kept" in str(error)
    assert "Connection refused" in Path(error.details).read_text()
    entry = cache / "jars" / pins_key(POMS)
    assert not (entry / "spark").exists() and not list(cache.glob("tmp.*"))

    monkeypatch.delenv("FAIL")
    _ensure(cache, ["spark"])  # the next run does it, and drops the failure's log
    assert any((entry / "spark").glob("*.jar")) and not Path(error.details).exists()


def test_without_maven_a_named_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn on it
    with pytest.raises(MavenNotFoundError) as raised:
        _ensure(tmp_path / "cache", ["broker", "spark"])
    assert raised.value.exit_category == ExitCategory.ENVIRONMENT
    assert raised.value.headline().startswith("[MAVEN_NOT_FOUND] mvn not found: the broker, spark jars")
    assert "Install Maven" in str(raised.value) and "SCG_JARS_DIR" in str(raised.value)
    assert not (tmp_path / "cache").exists()


def test_without_maven_cached_jars_are_enough(tmp_path, fake_mvn, monkeypatch):
    _ensure(tmp_path / "cache", ["broker"])
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    _ensure(tmp_path / "cache", ["broker"])


@pytest.mark.parametrize("name,artifact", [
    ("jackson-core-2.18.2.jar", "jackson-core"), ("delta-spark_4.2_2.13-4.4.0.jar", "delta-spark_4.2_2.13"),
    ("s3proxy-4.1.0-jar-with-dependencies.jar", "s3proxy-4.1.0-jar-with-dependencies.jar"),
    ("netty-codec-4.1.118.Final.jar", "netty-codec"), ("kafka-tools-4.3.1-test.jar", "kafka-tools"),
])
def test_artifact_names_as_bootstrap_cut_them(name, artifact):
    assert artifact_name(name) == artifact


def test_jars_pyspark_ships_in_any_version_are_dropped(tmp_path):
    ours, pyspark = tmp_path / "ours", tmp_path / "pyspark"
    ours.mkdir()
    pyspark.mkdir()
    for name in ("jackson-core-2.18.2.jar", "delta-spark_4.2_2.13-4.4.0.jar", "hadoop-aws-3.5.0.jar"):
        (ours / name).touch()
    for name in ("jackson-core-2.15.0.jar", "hadoop-aws-api-3.5.0.jar"):
        (pyspark / name).touch()
    assert drop_jars_pyspark_ships(ours, pyspark) == ["jackson-core-2.18.2.jar"]
    assert sorted(p.name for p in ours.iterdir()) == ["delta-spark_4.2_2.13-4.4.0.jar", "hadoop-aws-3.5.0.jar"]


def _installed(monkeypatch, tmp_path):
    """install_paths as in an installed package (no checkout), with its cache under tmp_path."""
    monkeypatch.setattr(install_paths, "IN_CHECKOUT", False)
    monkeypatch.setenv("SCG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SCG_JARS_DIR", raising=False)
    monkeypatch.delenv("SCG_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_an_installed_package_resolves_a_kind_on_first_need(tmp_path, monkeypatch, fake_mvn, capsys):
    _installed(monkeypatch, tmp_path)
    entry = tmp_path / "cache" / "jars" / pins_key(POMS)
    assert install_paths.jars_dir() == entry
    assert install_paths.state_dir() == tmp_path / "state" / "spark-consumer-groups"
    assert install_paths.class_archive_dir() == tmp_path / "cache" / "jvm"
    jars = install_paths.jar_files("broker")
    assert jars == [entry / "broker" / "broker-core-1.0.jar"]
    assert capsys.readouterr().err.startswith("scg: resolving broker jars from Maven Central")
    assert install_paths.jar_files("broker") == jars and capsys.readouterr().err == ""
    assert len(fake_mvn.read_text().splitlines()) == 1


def test_jars_dir_from_the_environment_is_never_resolved(tmp_path, monkeypatch, fake_mvn):
    _installed(monkeypatch, tmp_path)
    monkeypatch.setenv("SCG_JARS_DIR", str(tmp_path / "shipped"))
    with pytest.raises(install_paths.JarsNotInstalledError) as raised:
        install_paths.jar_files("spark")
    assert str(tmp_path / "shipped" / "spark") in str(raised.value)
    assert fake_mvn.read_text() == ""


def test_scg_kafka_start_without_maven_exits_3_naming_the_condition(tmp_path, monkeypatch, capsys):
    from pipelines.cli.main import main
    from pipelines.local.local_kafka import free_port

    _installed(monkeypatch, tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "java").symlink_to(Path(sys.executable))  # found on PATH; never started
    monkeypatch.setenv("PATH", str(tools))
    code = main(["kafka", "start", "--dir", str(tmp_path / "kafka"), "--port", str(free_port())])
    assert code == 3
    err = capsys.readouterr().err
    assert "[MAVEN_NOT_FOUND]" in err and "Install Maven" in err and "Traceback" not in err
