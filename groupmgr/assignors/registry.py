"""Find assignors by name: built-ins, entry points, or ``package.module:Class``.

Names resolve in this order:

1. a name in the registry: the built-ins ``range``, ``roundrobin``, ``sticky``
   (always available, even when this package is not installed and so has no
   entry points) plus every entry point in the group ``groupmgr.assignors``
   (this package's own ``cooperative-sticky`` is registered that way only, so
   the built-in list stays the three eager assignors every install has);
2. a ``package.module:Class`` spec (``Class`` may be a dotted attribute path);
3. otherwise :class:`UnknownAssignorError`.

A name registered with two different targets (two plug-ins, or a plug-in
reusing a built-in name) raises :class:`DuplicateAssignorError` when it is
asked for; the same target seen twice (one distribution visible on two paths)
is fine. The loaded object must be a :class:`PartitionAssignor` subclass (it is
instantiated without arguments) or instance, and a registered assignor's
``name`` must equal its registry name, because that name is the protocol name
members agree on in JoinGroup.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from .api import PartitionAssignor
from .assignor_errors import AssignorImportError, DuplicateAssignorError, UnknownAssignorError

ENTRY_POINT_GROUP = "groupmgr.assignors"
# What plug-in code may raise while it is imported or made: any error, and SystemExit (a module
# calling sys.exit() would otherwise end the process, with exit 0 for sys.exit(0)).
PLUGIN_FAILURES = (Exception, SystemExit)

BUILTIN_ASSIGNORS: dict[str, str] = {
    "range": "groupmgr.assignors.range:RangeAssignor",
    "roundrobin": "groupmgr.assignors.roundrobin:RoundRobinAssignor",
    "sticky": "groupmgr.assignors.sticky:StickyAssignor",
}


def _targets() -> dict[str, list[str]]:
    """Registry name -> distinct ``module:attr`` targets (built-ins first, then entry points)."""
    table: dict[str, list[str]] = {name: [target] for name, target in BUILTIN_ASSIGNORS.items()}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        target = ep.value.split("[", 1)[0].strip()
        known = table.setdefault(ep.name, [])
        if target not in known:
            known.append(target)
    return table


def list_assignors() -> list[str]:
    """Sorted names that :func:`get_assignor` resolves without a ``module:Class`` spec."""
    return sorted(_targets())


def _resolve(spec: str) -> Any:
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise AssignorImportError(spec, ValueError("expected 'package.module:Class'"))
    try:
        obj: Any = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            obj = getattr(obj, attr)
    except PLUGIN_FAILURES as exc:  # a plug-in module can fail in any way on import
        raise AssignorImportError(spec, exc) from exc
    return obj


def load_assignor(spec: str) -> PartitionAssignor:
    """Import ``package.module:Class`` and return an instance of it.

    Raises :class:`AssignorImportError` if the import fails, the attribute is
    missing, construction raises, or the result is not a PartitionAssignor.
    """
    obj = _resolve(spec)
    if isinstance(obj, type):
        if not issubclass(obj, PartitionAssignor):
            raise AssignorImportError(spec, TypeError(f"{obj.__qualname__} is not a PartitionAssignor subclass"))
        try:
            obj = obj()
        except PLUGIN_FAILURES as exc:  # a plug-in constructor can fail in any way
            raise AssignorImportError(spec, exc) from exc
    if not isinstance(obj, PartitionAssignor):
        raise AssignorImportError(spec, TypeError(f"{type(obj).__name__} object is not a PartitionAssignor"))
    if not isinstance(obj.name, str) or not obj.name:
        raise AssignorImportError(spec, ValueError("assignor has no non-empty string 'name'"))
    return obj


def get_assignor(name_or_path: str) -> PartitionAssignor:
    """A new assignor instance for a registry name or a ``package.module:Class`` spec (see module doc)."""
    if not isinstance(name_or_path, str):
        raise TypeError(f"assignor name must be a string, got {name_or_path!r}")
    spec = name_or_path.strip()
    table = _targets()
    if spec in table:
        targets = table[spec]
        if len(targets) > 1:
            raise DuplicateAssignorError(spec, targets)
        assignor = load_assignor(targets[0])
        if assignor.name != spec:
            raise AssignorImportError(
                targets[0], ValueError(f"registered as {spec!r} but its name is {assignor.name!r}"))
        return assignor
    if ":" in spec:
        return load_assignor(spec)
    raise UnknownAssignorError(spec, sorted(table))
