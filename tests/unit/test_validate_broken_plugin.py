"""``scg validate`` on a pipeline whose plug-in assignor module fails on import: exit 2 and one
line naming the file, line, field, condition and module, whatever the module raises (a
``sys.exit(0)`` at import included, which must not make the file look valid)."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
_ids = itertools.count()
PIPELINE = """\
name: demo
kafka:
  bootstrap_servers: 127.0.0.1:9092
topics: [events]
group:
  id: demo-group
  assignor: {module}:Assignor
format:
  schema: "id BIGINT"
sink:
  path: out/table
"""
BROKEN_MODULES = {
    "runtime-error": "raise RuntimeError('cannot start')",
    "syntax-error": "def broken(:\n    pass",
    "exit-0": "import sys\nsys.exit(0)",
    "exit-message": "import sys\nsys.exit('leaving')",
    "value-error": "int('x')",
}


def _pipeline_with_broken_plugin(tmp_path: Path, body: str) -> tuple[Path, str]:
    module = f"scg_broken_plugin_{next(_ids)}"
    (tmp_path / f"{module}.py").write_text(body + "\n")
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(module=module))
    return path, module


@pytest.mark.parametrize("body", BROKEN_MODULES.values(), ids=BROKEN_MODULES.keys())
def test_validate_names_the_module_that_failed_on_import(tmp_path, monkeypatch, capsys, body):
    path, module = _pipeline_with_broken_plugin(tmp_path, body)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith(f"{path}:7: group.assignor: [ASSIGNOR_IMPORT_FAILED]")
    assert module in line


def test_a_plugin_calling_sys_exit_0_makes_the_validate_process_exit_2(tmp_path):
    path, module = _pipeline_with_broken_plugin(tmp_path, BROKEN_MODULES["exit-0"])
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "validate", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "[ASSIGNOR_IMPORT_FAILED]" in done.stderr and "Traceback" not in done.stderr
