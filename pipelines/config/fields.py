"""Validation primitives shared by the config validators.

Holds the context every check carries (:class:`Ctx`: file name, base directory, env, assignor
lookup, and the problems recorded so far), :class:`Section` (a YAML mapping whose unknown keys
are recorded on opening), the scalar parsers (``as_*``), and the readers for ``${ENV}``/``*_file``
secrets and string->string settings maps.

A parser raises a :class:`~pipelines.config.yaml_nodes.ConfigError` on its first problem; a
validator runs independent checks through :meth:`Ctx.attempt`, which records that problem and
goes on, so one run reports every problem of a file. A check that cannot go on because of a
problem already recorded raises :class:`Abandoned` (it reports nothing more).
"""
from __future__ import annotations

import difflib
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, NoReturn, Sequence, TypeVar

from groupmgr.assignors import get_assignor
from pipelines.config.ranges import Range, duration_text, length_of, range_of
from pipelines.config.yaml_nodes import Condition as C
from pipelines.config.yaml_nodes import ConfigError, ConfigErrors, Node, child_path
from pipelines.config.secrets import (Secret, SecretError, env_secret, file_secret, interpolate,
                               is_secret_key)

_CLIENT_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_DURATION = re.compile(r"(\d+)\s*(ms|s|m|h|d)")
_MAX_DURATION_DIGITS = 30  # more digits is past every range (and past what int() reads by default)
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")  # s3a://..., file:/..., abfss://...
_URL_LIKE = re.compile(r"([^/]*)://")  # anything before the first "://" that holds no slash

AssignorLookup = Callable[[str], str]
T = TypeVar("T")


class Abandoned(Exception):
    """A check stops because of a problem already recorded: it reports nothing more, so one cause
    is reported once. Only :meth:`Ctx.attempt` catches it."""


class Problems:
    """What one validation found so far: each problem once, in the order found, and how many
    checks failed (a check that recorded a problem or was abandoned)."""

    def __init__(self) -> None:
        self.found: list[ConfigError] = []
        self.failures = 0


def default_assignor_lookup(name: str) -> str:
    """The protocol name of the assignor ``name`` resolves to (raises groupmgr AssignorError)."""
    return get_assignor(name).name


@dataclass(frozen=True)
class Ctx:
    """What every check needs: the file for messages, its directory, env, assignor lookup, and
    the problems recorded so far in this validation (each one once)."""

    file: str
    base_dir: Path
    env: Mapping[str, str]
    assignor_lookup: AssignorLookup = default_assignor_lookup
    problems: Problems = field(default_factory=Problems, compare=False, repr=False)

    def fail(self, line: int, path: str, condition: C, detail: str, /, **params: Any) -> NoReturn:
        """Stop the check with this problem."""
        raise ConfigError(self.file, line, path, condition, detail, **params)

    def report(self, line: int, path: str, condition: C, detail: str, /, **params: Any) -> None:
        """Record this problem and go on to the next item (a failure all the same: an enclosing
        :meth:`independent` block is abandoned when it ends)."""
        self.record(ConfigError(self.file, line, path, condition, detail, **params))

    def record(self, error: ConfigError) -> None:
        """Record the problems of ``error`` (one already recorded is not recorded again)."""
        self.problems.failures += 1
        for problem in error.errors:
            if not any(_same(problem, seen) for seen in self.problems.found):
                self.problems.found.append(problem)

    def attempt(self, check: Callable[..., T], /, *args: Any, **kwargs: Any) -> T | None:
        """``check(self, *args, **kwargs)``; when it fails, its problem is recorded and the result
        is None, so the checks of other fields go on. A None result from a check that failed
        always leaves a problem recorded."""
        try:
            return check(self, *args, **kwargs)
        except ConfigError as exc:
            self.record(exc)
        except Abandoned:
            self.problems.failures += 1
        return None

    @contextmanager
    def independent(self) -> Iterator[None]:
        """A block of checks on independent fields (each run through :meth:`attempt`): all of them
        run; leaving the block raises :class:`Abandoned` when one failed or a problem was
        reported inside, so the checks after it, which combine those fields, never see a bad one."""
        before = self.problems.failures
        yield
        if self.problems.failures > before:
            raise Abandoned

    def raise_problems(self) -> None:
        """Raise every problem recorded, in file order, as one ConfigError (if there is any)."""
        if self.problems.found:
            raise ConfigErrors.of(self.problems.found)


