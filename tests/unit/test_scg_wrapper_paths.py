"""bin/scg runs in the caller's directory: a relative path on its command line is relative to
where the command was typed, and nothing in that directory is imported in place of the project."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCG = str(ROOT / "bin" / "scg")
PIPELINE = """\
name: demo
kafka: {bootstrap_servers: "127.0.0.1:9092"}
topics: [events]
group: {id: demo-group}
format: {schema: "id BIGINT"}
sink: {path: out/table}
"""


def _scg(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SCG, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_validate_reads_a_relative_path_from_the_callers_directory(tmp_path: Path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "x.yaml").write_text(PIPELINE)
    done = _scg(sub, "validate", "x.yaml")
    assert done.returncode == 0, done.stderr
    assert f"sink={sub / 'out' / 'table'}" in done.stdout
    above = _scg(sub, "validate", "../sub/x.yaml")
    assert above.returncode == 0, above.stderr


def test_a_missing_relative_path_is_reported_as_given(tmp_path: Path):
    done = _scg(tmp_path, "validate", "nope.yaml")
    assert done.returncode == 2
    assert done.stderr.startswith("nope.yaml:0: (document): [FILE_NOT_FOUND]")


def test_a_package_in_the_callers_directory_does_not_replace_the_project(tmp_path: Path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "__init__.py").write_text("raise SystemExit('the wrong pipelines package')\n")
    (tmp_path / "x.yaml").write_text(PIPELINE)
    done = _scg(tmp_path, "validate", "x.yaml")
    assert done.returncode == 0, done.stderr
