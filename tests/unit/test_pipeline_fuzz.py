"""Fuzzed pipeline files: whatever a file holds, loading it ends with a config or with named
conditions (ConfigError, exit 2, one line each, on a line of the file), never another exception,
and within a time bound.

Files come from the packaged example pipelines with one field broken (a wrong type, a value out
of range, huge, unicode, null or missing), from their text with bytes inserted or removed, from
random YAML values, random text, random bytes, and deep or huge documents. The loader is called
in process (``parse_yaml`` and ``validate_pipeline``, what ``load_pipeline`` runs after reading
the file); two tests run ``scg validate`` as a process for the exit code. Plug-in assignors are
not imported: a fuzzed ``module:Class`` could name any installed module.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from groupmgr.assignors.assignor_errors import UnknownAssignorError
from groupmgr.core import ExitCategory
from pipelines.config import Condition, ConfigError
from pipelines.config.pipeline_validator import validate_pipeline
from pipelines.config.yaml_limits import MAX_DEPTH, MAX_FILE_BYTES
from pipelines.config.yaml_nodes import MAX_DETAIL_CHARS, parse_yaml
from pipelines.runtime.install_paths import conf_dir
from tests.support.fuzz import FUZZ, FUZZ_EXAMPLES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((conf_dir() / "pipelines").glob("*.yaml"))
FILE = "fuzzed.yaml"
SECONDS_PER_FILE = 10  # the contract's bound; a file takes well under a second
ENV = {"KAFKA_BOOTSTRAP": "127.0.0.1:9092", "KAFKA_USER": "alice", "KAFKA_PASSWORD": "secret",
       "KAFKA_CA_FILE": str(ROOT / "tests" / "unit" / "config_cases" / "ca.pem"), "SCG_INSTANCE_ID": "member-1"}
BUILT_IN_ASSIGNORS = {"range": "range", "roundrobin": "roundrobin", "sticky": "sticky",
                      "cooperative-sticky": "cooperative-sticky"}


def _built_in_assignor(name: str) -> str:
    if name not in BUILT_IN_ASSIGNORS:
        raise UnknownAssignorError(name, sorted(BUILT_IN_ASSIGNORS))
    return BUILT_IN_ASSIGNORS[name]


def assert_named_outcome(data: bytes | str, base_dir: Path) -> None:
    """The contract: a config, or ConfigErrors each of which is a named one-line problem."""
    started = time.monotonic()
    try:
        root = parse_yaml(data, FILE)
        validate_pipeline(root, FILE, base_dir / FILE, ENV, assignor_lookup=_built_in_assignor)
    except ConfigError as error:
        assert error.exit_category == ExitCategory.CONFIG
        for problem in error.errors:
            assert isinstance(problem.condition, Condition)
            assert problem.line >= 0 and problem.file == FILE
            assert "\n" not in problem.headline() and len(problem.detail) <= MAX_DETAIL_CHARS
    assert time.monotonic() - started < SECONDS_PER_FILE


def _example(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path and list index path of ``tree`` (the root excluded)."""
    found = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        found.append(prefix + (key,))
        found.extend(_paths(value, prefix + (key,)))
    return found


def _replace(tree: Any, path: tuple, value: Any, remove: bool) -> Any:
    """A copy of ``tree`` with ``path`` set to ``value`` (or removed)."""
    if not path:
        return value
    copy = dict(tree) if isinstance(tree, dict) else list(tree)
    head = path[0]
    if len(path) == 1 and remove:
        del copy[head]
    else:
        copy[head] = _replace(copy[head], path[1:], value, remove)
    return copy


NUMBERS = st.one_of(st.integers(), st.integers(min_value=2**31 - 2, max_value=2**64),
                    st.integers(min_value=-2**64, max_value=0), st.floats(allow_nan=True))
DURATIONS = st.builds(lambda n, unit: f"{n}{unit}", st.integers(min_value=0, max_value=10**30),
                      st.sampled_from(["ms", "s", "m", "h", "d", "", "w", " s"]))