def required(ctx: Ctx, sec: "Section", key: str, parse: Callable[..., T], /, *args: Any, hint: str = "") -> T:
    """``parse(ctx, node, path, *args)`` on the required ``key`` of ``sec`` (a check for
    :meth:`Ctx.attempt`, so a missing key is recorded like a bad one)."""
    return parse(ctx, sec.need(key, hint), sec.sub(key), *args)


def _same(one: ConfigError, other: ConfigError) -> bool:
    return (one.line, one.field_path, one.condition, one.detail) == (
        other.line, other.field_path, other.condition, other.detail)


def _describe(node: Node) -> str:
    if node.kind == "map":
        return "a mapping"
    if node.kind == "seq":
        return "a list"
    if node.value is None:
        return "null"
    return f"{type(node.value).__name__} {node.text!r}"


def suggest(word: str, choices: Sequence[str]) -> str | None:
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return matches[0] if matches else None


def wrong_type(ctx: Ctx, node: Node, path: str, expected: str, show: bool = True) -> NoReturn:
    got = _describe(node) if show else node.kind if node.kind != "scalar" else type(node.value).__name__
    ctx.fail(node.line, path, C.WRONG_TYPE, f"expected {expected}, got {got}", expected=expected)


class Section:
    """One YAML mapping under validation: each unknown key is recorded when it is opened (the
    other keys are still read). A required key whose misspelling was recorded as unknown (with
    it as the suggestion) is not reported missing again: :meth:`need` abandons the check."""

    def __init__(self, ctx: Ctx, node: Node, path: str, allowed: Sequence[str]) -> None:
        if node.kind != "map":
            wrong_type(ctx, node, path, "a mapping")
        self.ctx, self.node, self.path = ctx, node, path
        self.misspelt: set[str] = set()
        for key, child in node.items():
            if key not in allowed:
                self._unknown(key, child, allowed)

    def _unknown(self, key: str, child: Node, allowed: Sequence[str]) -> None:
        hint = suggest(key, allowed)
        detail = f"unknown key {key!r}" + (f" (did you mean {hint!r}?)" if hint
                                            else f"; valid keys: {', '.join(allowed)}")
        self.ctx.report(child.line, child_path(self.path, key), C.UNKNOWN_KEY, detail,
                        key=key, suggestion=hint, allowed=tuple(allowed))
        if hint is not None:
            self.misspelt.add(hint)

    @property
    def line(self) -> int:
        return self.node.line

    def sub(self, key: str) -> str:
        return child_path(self.path, key)

    def get(self, key: str) -> Node | None:
        """The node for ``key``, or None when absent or null."""
        node = self.node.value.get(key)
        return None if node is None or node.is_null else node

    def need(self, key: str, hint: str = "") -> Node:
        node = self.node.value.get(key)
        if node is None and key in self.misspelt:
            raise Abandoned  # reported as the unknown key that misspells it
        if node is None or node.is_null:
            line = self.line if node is None else node.line
            self.ctx.fail(line, self.sub(key), C.MISSING_FIELD,
                          f"required field {key!r} is {'missing' if node is None else 'empty'}{hint}", key=key)
        return node

    def section(self, key: str, allowed: Sequence[str]) -> "Section":
        """The nested mapping ``key`` (an empty one, at this mapping's line, when absent)."""
        node = self.get(key) or Node("map", {}, self.line)
        return Section(self.ctx, node, self.sub(key), allowed)

    def line_of(self, *keys: str) -> tuple[int, str]:
        """Line and path of the first present key (for cross-field errors)."""
        for key in keys:
            if self.get(key) is not None:
                return self.get(key).line, self.sub(key)
        return self.line, self.sub(keys[0])


# ---------------------------------------------------------------- scalar parsers

def as_str(ctx: Ctx, node: Node, path: str) -> str:
    """A non-blank string, within the length range of the field at ``path``
    (:func:`pipelines.config.ranges.length_of`)."""
    if node.kind != "scalar" or not isinstance(node.value, str):
        wrong_type(ctx, node, path, "a string")
    if not node.value.strip():
        ctx.fail(node.line, path, C.BAD_VALUE, "must not be empty")
    _check_length(ctx, node, path, node.value)
    return node.value


