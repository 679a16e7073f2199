"""Validation primitives shared by the config validators.

Holds the context every check carries (:class:`Ctx`: file name, base directory, env, assignor
lookup), :class:`Section` (a YAML mapping whose unknown keys are rejected on opening), the
scalar parsers (``as_*``), and the readers for ``${ENV}``/``*_file`` secrets and string->string
settings maps. Each raises a :class:`~pipelines.config.yaml_nodes.ConfigError` on the first problem.
"""
from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, NoReturn, Sequence

from groupmgr.assignors import get_assignor
from pipelines.config.yaml_nodes import Condition as C
from pipelines.config.yaml_nodes import ConfigError, Node, child_path
from pipelines.config.secrets import (Secret, SecretError, env_secret, file_secret, interpolate,
                               is_secret_key)

_CLIENT_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_DURATION = re.compile(r"(\d+)\s*(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")  # s3a://..., file:/..., abfss://...

AssignorLookup = Callable[[str], str]


def default_assignor_lookup(name: str) -> str:
    """The protocol name of the assignor ``name`` resolves to (raises groupmgr AssignorError)."""
    return get_assignor(name).name


@dataclass(frozen=True)
class Ctx:
    """What every check needs: the file for messages, its directory, env, assignor lookup."""

    file: str
    base_dir: Path
    env: Mapping[str, str]
    assignor_lookup: AssignorLookup = default_assignor_lookup

    def fail(self, line: int, path: str, condition: C, detail: str, /, **params: Any) -> NoReturn:
        raise ConfigError(self.file, line, path, condition, detail, **params)


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
    """One YAML mapping under validation: unknown keys are rejected when it is opened."""

    def __init__(self, ctx: Ctx, node: Node, path: str, allowed: Sequence[str]) -> None:
        if node.kind != "map":
            wrong_type(ctx, node, path, "a mapping")
        self.ctx, self.node, self.path = ctx, node, path
        for key, child in node.items():
            if key not in allowed:
                self._unknown(key, child, allowed)

    def _unknown(self, key: str, child: Node, allowed: Sequence[str]) -> NoReturn:
        hint = suggest(key, allowed)
        detail = f"unknown key {key!r}" + (f" (did you mean {hint!r}?)" if hint
                                            else f"; valid keys: {', '.join(allowed)}")
        self.ctx.fail(child.line, child_path(self.path, key), C.UNKNOWN_KEY, detail,
                      key=key, suggestion=hint, allowed=tuple(allowed))

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
    if node.kind != "scalar" or not isinstance(node.value, str):
        wrong_type(ctx, node, path, "a string")
    if not node.value.strip():
        ctx.fail(node.line, path, C.BAD_VALUE, "must not be empty")
    return node.value


def as_env_str(ctx: Ctx, node: Node, path: str) -> str:
    """A string in which ``${NAME}`` references are replaced from the environment."""
    text = as_str(ctx, node, path)
    try:
        text = interpolate(text, ctx.env)
    except SecretError as exc:
        _secret_failure(ctx, node.line, path, exc)
    if not text.strip():
        ctx.fail(node.line, path, C.BAD_VALUE, "is empty after ${ENV} substitution")
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
    value = node.value
    if node.kind != "scalar" or isinstance(value, bool) or not isinstance(value, int):
        wrong_type(ctx, node, path, "a positive integer")
    if value <= 0:
        ctx.fail(node.line, path, C.BAD_VALUE, f"must be a positive integer, got {value}", value=value)
    return value


def as_duration_ms(ctx: Ctx, node: Node, path: str) -> int:
    """"500ms", "10s", "5m", "1h", "1d" -> milliseconds (> 0)."""
    if node.kind != "scalar":
        wrong_type(ctx, node, path, "a duration such as 10s")
    text = str(node.text)
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        ctx.fail(node.line, path, C.BAD_DURATION,
                 f"bad duration {text!r}; write a number with a unit: 500ms, 10s, 5m, 1h, 1d", value=text)
    ms = int(match.group(1)) * _UNIT_MS[match.group(2)]
    if ms <= 0:
        ctx.fail(node.line, path, C.BAD_DURATION, f"duration must be positive, got {text!r}", value=text)
    return ms


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
    """A path or URI; local relative paths resolve against the YAML file's directory."""
    return resolve_location(ctx.base_dir, as_str(ctx, node, path).strip())


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
    for key, value in node.items():
        key_path = child_path(path, key)
        if not _CLIENT_KEY.fullmatch(key):
            ctx.fail(value.line, key_path, C.BAD_VALUE, f"bad setting name {key!r}", key=key)
        result[key] = _setting_value(ctx, key, value, key_path)
    return MappingProxyType(result)


def _setting_value(ctx: Ctx, key: str, node: Node, path: str) -> str | Secret:
    if not is_secret_key(key):
        return as_text(ctx, node, path)
    if node.kind != "scalar" or not isinstance(node.value, str):
        wrong_type(ctx, node, path, "a ${ENV_VAR} reference", show=False)
    try:
        return env_secret(node.value, ctx.env, key, file_option=False)
    except SecretError as exc:
        _secret_failure(ctx, node.line, path, exc)
