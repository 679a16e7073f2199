"""The ``sink`` section, the top-level ``transform``, and the output tables they make: one table
(``sink.path``), or several (``sink.tables``), each with a route that says which records it takes.

Rules for several tables, besides each table's own (a location delta-rs can open, partition
columns, a transform that reads ``input``):

- ``sink.tables`` replaces ``sink.path``, ``sink.partition_by`` and the top-level ``transform``;
- names are unique, locations are distinct and none is inside another (the dead-letter table's
  included);
- every table has a route (one table alone may take every record), given in exactly one way:
  ``topics``, ``field`` with ``values``, or ``where``;
- a topic route names subscribed topics (when the pipeline lists its ``topics``);
- with ``route: one`` two routes that surely overlap are refused: topic routes sharing a topic,
  or routes on the same field sharing a value. Routes that may overlap (a ``where``) are decided
  per record: a record several routes take is a dead letter ``ambiguous_route``.

Rules for an upsert table (``mode: upsert``): it needs ``key`` (unique column names); ``order_by``
is ``offset``, ``timestamp`` or a dotted field path; ``key``, ``order_by`` and
``delete_on_tombstone`` are refused without it. It is one table (no ``tables``), takes no
transform and keeps its schema (``schema_evolution: fail``). Whether the key and ordering are
columns of the output row is checked when the output is analysed (``UPSERT_INVALID``).
"""
from __future__ import annotations

import re

from pipelines.config.fields import (Ctx, Section, as_bool, as_enum, as_list, as_location, as_str, required,
                                     unique, wrong_type)
from pipelines.config.model import RouteConfig, SinkConfig, TableConfig
from pipelines.config.yaml_nodes import Condition as C
from pipelines.config.yaml_nodes import Node, child_path

SINK_KEYS = ("path", "partition_by", "dead_letter_path", "schema_evolution", "tables", "route", "mode", "key",
             "order_by", "delete_on_tombstone")
UPSERT_KEYS = ("key", "order_by", "delete_on_tombstone")
SINK_MODES = ("append", "upsert")
TABLE_KEYS = ("name", "path", "partition_by", "transform", "route")
ROUTE_KEYS = ("topics", "field", "values", "where")
SCHEMA_EVOLUTION = ("fail", "add_columns")
ROUTE_MODES = ("one", "all")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_FIELD_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_INPUT_VIEW = re.compile(r"\binput\b", re.IGNORECASE)
# delta-rs reads a table's location as a URL: these characters make it panic ("Invalid object store
# url") or, for a %XX escape, open another directory than Spark does
_NOT_FOR_DELTA_RS = re.compile(r"[\[\]^|\\]|%[0-9A-Fa-f]{2}")


def parse_transform(ctx: Ctx, node: Node | None, path: str) -> str | None:
    """A transform's SQL (None when not given); it must read the view ``input``."""
    if node is None:
        return None
    sql = as_str(ctx, node, path)
    if not _INPUT_VIEW.search(sql):
        ctx.fail(node.line, path, C.TRANSFORM_WITHOUT_INPUT, "transform SQL must read from the view named `input`")
    return sql.strip()


def parse_sink(ctx: Ctx, top: Section, columns: tuple[str, ...] | None,
               topics: tuple[str, ...] | None) -> SinkConfig:
    """The sink section. ``columns``: the output columns known before a query runs (None: a
    transform decides them, or the format is bad), for ``partition_by``; ``topics``: the
    subscribed topics (None: a pattern, or a bad subscription), for topic routes."""
    top.need("sink")
    sec = top.section("sink", SINK_KEYS)
    upsert = ctx.attempt(_upsert, top, sec) or {}
    if sec.get("tables") is not None:
        return _several_tables(ctx, top, sec, columns, topics)
    with ctx.independent():
        path = ctx.attempt(required, sec, "path", table_location)
        dead = ctx.attempt(table_location, sec.get("dead_letter_path"), sec.sub("dead_letter_path")) \
            if sec.get("dead_letter_path") else None
        partition_by = ctx.attempt(_partition_by, sec, columns)
        evolution = ctx.attempt(_schema_evolution, sec)
        if sec.get("route") is not None:
            ctx.report(sec.get("route").line, sec.sub("route"), C.CONFLICTING_FIELDS,
                       "route says how records are shared among sink.tables; there are none",
                       fields=("sink.route", "sink.tables"))
    dead = dead or f"{path}_dead_letters"  # as safe for delta-rs as path is
    if same_or_inside(dead, path) or same_or_inside(path, dead):
        ctx.fail(*sec.line_of("dead_letter_path"), C.CONFLICTING_FIELDS,
                 "dead_letter_path must be outside sink.path (and not contain it)", fields=("path", "dead_letter_path"))
    return SinkConfig(path=path, dead_letter_path=dead, partition_by=partition_by, schema_evolution=evolution,
                      **upsert)


