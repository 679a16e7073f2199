"""The layers of docs/DESIGN.md, checked on the source: every import (module level or inside a
function) goes to the same layer or one below, no module imports itself back through others, no
two modules share a name, and every module belongs to a layer."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("groupmgr", "sinks", "pipelines")
# Bottom to top; a module's layer is its longest matching prefix.
LAYERS = (
    "groupmgr.core",      # shared values and the error root
    "groupmgr",           # the consumer-group member and assignors
    "sinks",              # the exactly-once Delta commit protocol
    "pipelines.runtime",  # runner, query, batch writer, records
    "pipelines.config",   # YAML -> validated frozen config
    "pipelines.local",    # local tooling: local Kafka, demo
    "pipelines.cli",      # the scg command line
)
ROOT_PACKAGES = {"groupmgr", "sinks", "pipelines"}  # empty package markers, not part of any layer


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def layer_of(module: str) -> int:
    matches = [i for i, prefix in enumerate(LAYERS) if module == prefix or module.startswith(prefix + ".")]
    if not matches:
        raise LookupError(module)
    return max(matches, key=lambda i: len(LAYERS[i]))


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Project modules ``module`` imports anywhere in its source (TYPE_CHECKING blocks included)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                     for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {m: imports_of(m, p, set(modules)) for m, p in modules.items()}


def test_every_module_belongs_to_a_layer():
    loose = [m for m in all_modules() if m not in ROOT_PACKAGES and not _has_layer(m)]
    assert not loose, f"modules outside every layer: {loose}"


def _has_layer(module: str) -> bool:
    try:
        layer_of(module)
        return True
    except LookupError:
        return False


def test_imports_only_go_down():
    upward = sorted((m, target) for m, targets in import_graph().items() if m not in ROOT_PACKAGES
                    for target in targets if target not in ROOT_PACKAGES
                    and layer_of(target) > layer_of(m))
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(
        f"  {m} ({LAYERS[layer_of(m)]}) -> {t} ({LAYERS[layer_of(t)]})" for m, t in upward)


def test_core_imports_nothing_of_the_project():
    graph = import_graph()
    outside = {m: sorted(t for t in graph[m] if not t.startswith("groupmgr.core"))
               for m in graph if m.startswith("groupmgr.core")}
    assert not any(outside.values()), outside


def test_no_import_cycles():
    graph = import_graph()
    cycles = find_cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan), as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_two_modules_share_a_name():
    seen: dict[str, list[str]] = {}
    for module, path in all_modules().items():
        if path.stem not in ("__init__", "__main__"):
            seen.setdefault(path.stem, []).append(module)
    clashes = {name: mods for name, mods in seen.items() if len(mods) > 1}
    assert not clashes, clashes


@pytest.mark.parametrize("module,expected", [
    ("groupmgr.core.offset_range", "groupmgr.core"), ("groupmgr.assignors.range", "groupmgr"),
    ("sinks.txn_table", "sinks"), ("pipelines.runtime.runner", "pipelines.runtime"),
    ("pipelines.cli.main", "pipelines.cli"),
])
def test_layer_of_uses_the_longest_prefix(module, expected):
    assert LAYERS[layer_of(module)] == expected


def test_every_public_class_has_a_docstring():
    missing = []
    for module, path in all_modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and not ast.get_docstring(node):
                missing.append(f"{module}.{node.name}")
    assert not missing, f"public classes without a docstring: {missing}"


def test_install_paths_find_the_project_root():
    from pipelines.runtime.install_paths import PROJECT_ROOT, conf_dir

    assert PROJECT_ROOT == ROOT and (PROJECT_ROOT / "setup.cfg").is_file()
    assert (conf_dir() / "pipelines" / "demo.yaml").is_file()


# The runner sits on top of pipelines/runtime: its pieces never import it, and nothing in the
# runtime layer but the runner imports the pieces that make up a member (so none of them reaches
# another through the runner's attributes); the CLI and local tooling build a runner.
RUNNER = "pipelines.runtime.runner"
RUNNER_PARTS = {"pipelines.runtime.query_supervisor", "pipelines.runtime.reader_modes",
                "pipelines.runtime.owned_partitions", "pipelines.runtime.warm_up",
                "pipelines.runtime.membership", "pipelines.runtime.member_probes"}


def test_only_the_cli_and_local_tooling_import_the_runner():
    importers = sorted(m for m, targets in import_graph().items() if RUNNER in targets)
    assert importers and all(m.startswith(("pipelines.cli", "pipelines.local")) for m in importers), importers


def test_the_runners_pieces_import_one_another_only_downward():
    """reader_modes uses owned_partitions and warm_up, member_probes reads the supervisor and the
    owned partitions; the supervisor, owned partitions, warm-up and membership import no other piece."""
    graph = import_graph()
    allowed = {"pipelines.runtime.reader_modes": {"pipelines.runtime.owned_partitions", "pipelines.runtime.warm_up"},
               "pipelines.runtime.member_probes": {"pipelines.runtime.query_supervisor",
                                                   "pipelines.runtime.owned_partitions"}}
    crossing = {m: sorted(graph[m] & RUNNER_PARTS - allowed.get(m, set())) for m in RUNNER_PARTS}
    assert not any(crossing.values()), crossing
    outside = sorted(m for m, targets in graph.items() if targets & RUNNER_PARTS
                     and m not in RUNNER_PARTS | {RUNNER} and not m.startswith(("pipelines.cli", "pipelines.local")))
    assert not outside, f"runtime modules that reach into the runner's pieces: {outside}"