def _check_length(ctx: Ctx, node: Node, path: str, text: str) -> None:
    bound = length_of(path)
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if bound is not None and size > bound.high:
        ctx.fail(node.line, path, C.OUT_OF_RANGE, f"is {size} bytes long; at most {bound.high} ({bound.why})",
                 value=text, bound=bound.high)


def as_env_str(ctx: Ctx, node: Node, path: str) -> str:
    """A string in which ``${NAME}`` references are replaced from the environment."""
    text = as_str(ctx, node, path)
    try:
        text = interpolate(text, ctx.env)
    except SecretError as exc:
        _secret_failure(ctx, node.line, path, exc)
    if not text.strip():
        ctx.fail(node.line, path, C.BAD_VALUE, "is empty after ${ENV} substitution")
    _check_length(ctx, node, path, text)
    return text


def as_text(ctx: Ctx, node: Node, path: str) -> str:
    """Any non-null scalar as its source text (for string->string settings maps)."""
    if node.kind != "scalar" or node.value is None:
        wrong_type(ctx, node, path, "a string")
    return node.value if isinstance(node.value, str) else str(node.text)


def as_bool(ctx: Ctx, node: Node, path: str) -> bool:
    if node.kind != "scalar" or not isinstance(node.value, bool):
        wrong_type(ctx, node, path, "true or false")
    return node.value


def as_positive_int(ctx: Ctx, node: Node, path: str) -> int:
    """A positive integer within the range of the field at ``path`` (:func:`~pipelines.config.ranges.range_of`)."""
    value = node.value
    if node.kind != "scalar" or isinstance(value, bool) or not isinstance(value, int):
        wrong_type(ctx, node, path, "a positive integer")
    if value <= 0:
        ctx.fail(node.line, path, C.BAD_VALUE, f"must be a positive integer, got {value}", value=value)
    bound = range_of(path)
    if not bound.holds(value):
        ctx.fail(node.line, path, C.OUT_OF_RANGE, f"{node.text} is more than {bound.high} ({bound.why})",
                 value=value, bound=bound.high)
    return value


def as_duration_ms(ctx: Ctx, node: Node, path: str) -> int:
    """"500ms", "10s", "5m", "1h", "1d" -> milliseconds (> 0), within the range of the field at
    ``path`` (:func:`~pipelines.config.ranges.range_of`)."""
    if node.kind != "scalar":
        wrong_type(ctx, node, path, "a duration such as 10s")
    text = str(node.text)
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        ctx.fail(node.line, path, C.BAD_DURATION,
                 f"bad duration {text!r}; write a number with a unit: 500ms, 10s, 5m, 1h, 1d", value=text)
    bound = range_of(path)
    digits = match.group(1).lstrip("0") or "0"
    ms = int(digits) * _UNIT_MS[match.group(2)] if len(digits) <= _MAX_DURATION_DIGITS else bound.high + 1
    if ms <= 0:
        ctx.fail(node.line, path, C.BAD_DURATION, f"duration must be positive, got {text!r}", value=text)
    if not bound.holds(ms):
        _duration_out_of_range(ctx, node, path, text, bound)
    return ms


def _duration_out_of_range(ctx: Ctx, node: Node, path: str, text: str, bound: Range) -> NoReturn:
    ctx.fail(node.line, path, C.OUT_OF_RANGE,
             f"{text.strip()} is more than {duration_text(bound.high)} ({bound.why})",
             value=text, bound=bound.high)


def as_enum(ctx: Ctx, node: Node, path: str, choices: Sequence[str]) -> str:
    """One of ``choices``, matched case-insensitively and returned in canonical spelling."""
    text = as_str(ctx, node, path)
    for choice in choices:
        if text.strip().lower() == choice.lower():
            return choice
    hint = suggest(text.upper() if choices[0].isupper() else text.lower(), choices)
    detail = f"{text!r} is not one of {', '.join(choices)}" + (f" (did you mean {hint!r}?)" if hint else "")
    ctx.fail(node.line, path, C.BAD_ENUM, detail, value=text, choices=tuple(choices), suggestion=hint)


def as_list(ctx: Ctx, node: Node, path: str, what: str) -> tuple[Node, ...]:
    if node.kind != "seq":
        wrong_type(ctx, node, path, f"a list of {what}")
    return node.value


