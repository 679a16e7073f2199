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
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
        if depth < 0:
            break
    if depth != 0:
        ctx.fail(node.line, path, C.BAD_SCHEMA, "unbalanced parentheses in schema")
    result = []
    for part in parts:
        match = _DDL_FIELD.fullmatch(part)
        if match is None:
            ctx.fail(node.line, path, C.BAD_SCHEMA, f"cannot parse schema field {part.strip()!r}; "
                     "write 'name TYPE, ...'", field=part.strip())
        name = match.group(1)
        result.append((name[1:-1].replace("``", "`") if name.startswith("`") else name, match.group(2)))
    return result


def _spark_type(ctx: Ctx, line: int, path: str, text: str) -> str:
    clean = text.strip().lower()
    if clean in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[clean]
    match = _DECIMAL.fullmatch(clean)
    if match is None:
        ctx.fail(line, path, C.BAD_SCHEMA, f"unsupported type {text.strip()!r}; use one of "
                 f"{', '.join(sorted(set(_SIMPLE_TYPES)))}, decimal(p,s)", type=text.strip())
    precision, scale = int(match.group(1) or 10), int(match.group(2) or 0)
    if not 1 <= precision <= 38 or scale > precision:
        ctx.fail(line, path, C.BAD_SCHEMA, f"bad decimal({precision},{scale}): need 1 <= p <= 38, s <= p",
                 type=text.strip())
    return f"decimal({precision},{scale})"


def _unique_fields(ctx: Ctx, node: Node, path: str, fields: Sequence[SchemaField]) -> None:
    seen: set[str] = set()
    for field in fields:
        if field.name.lower() in seen:
            ctx.fail(node.line, path, C.BAD_SCHEMA, f"duplicate field {field.name!r}", field=field.name)
        seen.add(field.name.lower())
