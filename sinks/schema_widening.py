"""Whether a Delta table's schema can take a batch's columns, and what it becomes (pure).

Schemas are Delta's JSON schema as parsed dicts (``{"type": "struct", "fields": [...]}``, as
``deltalake.Schema.to_json`` writes them), so types compare as Delta sees them, whatever Arrow
spelling the writer used. :func:`widen` keeps every table column, in order, with its type; a
batch column the table lacks is appended as a nullable column, also inside a struct, also
inside a struct that is an array's element or a map's value. A column the batch lacks stays
(its rows read null). Nothing else changes: a column whose type differs (a primitive of another
type, a struct where there was none, another decimal precision), or whose name differs from a
table column's only in case (Delta resolves names case-insensitively), raises
:class:`ColumnTypeChanged` naming the column.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DeltaType = Any  # a Delta type in its JSON form: a name ("long") or a dict (struct, array, map)


class ColumnTypeChanged(ValueError):
    """A batch column's type is not the table column's; ``path`` names the column (``a.b`` inside a
    struct, ``a[]`` an array's element, ``a{}`` a map's value)."""

    def __init__(self, path: str, table_type: DeltaType, batch_type: DeltaType):
        self.path, self.table_type, self.batch_type = path, table_type, batch_type
        super().__init__(f"column {path}: the table has {type_text(table_type)}, the batch "
                         f"{type_text(batch_type)}")


def widen(table: Mapping[str, Any], batch: Mapping[str, Any]) -> dict[str, Any]:
    """The table schema with the batch's new columns added (rules above); ``table`` itself when it
    already has them all. Raises ColumnTypeChanged."""
    return _widen_type(table, batch, "")


def added_columns(table: Mapping[str, Any], widened: Mapping[str, Any]) -> list[str]:
    """The paths of the columns ``widened`` has and ``table`` lacks, in schema order."""
    return _added(table, widened, "")


def type_text(delta_type: DeltaType) -> str:
    """A Delta type written as Spark writes a simple type string: ``struct<a:long,b:string>``."""
    if isinstance(delta_type, str):
        return delta_type
    kind = delta_type["type"]
    if kind == "struct":
        return "struct<" + ",".join(f"{f['name']}:{type_text(f['type'])}" for f in delta_type["fields"]) + ">"
    if kind == "array":
        return f"array<{type_text(delta_type['elementType'])}>"
    return f"map<{type_text(delta_type['keyType'])},{type_text(delta_type['valueType'])}>"


def _widen_type(table: DeltaType, batch: DeltaType, path: str) -> DeltaType:
    if isinstance(table, str) or isinstance(batch, str) or table.get("type") != batch.get("type"):
        if table != batch:
            raise ColumnTypeChanged(path or "(the row)", table, batch)
        return table
    kind = table["type"]
    if kind == "struct":
        return _widen_struct(table, batch, path)
    if kind == "array":
        element = _widen_type(table["elementType"], batch["elementType"], f"{path}[]")
        return table if element is table["elementType"] else {**table, "elementType": element}
    if table["keyType"] != batch["keyType"]:  # a map: Delta's nested types are struct, array and map
        raise ColumnTypeChanged(f"{path}{{key}}", table["keyType"], batch["keyType"])
    value = _widen_type(table["valueType"], batch["valueType"], f"{path}{{}}")
    return table if value is table["valueType"] else {**table, "valueType": value}


def _widen_struct(table: Mapping[str, Any], batch: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    by_name = {f["name"]: f for f in table["fields"]}
    folded = {name.lower(): name for name in by_name}
    fields, changed = [], False
    batch_fields = {f["name"]: f for f in batch["fields"]}
    for field in table["fields"]:
        other = batch_fields.get(field["name"])
        if other is None:
            fields.append(field)
            continue
        widened = _widen_type(field["type"], other["type"], _join(path, field["name"]))
        changed |= widened is not field["type"]
        fields.append(field if widened is field["type"] else {**field, "type": widened})
    for name, other in batch_fields.items():
        if name in by_name:
            continue
        if name.lower() in folded:
            raise ColumnTypeChanged(_join(path, name), f"a column named {folded[name.lower()]}",
                                    f"a column named {name} (Delta compares names ignoring case)")
        fields.append({**other, "nullable": True})
        changed = True
    return {**table, "fields": fields} if changed else table


def _added(table: DeltaType, widened: DeltaType, path: str) -> list[str]:
    """The paths of ``widened``'s columns ``table`` lacks (``widened`` is ``table`` widened: the
    same types, some structs with more fields)."""
    if isinstance(table, str):
        return []
    kind = table["type"]
    if kind == "array":
        return _added(table["elementType"], widened["elementType"], f"{path}[]")
    if kind == "map":
        return _added(table["valueType"], widened["valueType"], f"{path}{{}}")
    if kind != "struct":
        return []
    known = {f["name"]: f for f in table["fields"]}
    paths: list[str] = []
    for field in widened["fields"]:
        name = _join(path, field["name"])
        if field["name"] in known:
            paths += _added(known[field["name"]]["type"], field["type"], name)
        else:
            paths.append(name)
    return paths


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
