"""Thin YAML loader that keeps a line number on every node, plus the config error type.

``load_yaml(path)`` parses one YAML document with PyYAML's safe composer and turns the
node graph into :class:`Node` values. Every node knows its line; a value inside a
mapping carries the line of its *key*, so errors point at the line naming the field.
Duplicate keys are an error (PyYAML silently keeps the last one). Mapping keys are
always the key's source text (``on:`` stays ``"on"``); scalar values are constructed
by the safe constructor (ints, bools, null...) and keep their source text too.

The bounds of :mod:`pipelines.config.yaml_limits` (file size, nesting depth, node count, key
length) are checked while the file is read and composed, and on the tree that aliases
expand to, so any file is refused or accepted in bounded time and memory (``YAML_LIMIT``). A
file that is not UTF-8 (or UTF-16 with a byte order mark) is refused at the line of its first
bad byte.

Errors are :class:`ConfigError`: a named :class:`Condition` plus parameters, located
by file, line and field path (Spark ``KafkaExceptions`` style; test by condition). Several
problems of one file travel together as one :class:`ConfigErrors`. A detail is one line of at
most :data:`MAX_DETAIL_CHARS` characters, however long the value it quotes.
"""
from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import yaml

from groupmgr.core import ExitCategory, ScgError
from pipelines.config.yaml_limits import (MAX_DEPTH, MAX_NODES, BoundedComposer, LimitExceeded, UndecodableText,
                                          check_size, decode, line_and_column, read_bounded)

MERGE_TAG = "tag:yaml.org,2002:merge"
MAP_TAG = "tag:yaml.org,2002:map"
SEQ_TAG = "tag:yaml.org,2002:seq"
MAX_DETAIL_CHARS = 1_000


class Condition(enum.StrEnum):
    """Every named config error condition."""

    FILE_NOT_FOUND = "FILE_NOT_FOUND"
    FILE_NOT_READABLE = "FILE_NOT_READABLE"
    YAML_SYNTAX = "YAML_SYNTAX"
    YAML_LIMIT = "YAML_LIMIT"
    DUPLICATE_KEY = "DUPLICATE_KEY"
    UNKNOWN_KEY = "UNKNOWN_KEY"
    MISSING_FIELD = "MISSING_FIELD"
    WRONG_TYPE = "WRONG_TYPE"
    BAD_DURATION = "BAD_DURATION"
    BAD_ENUM = "BAD_ENUM"
    BAD_VALUE = "BAD_VALUE"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    BAD_REGEX = "BAD_REGEX"
    BAD_SCHEMA = "BAD_SCHEMA"
    CONFLICTING_FIELDS = "CONFLICTING_FIELDS"
    INLINE_SECRET = "INLINE_SECRET"
    ENV_VAR_NOT_SET = "ENV_VAR_NOT_SET"
    SECRET_FILE_NOT_FOUND = "SECRET_FILE_NOT_FOUND"
    SECRET_FILE_UNREADABLE = "SECRET_FILE_UNREADABLE"
    UNKNOWN_ASSIGNOR = "UNKNOWN_ASSIGNOR"
    ASSIGNOR_IMPORT_FAILED = "ASSIGNOR_IMPORT_FAILED"
    BAD_PARTITION_COLUMN = "BAD_PARTITION_COLUMN"
    TRANSFORM_WITHOUT_INPUT = "TRANSFORM_WITHOUT_INPUT"
    UNSAFE_STORAGE_OPTION = "UNSAFE_STORAGE_OPTION"
    UNKNOWN_CLIENT_SETTING = "UNKNOWN_CLIENT_SETTING"
    NOT_A_CERTIFICATE = "NOT_A_CERTIFICATE"
    NOT_A_PRIVATE_KEY = "NOT_A_PRIVATE_KEY"
    CLIENT_KEY_MISMATCH = "CLIENT_KEY_MISMATCH"
    CLIENT_KEY_PASSWORD_MISSING = "CLIENT_KEY_PASSWORD_MISSING"
    CLIENT_KEY_PASSWORD_WRONG = "CLIENT_KEY_PASSWORD_WRONG"
    TLS_FILE_REFUSED = "TLS_FILE_REFUSED"


