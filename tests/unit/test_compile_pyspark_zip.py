import importlib.util
import subprocess
import sys
import zipfile

from pipelines.local.compile_pyspark_zip import compile_in_place, compiled_copy, holds_bytecode, main

SOURCES = {
    "pkg/__init__.py": "VALUE = 1\n",
    "pkg/mod.py": "def fail():\n    raise ValueError('from the archive')\n",
    "pkg/broken.py": "def (:\n",
    "pkg/data.txt": "not python",
}


def archive(tmp_path, name="lib.zip", sources=SOURCES):
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as zf:
        for entry, text in sources.items():
            zf.writestr(zipfile.ZipInfo(entry, (2020, 1, 1, 0, 0, 0)), text)
    return path


def entries(path):
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def run_from(path, code):
    return subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(path)!r}); {code}"],
                          capture_output=True, text=True, timeout=60)


def test_every_source_keeps_its_bytes_and_gains_this_interpreter_s_bytecode(tmp_path):
    path = archive(tmp_path)
    assert not holds_bytecode(path)
    assert compile_in_place(path) == 2  # the module with a syntax error stays source only
    after = entries(path)
    assert {n: after[n] for n in SOURCES} == {n: t.encode() for n, t in SOURCES.items()}
    assert sorted(set(after) - set(SOURCES)) == ["pkg/__init__.pyc", "pkg/mod.pyc"]
    assert after["pkg/mod.pyc"][:4] == importlib.util.MAGIC_NUMBER
    assert holds_bytecode(path)
    assert compile_in_place(path) == 0  # idempotent
    assert entries(path) == after


def test_zipimport_loads_the_bytecode_and_tracebacks_show_the_source(tmp_path):
    path = archive(tmp_path)
    compile_in_place(path)
    ran = run_from(path, "import pkg.mod, traceback; print(pkg.mod.__file__)\n"
                         "try:\n    pkg.mod.fail()\nexcept ValueError:\n    traceback.print_exc()")
    assert ran.stdout.strip() == f"{path}/pkg/mod.pyc"
    assert f'File "{path}/pkg/mod.py", line 2, in fail' in ran.stderr
    assert "raise ValueError('from the archive')" in ran.stderr


def test_test_modules_stay_source_only_and_an_archive_with_their_bytecode_is_compiled_again(tmp_path):
    with_tests = {**SOURCES, "pkg/tests/__init__.py": "", "pkg/tests/test_mod.py": "X = 2\n",
                  "pkg/tests_util.py": "Y = 3\n"}
    path = archive(tmp_path, sources=with_tests)
    assert compile_in_place(path) == 3
    assert sorted(n for n in entries(path) if n.endswith(".pyc")) == [
        "pkg/__init__.pyc", "pkg/mod.pyc", "pkg/tests_util.pyc"]
    assert run_from(path, "import pkg.tests.test_mod as m; print(m.X, m.__file__)").stdout.split() == [
        "2", f"{path}/pkg/tests/test_mod.py"]
    older = tmp_path / "older.zip"  # compiled before test modules were left out
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(older, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))
        zout.writestr("pkg/tests/test_mod.pyc", entries(path)["pkg/mod.pyc"])
    assert not holds_bytecode(older)
    assert compile_in_place(older) == 3
    assert entries(older).keys() == entries(path).keys()


def test_bytecode_of_another_interpreter_is_replaced(tmp_path):
    path = archive(tmp_path)
    compile_in_place(path)
    foreign = tmp_path / "foreign.zip"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(foreign, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info, b"\x00\x00\r\n" + data[4:] if info.filename.endswith(".pyc") else data)
    assert not holds_bytecode(foreign)
    assert compile_in_place(foreign) == 2
    assert holds_bytecode(foreign)
    assert entries(foreign).keys() == entries(path).keys()
    assert all(entries(foreign)[n] == t.encode() for n, t in SOURCES.items())


def test_a_copy_names_its_code_after_where_the_archive_will_live(tmp_path):
    source, target = archive(tmp_path), tmp_path / "elsewhere.zip"
    compiled_copy(source, target, origin=tmp_path / "final.zip")
    (tmp_path / "final.zip").write_bytes(target.read_bytes())
    ran = run_from(tmp_path / "final.zip", "import pkg.mod; pkg.mod.fail()")
    assert f'File "{tmp_path}/final.zip/pkg/mod.py", line 2' in ran.stderr


def test_an_archive_that_cannot_be_read_is_named_and_never_fails_the_caller(tmp_path, capsys):
    bad = tmp_path / "bad.zip"
    bad.write_text("not a zip")
    assert main([str(bad)]) == 0
    assert f"could not byte-compile {bad}" in capsys.readouterr().err
