"""Bounds on what a pipeline file may hold, enforced while it is read, before a tree is built.

A pipeline file is small: a few hundred nodes. These bounds keep a careless or hostile file from
taking more than a bounded time and memory to refuse:

- :data:`MAX_FILE_BYTES`: :func:`read_bounded` never reads more than one byte past it;
- :data:`MAX_DEPTH`, :data:`MAX_NODES`, :data:`MAX_KEY_CHARS`: :class:`BoundedComposer` (a mixin
  for a PyYAML loader) checks each node as PyYAML composes it, so the composer never recurses
  deeper than :data:`MAX_DEPTH` levels or makes more than :data:`MAX_NODES` nodes, and merge keys
  (``<<``) never merge more than :data:`MAX_NODES` entries into one mapping.

A value (a ``transform``'s SQL, a ``format.schema`` DDL) has no bound of its own: it is never
longer than the file, and an error quotes at most one line of it. Strings whose target system
bounds them (``name``, ``group.id``...) have that bound (:mod:`pipelines.config.ranges`).

:func:`decode` turns the file's bytes into text (UTF-8, or UTF-16 with a byte order mark, as
YAML allows) and names the line and column of the first byte that is not.

Errors are plain exceptions with the line they refer to (:class:`LimitExceeded`,
:class:`UndecodableText`); :mod:`pipelines.config.yaml_nodes` turns them into config errors.
"""
from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

import yaml

MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 20_000  # also bounds what aliases expand to (yaml_nodes counts the expanded tree)
MAX_KEY_CHARS = 1_024


class LimitExceeded(Exception):
    """The document passes one of the bounds: ``limit`` names it, ``bound`` is its value,
    ``line`` is the 1-based line where it was passed (1 for the file size)."""

    def __init__(self, limit: str, bound: int, line: int, what: str) -> None:
        self.limit, self.bound, self.line, self.what = limit, bound, line, what
        super().__init__(what)


class UndecodableText(Exception):
    """The bytes are not UTF-8 (nor UTF-16 with a byte order mark) at ``line``, ``column``
    (1-based; the column counts characters)."""

    def __init__(self, line: int, column: int, byte: int, encoding: str, reason: str) -> None:
        self.line, self.column, self.byte, self.encoding, self.reason = line, column, byte, encoding, reason
        super().__init__(f"byte 0x{byte:02x} at line {line}, column {column} is not {encoding} ({reason})")


def read_bounded(path: Path) -> bytes:
    """The file's bytes; :class:`LimitExceeded` when it holds more than :data:`MAX_FILE_BYTES`
    (at most one byte more is read). ``OSError`` passes through."""
    with path.open("rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    check_size(data)
    return data


def check_size(data: bytes | str) -> None:
    """:class:`LimitExceeded` when ``data`` is longer than :data:`MAX_FILE_BYTES` bytes (text:
    characters, each at least one byte)."""
    if len(data) > MAX_FILE_BYTES:
        raise LimitExceeded("file size", MAX_FILE_BYTES, 1,
                            f"file is larger than {MAX_FILE_BYTES} bytes (a pipeline file is a few KB)")


def decode(data: bytes) -> str:
    """The text of ``data``: UTF-16 when it starts with a UTF-16 byte order mark, else UTF-8 (a
    UTF-8 byte order mark is dropped). :class:`UndecodableText` names the first bad byte."""
    encoding = "utf-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        before = data[:exc.start].decode(encoding, errors="replace")
        line, column = line_and_column(before, len(before))
        raise UndecodableText(line, column, data[exc.start], encoding.removesuffix("-sig").upper(),
                              exc.reason) from None


def line_and_column(text: str, position: int) -> tuple[int, int]:
    """1-based line and column of the character at ``position`` of ``text``."""
    line_start = text.rfind("\n", 0, position) + 1
    return text.count("\n", 0, position) + 1, position - line_start + 1


class BoundedComposer:
    """Mixin for a PyYAML loader (put it before the loader class): composing raises
    :class:`LimitExceeded` past :data:`MAX_DEPTH`, :data:`MAX_NODES` or :data:`MAX_KEY_CHARS`, and
    flattening merge keys past :data:`MAX_NODES` entries."""

    _depth = 0
    _nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        line = self.peek_event().start_mark.line + 1  # type: ignore[attr-defined]
        self._depth += 1
        self._nodes += 1
        try:
            if self._depth > MAX_DEPTH:
                raise LimitExceeded("nesting depth", MAX_DEPTH, line,
                                    f"document nests deeper than {MAX_DEPTH} levels")
            if self._nodes > MAX_NODES:
                raise LimitExceeded("nodes", MAX_NODES, line, f"document has more than {MAX_NODES} nodes")
            if isinstance(parent, yaml.MappingNode) and index is None:
                self._check_key(line)
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            self._depth -= 1

    def _check_key(self, line: int) -> None:
        event = self.peek_event()  # type: ignore[attr-defined]
        if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_KEY_CHARS:
            raise LimitExceeded("key length", MAX_KEY_CHARS, line,
                                f"a key of {len(event.value)} characters; at most {MAX_KEY_CHARS}")

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        super().flatten_mapping(node)  # type: ignore[misc]
        if len(node.value) > MAX_NODES:
            raise LimitExceeded("nodes", MAX_NODES, node.start_mark.line + 1,
                                f"merge keys (<<) make a mapping of more than {MAX_NODES} entries")
