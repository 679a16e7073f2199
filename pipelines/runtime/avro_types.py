"""Avro schemas as Arrow schemas, and the decoded values Arrow cannot take as they are (pure).

A reader schema's top-level record becomes the output table's columns; its types map to Arrow
(and through pyspark's own Arrow mapping to Spark) as Spark's ``from_avro`` maps them:

========================================  ==========================================
Avro                                      Arrow (Spark)
========================================  ==========================================
boolean, int, long, float, double         bool, int32, int64, float32, float64
string, enum, ``uuid``                    string
bytes, fixed                              binary
record                                    struct (fields in schema order)
array, map                                list, map<string, ...>
``decimal`` (bytes or fixed)              decimal128(precision, scale)
``date``                                  date32
``timestamp-millis`` / ``-micros``        timestamp[us, UTC] (Spark TIMESTAMP)
``local-timestamp-millis`` / ``-micros``  timestamp[us] (Spark TIMESTAMP_NTZ)
``time-millis`` / ``time-micros``         int64: microseconds after midnight
``[null, T]``, ``[T, null]``              T (every column is nullable)
========================================  ==========================================

A union of two or more types other than null has no column type and is refused
(:class:`UnsupportedAvroType`), as is a recursive record.
"""
from __future__ import annotations

import datetime
import functools
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pipelines.runtime.registry_client import RegistrySettings

_PRIMITIVES = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
               "double": pa.float64(), "string": pa.string(), "bytes": pa.binary(), "enum": pa.string(),
               "fixed": pa.binary()}
_TIMESTAMPS = {"timestamp-millis": "UTC", "timestamp-micros": "UTC",
               "local-timestamp-millis": None, "local-timestamp-micros": None}
_TIMES = ("time-millis", "time-micros")


class UnsupportedAvroType(ValueError):
    """A reader schema holds a type no table column can take; ``path`` names where."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path or 'the schema'}: {why}")
        self.path = path


@dataclass(frozen=True)
class AvroFormat:
    """What decoding a pipeline's Avro values needs: the reader schema (JSON text, a record) and
    the registry that holds the writer schemas. Picklable; the registry's secrets never shown."""

    reader_schema: str
    registry: RegistrySettings

    def arrow_schema(self) -> pa.Schema:
        """The reader schema's fields as Arrow columns (:func:`record_schema`)."""
        return record_schema(json.loads(self.reader_schema))


Fixup = Callable[[Any], Any]  # a decoded value → what Arrow takes for its column


def record_schema(schema: Mapping[str, Any]) -> pa.Schema:
    """The Arrow schema of an Avro record schema (parsed JSON): one field per record field."""
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        raise UnsupportedAvroType("", "the reader schema must be an Avro record")
    struct = _struct(schema, "", {})
    return pa.schema([struct.field(i) for i in range(struct.num_fields)])


def _struct(schema: Mapping[str, Any], path: str, named: dict[str, Any], namespace: str | None = None) -> pa.StructType:
    namespace = _namespace(schema, namespace)
    names = _names(schema, namespace)
    if any(n in named and named[n] is None for n in names):
        raise UnsupportedAvroType(path, f"record {names[0]} contains itself; a table column cannot")
    named.update(dict.fromkeys(names))
    fields = [pa.field(f["name"], arrow_type(f["type"], _join(path, f["name"]), named, namespace))
              for f in schema.get("fields", ())]
    named.update(dict.fromkeys(names, schema))
    return pa.struct(fields)


def _namespace(schema: Mapping[str, Any], enclosing: str | None) -> str | None:
    """The namespace a named type's own names resolve in: its full name's, its own, or the
    enclosing one (Avro's rule)."""
    name = schema.get("name", "")
    return name.rpartition(".")[0] if "." in name else schema.get("namespace", enclosing)


def _names(schema: Mapping[str, Any], enclosing: str | None) -> tuple[str, ...]:
    """The full name of a named type, then its short name (a reference may use either)."""
    name, namespace = schema.get("name", ""), _namespace(schema, enclosing)
    short = name.rpartition(".")[2]
    return (f"{namespace}.{short}", short) if namespace else (short,)