TEXT = st.one_of(st.text(), st.text(alphabet=st.characters(codec="utf-8"), min_size=200, max_size=400),
                 st.sampled_from(["ht!tp://x", "s3a://", "${NOT_SET}", "${", "../../..", "", " ", "\u202e",
                                  "a" * 300, "${KAFKA_USER}", "x://y", "C:\\data", "%41", "[", "*"]))
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, DURATIONS, TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                      max_leaves=12)


@st.composite
def one_field_broken(draw) -> str:
    tree = _example(draw(st.sampled_from(EXAMPLES)))
    path = draw(st.sampled_from(_paths(tree)))
    remove = draw(st.booleans())
    broken = _replace(tree, path, draw(VALUES), remove)
    return yaml.safe_dump(broken, allow_unicode=draw(st.booleans()), sort_keys=False)


@st.composite
def text_mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(EXAMPLES)).read_bytes())
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        at = draw(st.integers(min_value=0, max_value=len(data)))
        if draw(st.booleans()):
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[at:at + draw(st.integers(min_value=1, max_value=20))]
    return bytes(data)


@st.composite
def deep_or_huge(draw) -> str:
    kind = draw(st.sampled_from(["flow", "block", "mapping", "list", "string", "aliases"]))
    size = draw(st.integers(min_value=1, max_value=30_000))
    if kind == "flow":
        return "name: x\nspark: " + "[" * size + "]" * size
    if kind == "block":
        depth = min(size, 2 * MAX_DEPTH)
        return "name: x\ntopics:\n" + "".join(f"{'  ' * level}-\n" for level in range(1, depth))
    if kind == "mapping":
        return "name: x\nspark: " + "{a: " * size + "1" + "}" * size
    if kind == "list":
        return "name: x\ntopics:\n" + "  - t\n" * (size * 10)
    if kind == "string":
        return "name: " + "n" * min(size * 40, MAX_FILE_BYTES + 10)
    return "a0: &a0 [x, x, x, x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}]\n"
                                              for i in range(1, min(size, 40)))


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def test_the_examples_themselves_load(base_dir):
    for example in EXAMPLES:
        root = parse_yaml(example.read_bytes(), FILE)
        validate_pipeline(root, FILE, base_dir / FILE, ENV, assignor_lookup=_built_in_assignor)


@FUZZ
@given(text=one_field_broken())
def test_an_example_with_one_field_broken(base_dir, text):
    assert_named_outcome(text, base_dir)


@FUZZ
@given(data=text_mutated())
def test_an_example_with_bytes_inserted_or_removed(base_dir, data):
    assert_named_outcome(data, base_dir)


@FUZZ
@given(value=VALUES)
def test_random_yaml(base_dir, value):
    assert_named_outcome(yaml.safe_dump(value, allow_unicode=True), base_dir)


@FUZZ
@given(text=st.text(max_size=400))
def test_random_text(base_dir, text):
    assert_named_outcome(text, base_dir)


@FUZZ
@given(data=st.binary(max_size=400))
def test_random_bytes(base_dir, data):
    assert_named_outcome(data, base_dir)


@settings(FUZZ, max_examples=max(10, FUZZ_EXAMPLES // 10))  # each example reads up to a MiB
@given(text=deep_or_huge())
def test_deep_and_huge_documents(base_dir, text):
    assert_named_outcome(text, base_dir)


@pytest.mark.parametrize("data", [
    b"name: demo\n" + b"\xff\xfe" * 10 + b"\n",
    b"spark: " + b"[" * 20_000 + b"]" * 20_000,
    b"- a\n" * 300_000,
], ids=["bytes", "deep", "huge"])
def test_scg_validate_exits_2_with_one_named_line(tmp_path, data):
    path = tmp_path / "p.yaml"
    path.write_bytes(data)
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "validate", str(path)], cwd=tmp_path,
                          env={**os.environ, "PYTHONSAFEPATH": "1"}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"{path}:") and "[YAML_" in line