class ConfigError(ScgError):
    """A bad pipeline file: ``str`` is ``"<file>:<line>: <field.path>: <detail>"``.

    ``condition`` (a :class:`Condition`) and ``params`` identify the case; the detail
    text is for humans and may change. ``line`` is 0 when there is no line (file missing).
    """

    exit_category = ExitCategory.CONFIG

    def __init__(self, file: str | Path, line: int, field_path: str, condition: Condition,
                 detail: str, /, **params: Any) -> None:
        self.file = str(file)
        self.line = line
        self.field_path = field_path
        self.condition = Condition(condition)
        self.detail = _one_bounded_line(detail)
        self.params = params
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field_path or '(document)'}: {self.detail}"

    def headline(self) -> str:
        """``<file>:<line>: <field.path>: [CONDITION] <detail>`` (editors jump to the line)."""
        return f"{self.file}:{self.line}: {self.field_path or '(document)'}: [{self.condition}] {self.detail}"

    def __reduce__(self) -> tuple[Any, ...]:  # keep condition and params across processes
        return (_rebuild_error, (self.file, self.line, self.field_path, self.condition.value,
                                 self.detail, self.params))

    @property
    def errors(self) -> tuple["ConfigError", ...]:
        """Every problem this error reports: itself (a :class:`ConfigErrors` holds several)."""
        return (self,)


class ConfigErrors(ConfigError):
    """Several problems of one file, raised together: ``errors`` holds each one, in file order
    (by line; problems on one line in the order they were found), never the same problem twice.

    ``file``, ``line``, ``field_path``, ``condition``, ``detail`` and ``params`` are the first
    problem's, so a caller that looks at one error sees the first. ``str`` is one
    ``<file>:<line>: <field.path>: [CONDITION] <detail>`` line per problem; ``headline()`` is the
    first problem's line and how many more there are. Make one with :meth:`of`.
    """

    def __init__(self, errors: Sequence[ConfigError], /) -> None:  # pylint: disable=super-init-not-called
        self._errors = _in_file_order(errors)
        if len(self._errors) < 2:
            raise ValueError("ConfigErrors holds two problems or more; raise a single one as it is")
        first = self._errors[0]
        self.file, self.line, self.field_path = first.file, first.line, first.field_path
        self.condition, self.detail, self.params = first.condition, first.detail, first.params
        Exception.__init__(self, str(self))

    @classmethod
    def of(cls, errors: Sequence[ConfigError]) -> ConfigError:
        """One error for ``errors`` (at least one): the problem itself when there is one, so it
        reads exactly as it always did, else a ConfigErrors."""
        problems = _in_file_order(errors)
        if not problems:
            raise ValueError("no problem to raise")
        return problems[0] if len(problems) == 1 else cls(problems)

    @property
    def errors(self) -> tuple[ConfigError, ...]:
        return self._errors

    def __str__(self) -> str:
        return "\n".join(error.headline() for error in self._errors)

    def headline(self) -> str:
        more = len(self._errors) - 1
        return (f"{self._errors[0].headline()} (and {more} more problem{'s' if more > 1 else ''} "
                "in this file; scg validate FILE lists every one)")

    def __reduce__(self) -> tuple[Any, ...]:
        return (ConfigErrors, (self._errors,))


def _one_bounded_line(detail: str) -> str:
    """``detail`` on one line, its middle left out when longer than :data:`MAX_DETAIL_CHARS`."""
    text = " ".join(detail.splitlines())
    if len(text) <= MAX_DETAIL_CHARS:
        return text
    keep = (MAX_DETAIL_CHARS - 40) // 2
    return f"{text[:keep]} ...({len(text) - 2 * keep} characters left out)... {text[-keep:]}"


def _in_file_order(errors: Sequence[ConfigError]) -> tuple[ConfigError, ...]:
    """Each problem of ``errors`` (a ConfigErrors gives its own) once, sorted by line (stable)."""
    unique: dict[tuple[Any, ...], ConfigError] = {}
    for error in (problem for given in errors for problem in given.errors):
        unique.setdefault((error.file, error.line, error.field_path, str(error.condition), error.detail), error)
    return tuple(sorted(unique.values(), key=lambda error: error.line))


