"""Validator: line-numbered YAML nodes -> frozen :class:`~pipelines.config.PipelineConfig`.

Pure apart from three lookups it is given or makes on purpose: ``${NAME}`` references
(from the ``env`` mapping passed in), ``*_file`` secrets (read from disk) and assignor
names (``groupmgr.assignors.get_assignor``, which may import a plug-in module).

Rules: every mapping rejects unknown keys first (with a did-you-mean suggestion), then
fields are read in document order of the schema. The first problem raises a
:class:`ConfigError`; a missing field reports the line of its parent mapping (the line of
the key that opens it, e.g. ``group:``; the first key's line for the top level), anything
else the line of the offending key or list item. Explicit ``null`` means "not given".
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
from groupmgr.assignors.errors import AssignorError, UnknownAssignorError
from pipelines.config import (KAFKA_COORDINATE_COLUMNS, FormatConfig, GroupConfig, KafkaConfig,
                              PipelineConfig, SchemaField, SecurityConfig, SinkConfig, SourceConfig,
                              TriggerConfig)
from pipelines.config_loader import Condition as C
from pipelines.config_loader import ConfigError, Node, child_path
from pipelines.secrets import (Secret, SecretError, env_secret, file_secret, interpolate,
                               is_secret_key)

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")
_CLIENT_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_DURATION = re.compile(r"(\d+)\s*(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")  # s3a://..., file:/..., abfss://...
_INPUT_VIEW = re.compile(r"\binput\b", re.IGNORECASE)
_SIMPLE_TYPES = {
    "string": "string", "bigint": "bigint", "long": "bigint", "int": "int", "integer": "int",
    "double": "double", "float": "float", "boolean": "boolean", "timestamp": "timestamp",
    "date": "date", "binary": "binary",
}
_DECIMAL = re.compile(r"decimal(?:\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?", re.IGNORECASE)
_DDL_FIELD = re.compile(r"\s*(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)\s+(.+?)\s*", re.DOTALL)

TOP_KEYS = ("name", "kafka", "topics", "topic_pattern", "group", "source", "format", "transform",
            "sink", "trigger", "checkpoint_root", "spark")
KAFKA_KEYS = ("bootstrap_servers", "security", "client_config")
SECURITY_KEYS = ("protocol", "sasl_mechanism", "sasl_username", "sasl_password", "sasl_password_file",
                 "ssl_ca_location", "ssl_certificate_location", "ssl_key_location",
                 "ssl_key_password", "ssl_key_password_file")
GROUP_KEYS = ("id", "assignor", "instance_id", "session_timeout", "heartbeat_interval",
              "rebalance_timeout")
SOURCE_KEYS = ("starting_offsets", "max_offsets_per_trigger", "min_offsets_per_trigger",
               "max_trigger_delay", "fail_on_data_loss")
FORMAT_KEYS = ("type", "schema", "max_value_bytes")
SINK_KEYS = ("path", "partition_by", "dead_letter_path")
TRIGGER_KEYS = ("processing_time", "available_now")

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
STARTING_OFFSETS = ("earliest", "latest", "error")
FORMAT_TYPES = ("json", "raw")
# client_config keys that a first-class field (or the framework itself) sets.
RESERVED_CLIENT_KEYS = {
    "bootstrap.servers": "kafka.bootstrap_servers", "metadata.broker.list": "kafka.bootstrap_servers",
    "security.protocol": "kafka.security.protocol", "sasl.mechanism": "kafka.security.sasl_mechanism",
    "sasl.mechanisms": "kafka.security.sasl_mechanism", "sasl.username": "kafka.security.sasl_username",
    "sasl.password": "kafka.security.sasl_password", "ssl.ca.location": "kafka.security.ssl_ca_location",
    "ssl.certificate.location": "kafka.security.ssl_certificate_location",
    "ssl.key.location": "kafka.security.ssl_key_location",
    "ssl.key.password": "kafka.security.ssl_key_password",
    "group.id": "group.id", "group.instance.id": "group.instance_id",
    "session.timeout.ms": "group.session_timeout", "heartbeat.interval.ms": "group.heartbeat_interval",
    "max.poll.interval.ms": "group.rebalance_timeout", "partition.assignment.strategy": "group.assignor",
    "auto.offset.reset": "source.starting_offsets", "enable.auto.commit": "the framework",
    "key.deserializer": "the framework", "value.deserializer": "the framework",
}

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


def _suggest(word: str, choices: Sequence[str]) -> str | None:
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
        hint = _suggest(key, allowed)
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
    hint = _suggest(text.upper() if choices[0].isupper() else text.lower(), choices)
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


def _unique(ctx: Ctx, items: Sequence[tuple[Node, str]], path: str, what: str) -> None:
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


# ---------------------------------------------------------------- sections

def validate_pipeline(root: Node | None, file: str, source_file: Path, env: Mapping[str, str],
                      assignor_lookup: AssignorLookup = default_assignor_lookup) -> PipelineConfig:
    """Validate a loaded document; ``file`` names it in errors, relative paths resolve next to it."""
    ctx = Ctx(file, source_file.parent, env, assignor_lookup)
    if root is None:
        ctx.fail(1, "", C.WRONG_TYPE, "file is empty; expected a mapping (name, kafka, topics, group, format, sink)")
    top = Section(ctx, root, "", TOP_KEYS)
    name = _name(ctx, top)
    kafka = _kafka(ctx, top)
    topics, pattern = _subscription(ctx, top)
    top.need("group")
    group = _group(ctx, top.section("group", GROUP_KEYS))
    source = _source(ctx, top.section("source", SOURCE_KEYS))
    fmt = _format(ctx, top)
    transform = _transform(ctx, top)
    sink = _sink(ctx, top, fmt, transform)
    trigger = _trigger(ctx, top.section("trigger", TRIGGER_KEYS))
    checkpoint_root = _checkpoint_root(ctx, top, sink)
    spark = settings_map(ctx, top.get("spark"), "spark")
    return PipelineConfig(name=name, kafka=kafka, topics=topics, topic_pattern=pattern, group=group,
                          source=source, format=fmt, transform=transform, sink=sink, trigger=trigger,
                          checkpoint_root=checkpoint_root, spark=spark, source_file=source_file)


def _name(ctx: Ctx, top: Section) -> str:
    node = top.need("name")
    name = as_str(ctx, node, "name")
    if not _NAME.fullmatch(name):
        ctx.fail(node.line, "name", C.BAD_VALUE, f"name {name!r} may only use letters, digits, '_', '.', '-'",
                 value=name)
    return name


def _kafka(ctx: Ctx, top: Section) -> KafkaConfig:
    top.need("kafka")
    sec = top.section("kafka", KAFKA_KEYS)
    servers = _bootstrap(ctx, sec.need("bootstrap_servers"), sec.sub("bootstrap_servers"))
    security = _security(ctx, sec.section("security", SECURITY_KEYS)) if sec.get("security") else SecurityConfig()
    _check_client_config(ctx, sec.get("client_config"), sec.sub("client_config"), security)
    client_config = settings_map(ctx, sec.get("client_config"), sec.sub("client_config"))
    return KafkaConfig(bootstrap_servers=servers, security=security, client_config=client_config)


def _bootstrap(ctx: Ctx, node: Node, path: str) -> tuple[str, ...]:
    if node.kind == "seq":
        items = [(item, child_path(path, i), as_env_str(ctx, item, child_path(path, i)).strip())
                 for i, item in enumerate(node.value)]
    else:
        items = [(node, path, part.strip()) for part in as_env_str(ctx, node, path).split(",")]
    if not items:
        ctx.fail(node.line, path, C.BAD_VALUE, "needs at least one host:port")
    for item, item_path, server in items:
        match = _HOST_PORT.fullmatch(server)
        if match is None or not 0 < int(match.group(2)) < 65536:
            ctx.fail(item.line, item_path, C.BAD_VALUE, f"{server!r} is not host:port", value=server)
    return tuple(server for _, _, server in items)


def _security(ctx: Ctx, sec: Section) -> SecurityConfig:
    protocol = as_enum(ctx, sec.need("protocol"), sec.sub("protocol"), PROTOCOLS)
    sasl = _sasl(ctx, sec) if protocol.startswith("SASL_") else _forbid(ctx, sec, "sasl_", protocol)
    ssl = _ssl(ctx, sec) if protocol.endswith("SSL") else _forbid(ctx, sec, "ssl_", protocol)
    return SecurityConfig(protocol=protocol, **sasl, **ssl)


def _forbid(ctx: Ctx, sec: Section, prefix: str, protocol: str) -> dict[str, Any]:
    for key, node in sec.node.items():
        if key.startswith(prefix) and not node.is_null:
            ctx.fail(node.line, sec.sub(key), C.CONFLICTING_FIELDS,
                     f"{key} has no effect with protocol {protocol}", fields=(key, "protocol"))
    return {}


def _sasl(ctx: Ctx, sec: Section) -> dict[str, Any]:
    mechanism = as_enum(ctx, sec.need("sasl_mechanism"), sec.sub("sasl_mechanism"), SASL_MECHANISMS)
    username = as_env_str(ctx, sec.need("sasl_username"), sec.sub("sasl_username"))
    password = read_secret(ctx, sec, "sasl_password", required=True)
    return {"sasl_mechanism": mechanism, "sasl_username": username, "sasl_password": password}


def _ssl(ctx: Ctx, sec: Section) -> dict[str, Any]:
    paths = {key: as_location(ctx, sec.get(key), sec.sub(key)) if sec.get(key) else None
             for key in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")}
    if (paths["ssl_certificate_location"] is None) != (paths["ssl_key_location"] is None):
        line, path = sec.line_of("ssl_certificate_location", "ssl_key_location")
        ctx.fail(line, path, C.CONFLICTING_FIELDS,
                 "ssl_certificate_location and ssl_key_location must be given together",
                 fields=("ssl_certificate_location", "ssl_key_location"))
    key_password = read_secret(ctx, sec, "ssl_key_password", required=False)
    if key_password is not None and paths["ssl_key_location"] is None:
        line, path = sec.line_of("ssl_key_password", "ssl_key_password_file")
        ctx.fail(line, path, C.CONFLICTING_FIELDS, "ssl_key_password needs ssl_key_location",
                 fields=("ssl_key_password", "ssl_key_location"))
    return {**paths, "ssl_key_password": key_password}


def _check_client_config(ctx: Ctx, node: Node | None, path: str, security: SecurityConfig) -> None:
    for key, value in node.items() if node is not None else ():
        owner = RESERVED_CLIENT_KEYS.get(key)
        if owner is None and key == "sasl.jaas.config" and security.uses_sasl:
            owner = "kafka.security (the JAAS config is built from it)"
        if owner is not None:
            ctx.fail(value.line, child_path(path, key), C.CONFLICTING_FIELDS,
                     f"{key!r} is set by {owner}; remove it from client_config", key=key, owner=owner)


def _subscription(ctx: Ctx, top: Section) -> tuple[tuple[str, ...], str | None]:
    topics_node, pattern_node = top.get("topics"), top.get("topic_pattern")
    if topics_node is not None and pattern_node is not None:
        ctx.fail(pattern_node.line, "topic_pattern", C.CONFLICTING_FIELDS,
                 "give either topics or topic_pattern, not both", fields=("topics", "topic_pattern"))
    if pattern_node is not None:
        return (), _pattern(ctx, pattern_node)
    if topics_node is None:
        top.need("topics", hint=" (give topics: [name, ...] or topic_pattern: regex)")
    return _topics(ctx, topics_node), None


def _topics(ctx: Ctx, node: Node) -> tuple[str, ...]:
    items = as_list(ctx, node, "topics", "topic names")
    if not items:
        ctx.fail(node.line, "topics", C.BAD_VALUE, "needs at least one topic")
    names = [(item, as_str(ctx, item, f"topics[{i}]")) for i, item in enumerate(items)]
    for i, (item, name) in enumerate(names):
        if not _TOPIC.fullmatch(name) or name in (".", ".."):
            ctx.fail(item.line, f"topics[{i}]", C.BAD_VALUE,
                     f"{name!r} is not a legal Kafka topic name ([A-Za-z0-9._-], at most 249)", value=name)
    _unique(ctx, names, "topics", "topic")
    return tuple(name for _, name in names)


def _pattern(ctx: Ctx, node: Node) -> str:
    pattern = as_str(ctx, node, "topic_pattern")
    try:
        re.compile(pattern)
    except re.error as exc:
        ctx.fail(node.line, "topic_pattern", C.BAD_REGEX, f"bad regex {pattern!r}: {exc}", value=pattern)
    return pattern


def _group(ctx: Ctx, sec: Section) -> GroupConfig:
    group_id = as_str(ctx, sec.need("id"), sec.sub("id"))
    assignors = _assignors(ctx, sec.get("assignor"), sec.sub("assignor"))
    instance = sec.get("instance_id")
    timing = {f"{key}_ms": as_duration_ms(ctx, sec.get(key), sec.sub(key))
              for key in ("session_timeout", "heartbeat_interval", "rebalance_timeout") if sec.get(key)}
    config = GroupConfig(id=group_id, assignors=assignors, **timing,
                         instance_id=as_env_str(ctx, instance, sec.sub("instance_id")) if instance else None)
    if config.heartbeat_interval_ms >= config.session_timeout_ms:
        line, path = sec.line_of("heartbeat_interval", "session_timeout")
        ctx.fail(line, path, C.CONFLICTING_FIELDS,
                 f"heartbeat_interval ({config.heartbeat_interval_ms}ms) must be below session_timeout "
                 f"({config.session_timeout_ms}ms); Kafka advises at most a third",
                 fields=("heartbeat_interval", "session_timeout"))
    return config


def _assignors(ctx: Ctx, node: Node | None, path: str) -> tuple[str, ...]:
    if node is None:
        return GroupConfig.assignors
    items = [(node, path)] if node.kind == "scalar" else [
        (item, child_path(path, i)) for i, item in enumerate(as_list(ctx, node, path, "assignor names"))]
    if not items:
        ctx.fail(node.line, path, C.BAD_VALUE, "needs at least one assignor")
    names = [(item, as_str(ctx, item, item_path).strip()) for item, item_path in items]
    protocols = [(item, _lookup_assignor(ctx, name, item.line, item_path))
                 for (item, name), (_, item_path) in zip(names, items)]
    if node.kind == "seq":
        _unique(ctx, protocols, path, "assignor protocol name")
    return tuple(name for _, name in names)


def _lookup_assignor(ctx: Ctx, name: str, line: int, path: str) -> str:
    try:
        return ctx.assignor_lookup(name)
    except UnknownAssignorError as exc:
        hint = _suggest(name, exc.available)
        ctx.fail(line, path, C.UNKNOWN_ASSIGNOR,
                 f"unknown assignor {name!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                 + f"; available: {', '.join(exc.available)} or 'package.module:Class'",
                 name=name, available=exc.available, suggestion=hint)
    except AssignorError as exc:
        ctx.fail(line, path, C.ASSIGNOR_IMPORT_FAILED, str(exc).split("] ", 1)[-1], name=name)


def _source(ctx: Ctx, sec: Section) -> SourceConfig:
    get = sec.get
    starting = as_enum(ctx, get("starting_offsets"), sec.sub("starting_offsets"), STARTING_OFFSETS) \
        if get("starting_offsets") else "earliest"
    limits = {key: as_positive_int(ctx, get(key), sec.sub(key)) if get(key) else None
              for key in ("max_offsets_per_trigger", "min_offsets_per_trigger")}
    delay = as_duration_ms(ctx, get("max_trigger_delay"), sec.sub("max_trigger_delay")) \
        if get("max_trigger_delay") else None
    _check_limits(ctx, sec, limits, delay)
    if delay is None and limits["min_offsets_per_trigger"] is not None:
        delay = 15 * 60_000  # Spark's default, made explicit
    fail_on_loss = as_bool(ctx, get("fail_on_data_loss"), sec.sub("fail_on_data_loss")) \
        if get("fail_on_data_loss") is not None else True
    return SourceConfig(starting_offsets=starting, max_trigger_delay_ms=delay,
                        fail_on_data_loss=fail_on_loss, **limits)


def _check_limits(ctx: Ctx, sec: Section, limits: Mapping[str, int | None], delay: int | None) -> None:
    low, high = limits["min_offsets_per_trigger"], limits["max_offsets_per_trigger"]
    if delay is not None and low is None:
        ctx.fail(sec.get("max_trigger_delay").line, sec.sub("max_trigger_delay"), C.CONFLICTING_FIELDS,
                 "max_trigger_delay only applies with min_offsets_per_trigger",
                 fields=("max_trigger_delay", "min_offsets_per_trigger"))
    if low is not None and high is not None and low > high:
        ctx.fail(sec.get("min_offsets_per_trigger").line, sec.sub("min_offsets_per_trigger"),
                 C.CONFLICTING_FIELDS, f"min_offsets_per_trigger ({low}) exceeds max_offsets_per_trigger ({high})",
                 fields=("min_offsets_per_trigger", "max_offsets_per_trigger"))


def _format(ctx: Ctx, top: Section) -> FormatConfig:
    top.need("format", hint=" (json needs format.schema; use format: {type: raw} for raw bytes)")
    sec = top.section("format", FORMAT_KEYS)
    kind = as_enum(ctx, sec.get("type"), sec.sub("type"), FORMAT_TYPES) if sec.get("type") else "json"
    limit_node = sec.get("max_value_bytes")
    limit = (as_positive_int(ctx, limit_node, sec.sub("max_value_bytes")) if limit_node is not None
             else FormatConfig.max_value_bytes)
    if kind == "raw":
        if sec.get("schema") is not None:
            ctx.fail(sec.get("schema").line, sec.sub("schema"), C.CONFLICTING_FIELDS,
                     "format type raw takes no schema", fields=("type", "schema"))
        return FormatConfig(type="raw", max_value_bytes=limit)
    schema_node = sec.need("schema", hint=" (format type json needs a schema)")
    return FormatConfig(type="json", schema=parse_schema(ctx, schema_node, sec.sub("schema")),
                        max_value_bytes=limit)


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


def _transform(ctx: Ctx, top: Section) -> str | None:
    node = top.get("transform")
    if node is None:
        return None
    sql = as_str(ctx, node, "transform")
    if not _INPUT_VIEW.search(sql):
        ctx.fail(node.line, "transform", C.TRANSFORM_WITHOUT_INPUT,
                 "transform SQL must read from the view named `input`")
    return sql.strip()


def _sink(ctx: Ctx, top: Section, fmt: FormatConfig, transform: str | None) -> SinkConfig:
    top.need("sink")
    sec = top.section("sink", SINK_KEYS)
    path = as_location(ctx, sec.need("path"), sec.sub("path")).rstrip("/") or "/"
    dead = as_location(ctx, sec.get("dead_letter_path"), sec.sub("dead_letter_path")) \
        if sec.get("dead_letter_path") else f"{path}_dead_letters"
    if _same_or_inside(dead, path) or _same_or_inside(path, dead):
        ctx.fail(*sec.line_of("dead_letter_path"), C.CONFLICTING_FIELDS,
                 "dead_letter_path must be outside sink.path (and not contain it)", fields=("path", "dead_letter_path"))
    columns = _partition_by(ctx, sec, fmt, transform)
    return SinkConfig(path=path, dead_letter_path=dead.rstrip("/"), partition_by=columns)


def _partition_by(ctx: Ctx, sec: Section, fmt: FormatConfig, transform: str | None) -> tuple[str, ...]:
    node = sec.get("partition_by")
    if node is None:
        return ()
    path = sec.sub("partition_by")
    items = [(item, as_str(ctx, item, child_path(path, i))) for i, item in
             enumerate(as_list(ctx, node, path, "column names"))]
    _unique(ctx, items, path, "column")
    allowed = fmt.field_names + KAFKA_COORDINATE_COLUMNS
    for index, (item, column) in enumerate(items):
        # A transform may derive new columns; those are checked against its output when the query starts.
        if transform is None and column not in allowed:
            ctx.fail(item.line, child_path(path, index), C.BAD_PARTITION_COLUMN,
                     f"{column!r} is not a column; choose from {', '.join(allowed)}",
                     column=column, allowed=allowed)
    return tuple(column for _, column in items)


def _same_or_inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def _trigger(ctx: Ctx, sec: Section) -> TriggerConfig:
    available_now = as_bool(ctx, sec.get("available_now"), sec.sub("available_now")) \
        if sec.get("available_now") else False
    interval = sec.get("processing_time")
    if available_now and interval is not None:
        ctx.fail(sec.get("available_now").line, sec.sub("available_now"), C.CONFLICTING_FIELDS,
                 "give either processing_time or available_now: true, not both",
                 fields=("processing_time", "available_now"))
    if available_now:
        return TriggerConfig(processing_time_ms=None, available_now=True)
    ms = as_duration_ms(ctx, interval, sec.sub("processing_time")) if interval else TriggerConfig.processing_time_ms
    return TriggerConfig(processing_time_ms=ms)


def _checkpoint_root(ctx: Ctx, top: Section, sink: SinkConfig) -> str:
    node = top.get("checkpoint_root")
    if node is None:
        return f"{sink.path}_checkpoints"
    root = as_location(ctx, node, "checkpoint_root").rstrip("/") or "/"
    for table in (sink.path, sink.dead_letter_path):
        if _same_or_inside(root, table) or _same_or_inside(table, root):
            ctx.fail(node.line, "checkpoint_root", C.CONFLICTING_FIELDS,
                     f"checkpoint_root must be outside the table {table} (and not contain it)",
                     fields=("checkpoint_root", "sink.path"))
    return root
