"""Byte-compile the ``pyspark.zip`` Spark puts first on its Python processes' path.

Spark starts its Python processes (the driver-side planner of a Python data source, such as the
``scg-kafka`` source's, at each query start; the worker daemon of every executor) with
``$SPARK_HOME/python/lib/pyspark.zip`` ahead of the interpreter's own packages. Spark ships that
archive with sources only, and Python never writes bytecode caches into a zip, so each such process
compiles the pyspark modules it imports from source before it does anything (what that costs:
docs/performance.md). This module adds, next to every ``.py`` entry, its ``.pyc`` compiled by
this interpreter as an *unchecked hash-based* pyc (PEP 552): zipimport loads it without comparing
timestamps, so it does not depend on the zip's time zone. Modules of a ``tests`` package (seven
in ten of pyspark's) stay source only: nothing but Spark's own test suite imports them, and every
entry lengthens the archive's directory, which each of these processes reads again (in pure
Python, once per package it imported from the archive) when PySpark adds its files to the path
and invalidates the import caches. The sources stay in the archive unchanged (tracebacks show
their lines). A process of another Python version sees a foreign magic number and compiles the
source as before: the archive never reads differently, only faster.

``bin/bootstrap`` runs ``python -m pipelines.local.compile_pyspark_zip`` for the virtualenv's
pyspark, the way pip byte-compiles what it installs; given paths, it compiles those archives (a
Spark distribution's ``python/lib/pyspark.zip`` in a cluster image). Idempotent: an archive that
already holds this interpreter's bytecode is left as it is. The new archive replaces the old one
atomically, so a process that has the old one open keeps reading it.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from importlib import _bootstrap_external
from pathlib import Path

PROBE_ENTRY = "pyspark/__init__"  # its .pyc tells whether the archive holds this interpreter's bytecode
TEST_PACKAGE = "tests"            # a package of this name holds test modules: left as source


def shipped_archives() -> list[Path]:
    """The archives Spark puts on its Python processes' path: ``$SPARK_HOME/python/lib/*.zip``
    (SPARK_HOME as pyspark finds it: the environment's, else the installed package's)."""
    from pyspark.find_spark_home import _find_spark_home

    return sorted(Path(_find_spark_home(), "python", "lib").glob("*.zip"))


def holds_bytecode(archive: Path) -> bool:
    """Whether ``archive`` is compiled as :func:`compiled_copy` compiles: bytecode of this
    interpreter for its first module (or for ``pyspark/__init__``, when it has that), none for a
    test module."""
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        sources = sorted(n[:-3] for n in names if n.endswith(".py"))
        probe = PROBE_ENTRY if PROBE_ENTRY + ".py" in names else (sources[0] if sources else None)
        if probe is None or probe + ".pyc" not in names:
            return probe is None
        if any(n.endswith(".pyc") and is_test_module(n) for n in names):
            return False
        return zf.read(probe + ".pyc")[:4] == importlib.util.MAGIC_NUMBER


def is_test_module(entry: str) -> bool:
    """Whether the archive entry ``entry`` lies in a package named :data:`TEST_PACKAGE`."""
    return TEST_PACKAGE in entry.split("/")[:-1]


def compiled_copy(source: Path, target: Path, origin: Path | None = None) -> int:
    """Write ``source``'s entries to ``target`` with an unchecked hash-based ``.pyc`` beside each
    ``.py`` but a test module's (replacing any ``.pyc`` it had); the number of modules compiled.
    The code's file names are under ``origin`` (default ``source``), as zipimport names what it
    compiles itself. A module that does not compile is left as source only."""
    prefix = os.path.abspath(origin or source)
    compiled = 0
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename.endswith(".pyc"):
                continue
            data = zin.read(info)
            zout.writestr(info, data)
            if not info.filename.endswith(".py") or is_test_module(info.filename):
                continue
            try:
                code = compile(data, f"{prefix}/{info.filename}", "exec", dont_inherit=True)
            except (SyntaxError, ValueError):
                continue
            entry = zipfile.ZipInfo(info.filename[:-3] + ".pyc", info.date_time)
            entry.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(entry, bytes(_bootstrap_external._code_to_hash_pyc(
                code, importlib.util.source_hash(data), checked=False)))
            compiled += 1
    return compiled


def compile_in_place(archive: Path) -> int:
    """Byte-compile ``archive`` unless it already holds this interpreter's bytecode; the number of
    modules compiled (0 when it was left as it is)."""
    if holds_bytecode(archive):
        return 0
    fd, temp = tempfile.mkstemp(prefix=archive.name + ".", suffix=".tmp", dir=archive.parent)
    os.close(fd)
    try:
        compiled = compiled_copy(archive, Path(temp), origin=archive)
        os.chmod(temp, archive.stat().st_mode & 0o777)
        os.replace(temp, archive)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    return compiled


def main(argv: Iterable[str]) -> int:
    archives = [Path(a) for a in argv] or shipped_archives()
    for archive in archives:
        try:
            compiled = compile_in_place(archive)
        except (OSError, zipfile.BadZipFile) as exc:
            print(f"could not byte-compile {archive}: {exc} (Spark's Python processes start slower; "
                  "nothing else changes)", file=sys.stderr)
            continue
        if compiled:
            print(f"byte-compiled {compiled} modules in {archive}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