def _rebuild_error(file: str, line: int, field_path: str, condition: str, detail: str,
                   params: dict[str, Any]) -> ConfigError:
    return ConfigError(file, line, field_path, Condition(condition), detail, **params)


@dataclass(frozen=True)
class Node:
    """One YAML value: ``kind`` is "map" (value: dict[str, Node]), "seq" (tuple[Node, ...]) or "scalar"."""

    kind: str
    value: Any
    line: int
    text: str | None = field(default=None, compare=False)  # a scalar's source text

    @property
    def is_null(self) -> bool:
        return self.kind == "scalar" and self.value is None

    def items(self) -> Iterator[tuple[str, "Node"]]:
        return iter(self.value.items()) if self.kind == "map" else iter(())


def child_path(path: str, key: str | int) -> str:
    """``group`` + ``id`` -> ``group.id``; ``topics`` + 1 -> ``topics[1]``; a key with a dot, a
    space, a quote or a character that does not print is quoted (JSON escapes), so a path is one line."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if "." in key or " " in key or '"' in key or "\\" in key or not key or not key.isprintable():
        return f"{path}[{json.dumps(key, ensure_ascii=False)}]"
    return f"{path}.{key}" if path else key


class _LineLoader(BoundedComposer, yaml.SafeLoader):
    """A SafeLoader used only to compose nodes (within the bounds) and construct scalars."""


class _Converter:
    """Walks a composed node graph into :class:`Node` values, checking duplicate keys."""

    def __init__(self, loader: _LineLoader, file: str) -> None:
        self.loader = loader
        self.file = file
        self.count = 0
        self.depth = 0
        self.active: set[int] = set()

    def fail(self, line: int, path: str, condition: Condition, detail: str, **params: Any) -> ConfigError:
        return ConfigError(self.file, line, path, condition, detail, **params)

    def convert(self, node: yaml.Node, line: int, path: str) -> Node:
        self.count += 1
        if self.count > MAX_NODES:
            raise self.fail(line, path, Condition.YAML_LIMIT, f"aliases expand the document to more than "
                            f"{MAX_NODES} nodes", limit="nodes", bound=MAX_NODES)
        if self.depth >= MAX_DEPTH:
            raise self.fail(line, path, Condition.YAML_LIMIT, f"aliases nest the document deeper than "
                            f"{MAX_DEPTH} levels", limit="nesting depth", bound=MAX_DEPTH)
        if id(node) in self.active:
            raise self.fail(line, path, Condition.YAML_SYNTAX, "recursive alias")
        self.active.add(id(node))
        self.depth += 1
        try:
            return self._dispatch(node, line, path)
        finally:
            self.depth -= 1
            self.active.discard(id(node))

    def _dispatch(self, node: yaml.Node, line: int, path: str) -> Node:
        if isinstance(node, yaml.MappingNode):
            self._check_tag(node, MAP_TAG, line, path)
            return Node("map", self._mapping(node, path), line)
        if isinstance(node, yaml.SequenceNode):
            self._check_tag(node, SEQ_TAG, line, path)
            items = tuple(self.convert(item, _line(item), child_path(path, i))
                          for i, item in enumerate(node.value))
            return Node("seq", items, line)
        return Node("scalar", self._scalar(node, line, path), line, text=node.value)

    def _check_tag(self, node: yaml.Node, expected: str, line: int, path: str) -> None:
        if node.tag != expected:
            raise self.fail(line, path, Condition.YAML_SYNTAX, f"unsupported tag {node.tag}", tag=node.tag)

    def _scalar(self, node: yaml.ScalarNode, line: int, path: str) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.fail(line, path, Condition.YAML_SYNTAX, _first_line(exc)) from None
        except (ValueError, OverflowError) as exc:  # a date that does not exist, an int of 5,000 digits
            raise self.fail(line, path, Condition.YAML_SYNTAX, f"cannot read the value: {exc}") from None

    def _mapping(self, node: yaml.MappingNode, path: str) -> dict[str, Node]:
        self._check_duplicates(node, path)
        try:
            self.loader.flatten_mapping(node)  # resolves "<<" merge keys in place
        except yaml.YAMLError as exc:
            raise self.fail(_line(node), path, Condition.YAML_SYNTAX, _first_line(exc)) from None
        result: dict[str, Node] = {}
        for key_node, value_node in node.value:
            key = self._key(key_node, path)
            result[key] = self.convert(value_node, _line(key_node), child_path(path, key))
        return result

    def _key(self, key_node: yaml.Node, path: str) -> str:
        if not isinstance(key_node, yaml.ScalarNode):
            raise self.fail(_line(key_node), path, Condition.YAML_SYNTAX, "mapping keys must be plain scalars")
        return str(key_node.value)

    def _check_duplicates(self, node: yaml.MappingNode, path: str) -> None:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self._key(key_node, path)
            if key in seen:
                raise self.fail(_line(key_node), child_path(path, key), Condition.DUPLICATE_KEY,
                                f"duplicate key {key!r} (first on line {seen[key]})",
                                key=key, first_line=seen[key])
            seen[key] = _line(key_node)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _first_line(exc: BaseException) -> str:
    """PyYAML's "context: problem" on one line (its str() spans several lines with snippets)."""
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    text = ": ".join(str(part).strip() for part in parts if part) or str(exc)
    return " ".join(text.split())