def _upsert(ctx: Ctx, top: Section, sec: Section) -> dict:
    """The upsert keys of the sink section (see the module's rules), as SinkConfig fields."""
    mode = as_enum(ctx, sec.get("mode"), sec.sub("mode"), SINK_MODES) if sec.get("mode") is not None else "append"
    if mode == "append":
        for key in UPSERT_KEYS:
            if sec.get(key) is not None:
                ctx.report(sec.get(key).line, sec.sub(key), C.CONFLICTING_FIELDS,
                           f"sink.{key} is for upsert tables; set sink.mode: upsert, or remove it",
                           fields=(f"sink.{key}", "sink.mode"))
        return {}
    for key, node, why in (("tables", sec.get("tables"), "an upsert pipeline writes one table"),
                           ("transform", top.get("transform"), "an upsert table's rows are the records' own"),
                           ("schema_evolution", sec.get("schema_evolution"), "an upsert table keeps its schema")):
        if node is not None and not (key == "schema_evolution" and node.value == "fail"):
            where = "transform" if key == "transform" else sec.sub(key)
            ctx.report(node.line, where, C.CONFLICTING_FIELDS, f"{why}; remove {where}, or use sink.mode: append",
                       fields=(where, "sink.mode"))
    with ctx.independent():
        key = ctx.attempt(required, sec, "key", _key_columns, hint=" (sink.mode upsert names each row by its key)")
        order_by = ctx.attempt(_order_by, sec.get("order_by"), sec.sub("order_by")) \
            if sec.get("order_by") is not None else None
        tombstones = ctx.attempt(as_bool, sec.get("delete_on_tombstone"), sec.sub("delete_on_tombstone")) \
            if sec.get("delete_on_tombstone") is not None else False
    return {"mode": mode, "key": key, "order_by": order_by, "delete_on_tombstone": tombstones}


def _key_columns(ctx: Ctx, node: Node, path: str) -> tuple[str, ...]:
    items = [(item, as_str(ctx, item, child_path(path, i)).strip())
             for i, item in enumerate(as_list(ctx, node, path, "column names"))]
    if not items:
        ctx.fail(node.line, path, C.BAD_VALUE, "name at least one key column")
    unique(ctx, items, path, "column")
    return tuple(column for _, column in items)


def _order_by(ctx: Ctx, node: Node, path: str) -> str | None:
    text = as_str(ctx, node, path).strip()
    if not _FIELD_PATH.fullmatch(text):
        ctx.fail(node.line, path, C.BAD_VALUE, f"{text!r}: give offset, timestamp, or a record field "
                 "(dotted for a nested one: source.lsn)", value=text)
    return None if text == "offset" else text


