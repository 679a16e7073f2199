"""Parser for ``format.schema``: a Spark DDL string or a field -> type mapping -> SchemaFields."""
from __future__ import annotations

import re
from typing import Sequence

from pipelines.config.model import SchemaField
from pipelines.config.fields import Ctx, as_str, wrong_type
from pipelines.config.yaml_nodes import Condition as C
from pipelines.config.yaml_nodes import Node, child_path

_SIMPLE_TYPES = {
    "string": "string", "bigint": "bigint", "long": "bigint", "int": "int", "integer": "int",
    "double": "double", "float": "float", "boolean": "boolean", "timestamp": "timestamp",
    "date": "date", "binary": "binary",
}
_DECIMAL = re.compile(r"decimal(?:\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?", re.IGNORECASE)
_DDL_FIELD = re.compile(r"\s*(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)\s+(.+?)\s*", re.DOTALL)


def parse_schema(ctx: Ctx, node: Node, path: str) -> tuple[SchemaField, ...]:
    """A Spark DDL string ("id BIGINT, name STRING") or a mapping field -> type."""
    if node.kind == "map":
        fields = [(value.line, child_path(path, key), key, as_str(ctx, value, child_path(path, key)))
                  for key, value in node.items()]
    elif node.kind == "scalar" and isinstance(node.value, str):
        fields = [(node.line, path, name, type_text) for name, type_text in _split_ddl(ctx, node, path)]
    else:
        wrong_type(ctx, node, path, "a Spark DDL string or a mapping field -> type")
    if not fields:
        ctx.fail(node.line, path, C.BAD_SCHEMA, "schema has no fields")
    result = tuple(SchemaField(name, _spark_type(ctx, line, p, text)) for line, p, name, text in fields)
    _unique_fields(ctx, node, path, result)
    return result


def _split_ddl(ctx: Ctx, node: Node, path: str) -> list[tuple[str, str]]:
    parts, depth, start, text = [], 0, 0, node.value
    for index, char in enumerate(text + ","):
        depth += {"(": 1, ")": -1, "<": 1, ">": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
        if depth < 0:
            break
    if depth != 0:
        ctx.fail(node.line, path, C.BAD_SCHEMA, "unbalanced parentheses or angle brackets in schema")
    result = []
    for part in parts:
        match = _DDL_FIELD.fullmatch(part)
        if match is None:
            ctx.fail(node.line, path, C.BAD_SCHEMA, f"cannot parse schema field {part.strip()!r}; "
                     "write 'name TYPE, ...'", field=part.strip())
        name = match.group(1)
        result.append((name[1:-1].replace("``", "`") if name.startswith("`") else name, match.group(2)))
    return result


class _BadType(ValueError):
    """A type text that is not one of the supported Spark types; the message says why."""


def _spark_type(ctx: Ctx, line: int, path: str, text: str) -> str:
    try:
        parsed, rest = _parse_type(text.strip())
        if rest.strip():
            raise _BadType(f"unexpected {rest.strip()!r} after the type")
    except _BadType as exc:
        ctx.fail(line, path, C.BAD_SCHEMA, f"unsupported type {text.strip()!r}: {exc}; use one of "
                 f"{', '.join(sorted(set(_SIMPLE_TYPES)))}, decimal(p,s), array<T>, map<string,T>, "
                 "struct<name: T, ...>", type=text.strip())
    return parsed


_WORD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`)\s*")


def _parse_type(text: str) -> tuple[str, str]:
    """One type at the start of ``text`` in Spark's normal form (lower case, nested types without
    spaces, struct field names in backticks), and what follows it."""
    match = _WORD.match(text)
    if match is None:
        raise _BadType("a type name is expected")
    word, rest = match.group(1).lower(), text[match.end():]
    if word in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[word], rest
    if word == "decimal":
        decimal = _DECIMAL.match(text.strip())
        precision, scale = int(decimal.group(1) or 10), int(decimal.group(2) or 0)
        if not 1 <= precision <= 38 or scale > precision:
            raise _BadType(f"bad decimal({precision},{scale}): need 1 <= p <= 38, s <= p")
        return f"decimal({precision},{scale})", text.strip()[decimal.end():]
    if word in ("array", "map", "struct"):
        rest = _expect(rest, "<")
        if word == "array":
            item, rest = _parse_type(rest)
            return f"array<{item}>", _expect(rest, ">")
        if word == "map":
            key, rest = _parse_type(rest)
            if key != "string":
                raise _BadType("a map's keys must be string (JSON object keys)")
            value, rest = _parse_type(_expect(rest, ","))
            return f"map<string,{value}>", _expect(rest, ">")
        fields: list[str] = []
        while True:
            name = _WORD.match(rest)
            if name is None:
                raise _BadType("a struct field name is expected")
            field_name = name.group(1)
            field_name = field_name[1:-1].replace("``", "`") if field_name.startswith("`") else field_name
            rest = rest[name.end():]
            rest = rest.lstrip()[1:] if rest.lstrip().startswith(":") else rest
            field_type, rest = _parse_type(rest)
            fields.append(f"`{field_name.replace('`', '``')}`:{field_type}")
            if rest.lstrip().startswith(">"):
                return f"struct<{','.join(fields)}>", rest.lstrip()[1:]
            rest = _expect(rest, ",")
    raise _BadType(f"unknown type {word!r}")


def _expect(text: str, token: str) -> str:
    stripped = text.lstrip()
    if not stripped.startswith(token):
        raise _BadType(f"{token!r} expected")
    return stripped[1:]


def _unique_fields(ctx: Ctx, node: Node, path: str, fields: Sequence[SchemaField]) -> None:
    seen: set[str] = set()
    for field in fields:
        if field.name.lower() in seen:
            ctx.fail(node.line, path, C.BAD_SCHEMA, f"duplicate field {field.name!r}", field=field.name)
        seen.add(field.name.lower())