def as_location(ctx: Ctx, node: Node, path: str) -> str:
    """A path or URI; local relative paths resolve against the YAML file's directory. Text that
    starts like a URL (``<scheme>://``) must have a valid scheme (RFC 3986: a letter, then letters,
    digits, ``+``, ``-``, ``.``): ``ht!tp://x`` is refused, never taken as a local path."""
    text = as_str(ctx, node, path).strip()
    url_like = _URL_LIKE.match(text)
    if url_like and not _URI.fullmatch(url_like.group(1) + ":"):
        ctx.fail(node.line, path, C.BAD_VALUE,
                 f"{url_like.group(1)!r} is not a URL scheme (a letter, then letters, digits, '+', '-', '.'); "
                 "write a URL such as s3a://bucket/path or a local path", value=text, scheme=url_like.group(1))
    return resolve_location(ctx.base_dir, text)


def resolve_location(base_dir: Path, text: str) -> str:
    if _URI.match(text) and not re.match(r"[A-Za-z]:[\\/]", text):
        return text
    path = Path(text).expanduser()
    return os.path.normpath(path if path.is_absolute() else base_dir / path)


def unique(ctx: Ctx, items: Sequence[tuple[Node, str]], path: str, what: str) -> None:
    seen: set[str] = set()
    for index, (node, value) in enumerate(items):
        if value.lower() in seen:
            ctx.fail(node.line, child_path(path, index), C.BAD_VALUE, f"duplicate {what} {value!r}", value=value)
        seen.add(value.lower())


# ---------------------------------------------------------------- secrets and settings maps

def _secret_failure(ctx: Ctx, line: int, path: str, exc: SecretError) -> NoReturn:
    ctx.fail(line, path, C(exc.condition), exc.detail, **exc.params)


def read_secret(ctx: Ctx, sec: Section, key: str, required: bool) -> Secret | None:
    """``key: ${ENV}`` or ``key_file: /path`` (never an inline literal; never echoed in errors)."""
    inline, from_file = sec.get(key), sec.get(f"{key}_file")
    if inline is not None and from_file is not None:
        ctx.fail(from_file.line, sec.sub(f"{key}_file"), C.CONFLICTING_FIELDS,
                 f"give either {key} or {key}_file, not both", fields=(key, f"{key}_file"))
    try:
        if inline is not None:
            if inline.kind != "scalar" or not isinstance(inline.value, str):
                wrong_type(ctx, inline, sec.sub(key), "a ${ENV_VAR} reference", show=False)
            return env_secret(inline.value, ctx.env, key)
        if from_file is not None:
            return file_secret(Path(as_location(ctx, from_file, sec.sub(f"{key}_file"))))
    except SecretError as exc:
        node, path = (inline, sec.sub(key)) if inline is not None else (from_file, sec.sub(f"{key}_file"))
        _secret_failure(ctx, node.line, path, exc)
    if required:
        sec.need(key, hint=f" (give {key}: ${{ENV_VAR}} or {key}_file: /path)")
    return None


def settings_map(ctx: Ctx, node: Node | None, path: str) -> Mapping[str, str | Secret]:
    """A string->string map; values of secret-looking keys must be ``${ENV}`` and become Secrets."""
    if node is None:
        return MappingProxyType({})
    if node.kind != "map":
        wrong_type(ctx, node, path, "a mapping of setting -> value")
    result: dict[str, str | Secret] = {}
    with ctx.independent():  # every bad entry is reported
        for key, value in node.items():
            result[key] = ctx.attempt(_setting, key, value, child_path(path, key))
    return MappingProxyType(result)


def _setting(ctx: Ctx, key: str, node: Node, path: str) -> str | Secret:
    if not _CLIENT_KEY.fullmatch(key):
        ctx.fail(node.line, path, C.BAD_VALUE, f"bad setting name {key!r}", key=key)
    return _setting_value(ctx, key, node, path)


def _setting_value(ctx: Ctx, key: str, node: Node, path: str) -> str | Secret:
    if not is_secret_key(key):
        return as_text(ctx, node, path)
    if node.kind != "scalar" or not isinstance(node.value, str):
        wrong_type(ctx, node, path, "a ${ENV_VAR} reference", show=False)
    try:
        return env_secret(node.value, ctx.env, key, file_option=False)
    except SecretError as exc:
        _secret_failure(ctx, node.line, path, exc)