def _several_tables(ctx: Ctx, top: Section, sec: Section, columns: tuple[str, ...] | None,
                    topics: tuple[str, ...] | None) -> SinkConfig:
    for key, instead in (("path", "each table's path"), ("partition_by", "each table's partition_by")):
        if sec.get(key) is not None:
            ctx.report(sec.get(key).line, sec.sub(key), C.CONFLICTING_FIELDS,
                       f"with sink.tables, give {instead} instead", fields=(f"sink.{key}", "sink.tables"))
    if top.get("transform") is not None:
        ctx.report(top.get("transform").line, "transform", C.CONFLICTING_FIELDS,
                   "with sink.tables, give each table's transform instead", fields=("transform", "sink.tables"))
    with ctx.independent():
        mode = ctx.attempt(as_enum, sec.get("route"), sec.sub("route"), ROUTE_MODES) \
            if sec.get("route") is not None else "one"
        tables = ctx.attempt(_tables, sec, columns, topics)
        dead = ctx.attempt(table_location, sec.get("dead_letter_path"), sec.sub("dead_letter_path")) \
            if sec.get("dead_letter_path") else None
        evolution = ctx.attempt(_schema_evolution, sec)
    dead = dead or f"{tables[0].path}_dead_letters"
    for table in tables:
        if same_or_inside(dead, table.path) or same_or_inside(table.path, dead):
            ctx.fail(*sec.line_of("dead_letter_path", "tables"), C.CONFLICTING_FIELDS,
                     f"dead_letter_path must be outside the table {table.name} (and not contain it)",
                     fields=("dead_letter_path", "tables"))
    if mode == "one":
        _check_no_overlap(ctx, sec, tables)
    return SinkConfig(path=tables[0].path, dead_letter_path=dead, schema_evolution=evolution, tables=tables,
                      route=mode)


def _tables(ctx: Ctx, sec: Section, columns: tuple[str, ...] | None,
            topics: tuple[str, ...] | None) -> tuple[TableConfig, ...]:
    path = sec.sub("tables")
    items = as_list(ctx, sec.get("tables"), path, "tables")
    if not items:
        ctx.fail(sec.get("tables").line, path, C.BAD_VALUE, "list at least one table")
    with ctx.independent():
        tables = [ctx.attempt(_table, item, child_path(path, i), columns, topics, len(items))
                  for i, item in enumerate(items)]
    unique(ctx, [(item, table.name) for item, table in zip(items, tables)], path, "table name")
    for i, (item, table) in enumerate(zip(items, tables)):
        for other in tables[:i]:
            if same_or_inside(table.path, other.path) or same_or_inside(other.path, table.path):
                ctx.fail(item.line, child_path(child_path(path, i), "path"), C.CONFLICTING_FIELDS,
                         f"the table {table.name} must be outside the table {other.name} (and not contain it)",
                         fields=("path",))
    return tuple(tables)


def _table(ctx: Ctx, node: Node, path: str, columns: tuple[str, ...] | None,
           topics: tuple[str, ...] | None, count: int) -> TableConfig:
    sec = Section(ctx, node, path, TABLE_KEYS)
    with ctx.independent():
        name = ctx.attempt(required, sec, "name", _table_name)
        location = ctx.attempt(required, sec, "path", table_location)
        transform = ctx.attempt(parse_transform, sec.get("transform"), sec.sub("transform"))
        partition_by = ctx.attempt(_partition_by, sec, columns if sec.get("transform") is None else None)
        route = ctx.attempt(_route, sec, topics) if sec.get("route") is not None else None
        if route is None and count > 1 and sec.get("route") is None:
            ctx.report(sec.line, sec.sub("route"), C.MISSING_FIELD,
                       "required field 'route' is missing (each of several tables says which records it takes)",
                       key="route")
    return TableConfig(name=name, path=location, partition_by=partition_by, transform=transform, route=route)


def _table_name(ctx: Ctx, node: Node, path: str) -> str:
    name = as_str(ctx, node, path).strip()
    if not _NAME.fullmatch(name):
        ctx.fail(node.line, path, C.BAD_VALUE, f"{name!r}: use letters, digits, '_', '.', '-'", value=name)
    return name


def _route(ctx: Ctx, table: Section, topics: tuple[str, ...] | None) -> RouteConfig:
    sec = table.section("route", ROUTE_KEYS)
    given = [key for key in ("topics", "field", "where") if sec.get(key) is not None]
    if len(given) != 1:
        ctx.fail(sec.line, sec.path, C.CONFLICTING_FIELDS if given else C.MISSING_FIELD,
                 "a route is one of: topics, field with values, where" + (f" (given: {', '.join(given)})" if given else ""),
                 fields=tuple(child_path(sec.path, k) for k in ("topics", "field", "where")))
    if sec.get("values") is not None and given != ["field"]:
        ctx.fail(sec.get("values").line, sec.sub("values"), C.CONFLICTING_FIELDS, "values go with field",
                 fields=(sec.sub("values"), sec.sub("field")))
    if given == ["topics"]:
        return RouteConfig(topics=_route_topics(ctx, sec, topics))
    if given == ["field"]:
        column = as_str(ctx, sec.get("field"), sec.sub("field")).strip()
        return RouteConfig(column=column, values=required(ctx, sec, "values", _values))
    where = as_str(ctx, sec.get("where"), sec.sub("where")).strip()
    return RouteConfig(where=where)