def _syntax_error(file: str, exc: yaml.YAMLError) -> ConfigError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else 1
    return ConfigError(file, line, "", Condition.YAML_SYNTAX, f"invalid YAML: {_first_line(exc)}")


def _unprintable(file: str, text: str, exc: yaml.reader.ReaderError) -> ConfigError:
    """PyYAML's reader refuses a character YAML does not allow (a control character); its error
    has a position but no line."""
    line, column = line_and_column(text, exc.position)
    code = exc.character if isinstance(exc.character, int) else ord(exc.character)
    return ConfigError(file, line, "", Condition.YAML_SYNTAX,
                       f"invalid YAML: character U+{code:04X} at line {line}, column {column} "
                       "is not allowed in a YAML file", line=line, column=column)


def _undecodable(file: str, exc: UndecodableText) -> ConfigError:
    return ConfigError(file, exc.line, "", Condition.YAML_SYNTAX, f"file is not {exc.encoding} text: {exc}",
                       line=exc.line, column=exc.column)


def _over_limit(file: str, exc: LimitExceeded) -> ConfigError:
    return ConfigError(file, exc.line, "", Condition.YAML_LIMIT, exc.what, limit=exc.limit, bound=exc.bound)


def _read(path: Path, file: str) -> bytes:
    try:
        return read_bounded(path)
    except LimitExceeded as exc:
        raise _over_limit(file, exc) from None
    except FileNotFoundError:
        raise ConfigError(file, 0, "", Condition.FILE_NOT_FOUND, "file not found") from None
    except IsADirectoryError:
        raise ConfigError(file, 0, "", Condition.FILE_NOT_FOUND, "is a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(file, 0, "", Condition.FILE_NOT_READABLE,
                          f"cannot read file: {exc.strerror or exc}") from None


def parse_yaml(data: bytes | str, file: str = "<string>") -> Node | None:
    """The single document in ``data`` as a :class:`Node` (None for an empty document); a
    :class:`ConfigError` for anything else, within the bounds of :mod:`~pipelines.config.yaml_limits`."""
    try:
        check_size(data)
        text = decode(data) if isinstance(data, bytes) else data
    except LimitExceeded as exc:
        raise _over_limit(file, exc) from None
    except UndecodableText as exc:
        raise _undecodable(file, exc) from None
    try:
        loader = _LineLoader(text)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow
        raise _unprintable(file, text, exc) from None
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        return _Converter(loader, file).convert(root, _line(root), "")
    except yaml.YAMLError as exc:
        raise _syntax_error(file, exc) from None
    except LimitExceeded as exc:
        raise _over_limit(file, exc) from None
    except RecursionError:  # merge keys (<<) chained through aliases, past what the bounds see
        raise ConfigError(file, 1, "", Condition.YAML_LIMIT, "merge keys (<<) or aliases nest too deep",
                          limit="nesting depth", bound=MAX_DEPTH) from None
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> Node | None:
    """Parse the YAML file at ``path`` (errors name the file as given)."""
    return parse_yaml(_read(Path(path), str(path)), str(path))
