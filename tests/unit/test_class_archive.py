"""The class archive's key, the options a driver gets, and when bootstrap records it again
(pipelines.runtime.class_archive, pipelines.local.record_class_archive; no JVM started)."""
from __future__ import annotations

import pytest

from pipelines.local import record_class_archive
from pipelines.local.record_class_archive import record
from pipelines.runtime import class_archive
from pipelines.runtime.class_archive import archive_key, driver_java_options

JARS = [("spark-core_2.13-4.0.1.jar", 15_000_000, 1_700_000_000_000_000_000),
        ("delta-spark_2.13-4.0.0.jar", 6_000_000, 1_700_000_000_000_000_000)]


def test_key_ignores_order_and_changes_with_the_jvm_or_any_jar():
    key = archive_key("/usr/lib/jvm/java-17/bin/java", JARS)
    assert archive_key("/usr/lib/jvm/java-17/bin/java", list(reversed(JARS))) == key
    assert archive_key("/usr/lib/jvm/java-21/bin/java", JARS) != key
    assert archive_key("/usr/lib/jvm/java-17/bin/java", JARS[:1]) != key
    assert archive_key("/usr/lib/jvm/java-17/bin/java", [JARS[0], (JARS[1][0], JARS[1][1] + 1, JARS[1][2])]) != key
    assert archive_key("/usr/lib/jvm/java-17/bin/java", [JARS[0], ("delta-spark_2.13-4.0.1.jar", *JARS[1][1:])]) != key
    # the same jar written again (a reinstalled pyspark): the JVM refuses the archive
    assert archive_key("/usr/lib/jvm/java-17/bin/java", [JARS[0], (*JARS[1][:2], JARS[1][2] + 1)]) != key


@pytest.fixture
def archive(tmp_path, monkeypatch):
    path = tmp_path / "jvm" / "spark-classes.jsa"
    monkeypatch.setattr(class_archive, "archive_path", lambda: path)
    for module in (class_archive, record_class_archive):
        monkeypatch.setattr(module, "current_key", lambda: "current")
    return path


def _recorded(archive, key: str) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"archive")
    archive.with_name(archive.name + ".key").write_text(key + "\n")


def test_a_driver_maps_the_archive_only_while_its_key_matches(archive):
    assert driver_java_options() == ""
    _recorded(archive, "current")
    options = driver_java_options()
    assert f"-XX:SharedArchiveFile={archive}" in options and "-Xshare:auto" in options
    assert "-Xlog:cds=off,cds+dynamic=off" in options  # a refused archive prints nothing
    _recorded(archive, "older jars")
    assert driver_java_options() == ""


def test_an_archive_that_matches_is_not_recorded_again(archive, monkeypatch):
    _recorded(archive, "current")
    monkeypatch.setattr(record_class_archive.subprocess, "run", lambda *a, **k: pytest.fail("recorded again"))
    assert record(archive, log=lambda text: None) is True


def test_a_failed_recording_is_not_retried_for_the_same_key(archive, monkeypatch):
    archive.parent.mkdir(parents=True)
    archive.with_name(archive.name + ".failed").write_text("current\n")
    monkeypatch.setattr(record_class_archive.subprocess, "run", lambda *a, **k: pytest.fail("retried"))
    assert record(archive, log=lambda text: None) is False
