"""docs/DESIGN.md's module table lists every module of groupmgr/, pipelines/ and sinks/ (but
``__init__.py`` and ``__main__.py``), one row each, and nothing that does not exist.

The tree is the files git tracks (a module being written but not yet added is not part of it yet);
outside a git checkout, every file on disk."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "DESIGN.md"
PACKAGES = ("groupmgr", "pipelines", "sinks")
ROW = re.compile(r"^\| `([^`]+\.py)` \| (.+) \|$")


def module_rows() -> list[tuple[str, str]]:
    """(path, what it does) of each row of the "## Modules" section."""
    text = DESIGN.read_text()
    section = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    return [(m.group(1), m.group(2)) for m in map(ROW.match, section.splitlines()) if m]


def tree_modules() -> set[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "--", *PACKAGES], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.split()
        paths = [p for p in listed if p.endswith(".py") and (ROOT / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        paths = [str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    return {p for p in paths if Path(p).name not in ("__init__.py", "__main__.py")}


def test_every_module_has_a_row():
    listed = {path for path, _ in module_rows()}
    missing = sorted(tree_modules() - listed)
    assert not missing, f"modules without a row in docs/DESIGN.md's module table: {missing}"


def test_every_row_names_a_module_that_exists():
    stale = sorted(path for path, _ in module_rows() if not (ROOT / path).is_file())
    assert not stale, f"rows of docs/DESIGN.md's module table for files that do not exist: {stale}"


def test_one_row_per_module_each_saying_what_it_does():
    paths = [path for path, _ in module_rows()]
    assert len(paths) == len(set(paths)), "a module listed twice"
    assert all(what.strip() for _, what in module_rows())


def test_design_names_no_deleted_module():
    text = DESIGN.read_text()
    named = set(re.findall(r"`([a-z_]+\.py)`", text))
    existing = {p.name for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    existing |= {p.name for p in (ROOT / "tests").rglob("*.py")} | {p.name for p in (ROOT / "bench").rglob("*.py")}
    assert not named - existing, f"docs/DESIGN.md names files that do not exist: {sorted(named - existing)}"