def _route_topics(ctx: Ctx, sec: Section, subscribed: tuple[str, ...] | None) -> tuple[str, ...]:
    node, path = sec.get("topics"), sec.sub("topics")
    items = as_list(ctx, node, path, "topic names") if node.kind == "seq" else (node,)
    named = [(item, as_str(ctx, item, path).strip()) for item in items]
    if not named:
        ctx.fail(node.line, path, C.BAD_VALUE, "name at least one topic")
    unique(ctx, named, path, "topic")
    for item, topic in named:
        if subscribed is not None and topic not in subscribed:
            ctx.fail(item.line, path, C.BAD_VALUE,
                     f"{topic!r} is not one of the pipeline's topics ({', '.join(subscribed)})", value=topic)
    return tuple(topic for _, topic in named)


def _values(ctx: Ctx, node: Node, path: str) -> tuple[str, ...]:
    items = as_list(ctx, node, path, "values") if node.kind == "seq" else (node,)
    values = []
    for index, item in enumerate(items):
        if item.kind != "scalar" or item.value is None:
            wrong_type(ctx, item, child_path(path, index), "a string, number or boolean")
        values.append(str(item.value).lower() if isinstance(item.value, bool) else str(item.value))
    if not values:
        ctx.fail(node.line, path, C.BAD_VALUE, "give at least one value")
    return tuple(values)


def _check_no_overlap(ctx: Ctx, sec: Section, tables: tuple[TableConfig, ...]) -> None:
    """``route: one``: two topic routes sharing a topic, or two routes on one field sharing a value,
    would send some records to both tables."""
    for i, table in enumerate(tables):
        for other in tables[:i]:
            one, two = table.route, other.route
            if one is None or two is None:
                continue
            shared = (set(one.topics) & set(two.topics) if one.topics and two.topics else
                      set(one.values) & set(two.values) if one.column is not None and one.column == two.column
                      else set())
            if shared:
                ctx.fail(*sec.line_of("route", "tables"), C.CONFLICTING_FIELDS,
                         f"the routes of {other.name} and {table.name} both take {', '.join(sorted(shared))}; "
                         "a record lands in one table unless sink.route is all", fields=("sink.route", "sink.tables"))


def _schema_evolution(ctx: Ctx, sec: Section) -> str:
    node = sec.get("schema_evolution")
    return as_enum(ctx, node, sec.sub("schema_evolution"), SCHEMA_EVOLUTION) if node is not None else "fail"


def table_location(ctx: Ctx, node: Node, path: str) -> str:
    """A Delta table's location (see :func:`as_location`; no trailing slash), which delta-rs can open."""
    location = as_location(ctx, node, path).rstrip("/") or "/"
    unsafe = _NOT_FOR_DELTA_RS.search(location)
    if unsafe:
        ctx.fail(node.line, path, C.BAD_VALUE,
                 f"{location!r} holds {unsafe.group()!r}, which the Delta writer (delta-rs) cannot use in "
                 "a table's location (it reads the location as a URL); choose a path without "
                 "[ ] ^ | \\ or %XX escapes", value=location)
    return location


def _partition_by(ctx: Ctx, sec: Section, allowed: tuple[str, ...] | None) -> tuple[str, ...]:
    node = sec.get("partition_by")
    if node is None:
        return ()
    path = sec.sub("partition_by")
    items = [(item, as_str(ctx, item, child_path(path, i))) for i, item in
             enumerate(as_list(ctx, node, path, "column names"))]
    unique(ctx, items, path, "column")
    for index, (item, column) in enumerate(items):
        if allowed is not None and column not in allowed:
            ctx.fail(item.line, child_path(path, index), C.BAD_PARTITION_COLUMN,
                     f"{column!r} is not a column; choose from {', '.join(allowed)}",
                     column=column, allowed=allowed)
    return tuple(column for _, column in items)


def same_or_inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")