def arrow_type(avro: Any, path: str = "", named: dict[str, Any] | None = None,
               namespace: str | None = None) -> pa.DataType:
    """The Arrow type of one Avro type (a name, a union list or a type object)."""
    named = {} if named is None else named
    if isinstance(avro, list):
        return arrow_type(_non_null_branch(avro, path), path, named, namespace)
    if isinstance(avro, str):
        if avro in _PRIMITIVES:
            return _PRIMITIVES[avro]
        known = named.get(avro) or named.get(f"{namespace}.{avro}" if namespace else avro)
        if known is None:
            raise UnsupportedAvroType(path, f"unknown or recursive type {avro!r}")
        return arrow_type(known, path, named, namespace)
    kind, logical = avro.get("type"), avro.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(int(avro["precision"]), int(avro.get("scale", 0)))
    if logical in _TIMESTAMPS and kind == "long":
        return pa.timestamp("us", tz=_TIMESTAMPS[logical])
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in _TIMES:
        return pa.int64()
    if kind == "record":
        return _struct(avro, path, named, namespace)
    if kind == "array":
        return pa.list_(arrow_type(avro["items"], f"{path}[]", named, namespace))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(avro["values"], f"{path}{{}}", named, namespace))
    if kind in ("enum", "fixed"):
        named.update(dict.fromkeys(_names(avro, namespace), avro))
        return _PRIMITIVES[kind]
    return arrow_type(kind, path, named, namespace)


def _non_null_branch(union: list, path: str) -> Any:
    branches = [b for b in union if b != "null"]
    if len(branches) != 1:
        raise UnsupportedAvroType(path, "a union of several non-null types has no column type; "
                                  "use [\"null\", T] or decode the value as raw bytes")
    return branches[0]


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def record_fixup(schema: Mapping[str, Any]) -> Fixup | None:
    """What turns a record fastavro decoded with the reader ``schema`` into one Arrow takes, or
    None when every value goes in as it is (most schemas): a ``uuid`` becomes its text, a
    ``time-millis`` / ``time-micros`` its microseconds after midnight."""
    return _fixup(schema, {}, None)


def _fixup(avro: Any, named: dict[str, Any], namespace: str | None) -> Fixup | None:
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        return _fixup(branches[0], named, namespace) if len(branches) == 1 else None
    if isinstance(avro, str):
        known = named.get(avro) or named.get(f"{namespace}.{avro}" if namespace else avro)
        return _fixup(known, named, namespace) if isinstance(known, Mapping) else None
    kind, logical = avro.get("type"), avro.get("logicalType")
    if logical == "uuid":
        return _text_of_uuid
    if logical in _TIMES:
        return _time_micros
    if kind == "record":
        named.update(dict.fromkeys(_names(avro, namespace), avro))
        inner = {f["name"]: _fixup(f["type"], named, _namespace(avro, namespace)) for f in avro.get("fields", ())}
        inner = {name: fix for name, fix in inner.items() if fix is not None}
        return functools.partial(_fix_record, inner) if inner else None
    if kind == "array":
        item = _fixup(avro["items"], named, namespace)
        return functools.partial(_fix_items, item) if item else None
    if kind == "map":
        item = _fixup(avro["values"], named, namespace)
        return functools.partial(_fix_values, item) if item else None
    if kind in ("enum", "fixed"):
        named.update(dict.fromkeys(_names(avro, namespace), avro))
    return None if isinstance(kind, str) and kind in _PRIMITIVES else _fixup(kind, named, namespace)


def _fix_record(inner: Mapping[str, Fixup], record: dict | None) -> dict | None:
    if record is None:
        return None
    for name, fix in inner.items():
        record[name] = fix(record.get(name))
    return record


def _fix_items(item: Fixup, items: list | None) -> list | None:
    return None if items is None else [item(v) for v in items]


def _fix_values(item: Fixup, pairs: dict | None) -> dict | None:
    return None if pairs is None else {k: item(v) for k, v in pairs.items()}


def _text_of_uuid(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else value


def _time_micros(value: Any) -> Any:
    if isinstance(value, datetime.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    return value
