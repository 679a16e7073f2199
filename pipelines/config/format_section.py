"""The ``format`` section: how record values are decoded (json with a schema, raw, or Avro or
Protobuf with a schema registry) → :class:`~pipelines.config.model.FormatConfig`.

A reader schema given as a file is read and checked here (an Avro record, or a ``.proto`` protoc
compiles holding the message, whose every field has a column type); one taken from the registry
is fetched when the member starts.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from pipelines.config.fields import (Ctx, Section, as_enum, as_env_str, as_location, as_positive_int, as_str,
                                     read_secret)
from pipelines.config.model import FormatConfig, KeyFormatConfig, SchemaField, SchemaRegistryConfig
from pipelines.config.schema import parse_schema
from pipelines.config.yaml_nodes import Condition as C
from pipelines.runtime.avro_types import UnsupportedAvroType, record_schema
from pipelines.runtime.protobuf_types import ProtobufFormat, UnsupportedProtobufType

FORMAT_KEYS = ("type", "schema", "max_value_bytes", "schema_registry", "reader_schema", "subject",
               "subject_naming", "record_name", "message", "key", "envelope")
ENVELOPES = ("debezium",)
KEY_KEYS = ("type", "subject", "reader_schema", "message")
KEY_TYPES = ("string", "avro", "protobuf")
FORMAT_TYPES = ("json", "raw", "avro", "protobuf")
FRAMED_TYPES = ("avro", "protobuf")
REGISTRY_KEYS = ("url", "username", "password", "password_file", "bearer_token", "bearer_token_file", "ca_file")
SUBJECT_NAMING = ("topic", "record", "topic_record")
_FRAMED_ONLY = ("schema_registry", "reader_schema", "subject", "subject_naming", "record_name", "message", "key")
_REGISTRY_URL = re.compile(r"https?://[^/\s]+(/\S*)?")
_VERSION = re.compile(r"[1-9][0-9]{0,8}")


def parse_format(ctx: Ctx, top: Section) -> FormatConfig:
    """The ``format`` section of ``top`` (the file's top level)."""
    top.need("format", hint=" (json needs format.schema; use format: {type: raw} for raw bytes)")
    sec = top.section("format", FORMAT_KEYS)
    limit_node = sec.get("max_value_bytes")
    with ctx.independent():
        kind = ctx.attempt(as_enum, sec.get("type"), sec.sub("type"), FORMAT_TYPES) if sec.get("type") else "json"
        limit = (ctx.attempt(as_positive_int, limit_node, sec.sub("max_value_bytes")) if limit_node is not None
                 else FormatConfig.max_value_bytes)
        schema = ctx.attempt(_schema, sec, kind) if kind is not None else None  # the type decides
        framed = ctx.attempt(_framed, top, sec, kind) if kind in FRAMED_TYPES else ctx.attempt(_no_framed_keys, sec, kind)
        envelope = ctx.attempt(_envelope, sec, kind, schema) if sec.get("envelope") is not None else None
    return FormatConfig(type=kind, schema=schema, max_value_bytes=limit, envelope=envelope, **(framed or {}))


def _envelope(ctx: Ctx, sec: Section, kind: str | None, schema: tuple[SchemaField, ...] | None) -> str:
    """``format.envelope``: a Debezium envelope is a record (not raw bytes); a json schema gives
    its ``op`` and its ``after`` struct (the row image)."""
    node, path = sec.get("envelope"), sec.sub("envelope")
    envelope = as_enum(ctx, node, path, ENVELOPES)
    if kind == "raw":
        ctx.fail(node.line, path, C.CONFLICTING_FIELDS, "a raw value is bytes, not a change event; use format "
                 "type json, avro or protobuf", fields=("type", "envelope"))
    if kind == "json" and schema:
        types = {f.name: f.type.strip().lower() for f in schema}
        event = "op" in types and types.get("after", "").startswith("struct<")
        if not event and not (len(types) <= 2 and types.get("payload", "").startswith("struct<")):
            ctx.fail(sec.get("schema").line, sec.sub("schema"), C.BAD_VALUE,
                     "with envelope debezium the schema is the change event's: give `op STRING` and `after` "
                     "(and `before`) as STRUCT<...> of the row's columns, or the event as `payload STRUCT<...>`")
    return envelope


def _schema(ctx: Ctx, sec: Section, kind: str) -> tuple[SchemaField, ...]:
    if kind in ("raw", *FRAMED_TYPES):
        if sec.get("schema") is not None:
            hint = "; its columns come from reader_schema" if kind in FRAMED_TYPES else ""
            ctx.fail(sec.get("schema").line, sec.sub("schema"), C.CONFLICTING_FIELDS,
                     f"format type {kind} takes no schema{hint}", fields=("type", "schema"))
        return ()
    schema_node = sec.need("schema", hint=" (format type json needs a schema)")
    return parse_schema(ctx, schema_node, sec.sub("schema"))


def _no_framed_keys(ctx: Ctx, sec: Section, kind: str | None) -> dict:
    for key in _FRAMED_ONLY:
        if sec.get(key) is not None:
            ctx.report(sec.get(key).line, sec.sub(key), C.CONFLICTING_FIELDS,
                       f"format.{key} is for format types avro and protobuf, not {kind}", fields=("type", key))
    return {}


def _framed(ctx: Ctx, top: Section, sec: Section, kind: str) -> dict:
    get = sec.get
    if kind == "avro" and get("message") is not None:
        ctx.report(get("message").line, sec.sub("message"), C.CONFLICTING_FIELDS,
                   "format.message is for protobuf; an Avro reader schema is one record", fields=("type", "message"))
    with ctx.independent():
        key = ctx.attempt(_key, sec) if get("key") is not None else None
        registry = ctx.attempt(_registry, sec)
        message = ctx.attempt(as_str, get("message"), sec.sub("message")) if get("message") is not None else None
        reader = ctx.attempt(_reader_schema, sec, kind, message) if get("reader_schema") is not None else "latest"
        naming = (ctx.attempt(as_enum, get("subject_naming"), sec.sub("subject_naming"), SUBJECT_NAMING)
                  if get("subject_naming") is not None else "topic")
        subject = ctx.attempt(as_env_str, get("subject"), sec.sub("subject")) if get("subject") is not None else None
        record_name = (ctx.attempt(as_str, get("record_name"), sec.sub("record_name"))
                       if get("record_name") is not None else None)
    if subject is None and naming in ("record", "topic_record") and record_name is None:
        sec.need("record_name", hint=f" (subject_naming {naming} names the subject after the record)")
    topics = top.get("topics")
    several = top.get("topic_pattern") is not None or (topics is not None and topics.kind == "seq"
                                                       and len(topics.value) > 1)
    from_registry = reader is not None and (reader == "latest" or _VERSION.fullmatch(reader) is not None)
    if subject is None and naming != "record" and several and from_registry:
        ctx.fail(*sec.line_of("subject_naming", "reader_schema"), C.MISSING_FIELD,
                 "with several topics or a topic_pattern, give format.subject: the subject whose "
                 "reader_schema every topic's records are read into", key="subject")
    if key is not None and key.subject is None and key.type != "string" and several and key.reader_schema == "latest":
        ctx.fail(*sec.section("key", KEY_KEYS).line_of("subject", "type"), C.MISSING_FIELD,
                 "with several topics or a topic_pattern, give format.key.subject: the subject whose "
                 "reader schema every topic's keys are read into", key="subject")
    return {"schema_registry": registry, "reader_schema": reader, "subject": subject,
            "subject_naming": naming, "record_name": record_name, "message": message,
            **({"key": key} if key is not None else {})}


def _key(ctx: Ctx, sec: Section) -> KeyFormatConfig:
    """``format.key``: the keys' type and, for avro and protobuf, their reader schema."""
    key = sec.section("key", KEY_KEYS)
    get = key.get
    with ctx.independent():
        kind = ctx.attempt(as_enum, key.need("type"), key.sub("type"), KEY_TYPES)
        subject = ctx.attempt(as_env_str, get("subject"), key.sub("subject")) if get("subject") is not None else None
        message = ctx.attempt(as_str, get("message"), key.sub("message")) if get("message") is not None else None
    if kind is None:
        return KeyFormatConfig()
    if kind == "string":
        for name in ("subject", "reader_schema", "message"):
            if get(name) is not None:
                ctx.fail(get(name).line, key.sub(name), C.CONFLICTING_FIELDS,
                         f"format.key.{name} is for key types avro and protobuf, not string", fields=("type", name))
        return KeyFormatConfig()
    if kind == "avro" and message is not None:
        ctx.fail(get("message").line, key.sub("message"), C.CONFLICTING_FIELDS,
                 "format.key.message is for protobuf keys", fields=("type", "message"))
    reader = _reader_schema(ctx, key, kind, message) if get("reader_schema") is not None else "latest"
    return KeyFormatConfig(type=kind, subject=subject, reader_schema=reader, message=message)


def _registry(ctx: Ctx, sec: Section) -> SchemaRegistryConfig:
    sec.need("schema_registry", hint=" (avro and protobuf read writer schemas from a registry: {url: ...})")
    reg = sec.section("schema_registry", REGISTRY_KEYS)
    get = reg.get
    with ctx.independent():
        url = ctx.attempt(_url, reg)
        username = ctx.attempt(as_env_str, get("username"), reg.sub("username")) if get("username") else None
        password = ctx.attempt(read_secret, reg, "password", required=get("username") is not None)
        token = ctx.attempt(read_secret, reg, "bearer_token", required=False)
        ca_file = ctx.attempt(_ca_file, get("ca_file"), reg.sub("ca_file")) if get("ca_file") else None
    if password is not None and username is None:
        ctx.fail(*reg.line_of("password", "password_file"), C.CONFLICTING_FIELDS, "password needs username",
                 fields=("password", "username"))
    if token is not None and username is not None:
        ctx.fail(*reg.line_of("bearer_token", "bearer_token_file"), C.CONFLICTING_FIELDS,
                 "give basic auth (username, password) or bearer_token, not both",
                 fields=("bearer_token", "username"))
    return SchemaRegistryConfig(url=url, username=username, password=password, bearer_token=token, ca_file=ca_file)


def _url(ctx: Ctx, reg: Section) -> str:
    node = reg.need("url")
    url = as_env_str(ctx, node, reg.sub("url")).strip().rstrip("/")
    if not _REGISTRY_URL.fullmatch(url):
        ctx.fail(node.line, reg.sub("url"), C.BAD_VALUE, f"{url!r} is not an http(s):// URL", value=url)
    if "@" in url.split("://", 1)[1].split("/", 1)[0]:
        ctx.fail(node.line, reg.sub("url"), C.BAD_VALUE, "the URL holds credentials, which would be shown "
                 "wherever the URL is; give username and password (or bearer_token) instead")
    return url


def _ca_file(ctx: Ctx, node, path: str) -> str:
    location = as_location(ctx, node, path)
    if not Path(location).is_file():
        ctx.fail(node.line, path, C.FILE_NOT_FOUND, f"{location} is not a file")
    return location


def _reader_schema(ctx: Ctx, sec: Section, kind: str, message: str | None) -> str:
    """``latest``, a version number (as text), or the absolute path of a checked schema file."""
    node = sec.get("reader_schema")
    path = sec.sub("reader_schema")
    text = str(node.value).strip() if node.kind == "scalar" and node.value is not None else ""
    if text == "latest" or (_VERSION.fullmatch(text) and not isinstance(node.value, float)):
        return text
    location = as_location(ctx, node, path)
    file = Path(location)
    suffix = "`.avsc`" if kind == "avro" else "`.proto`"
    if not file.is_file():
        ctx.fail(node.line, path, C.FILE_NOT_FOUND,
                 f"{location} is not a file (give latest, a version number, or an {suffix} file)")
    try:
        _file_columns(kind, file.read_text(encoding="utf-8"), message)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = exc.args[0] if isinstance(exc, (UnsupportedAvroType, UnsupportedProtobufType)) \
            else f"not a JSON Avro schema: {exc}"
        ctx.fail(node.line, path, C.BAD_SCHEMA, f"{location}: {why}")
    return location


def _file_columns(kind: str, text: str, message: str | None) -> tuple[str, ...]:
    """The columns a reader schema's text gives (ValueError: it gives none)."""
    if kind == "avro":
        return tuple(record_schema(json.loads(text)).names)
    return tuple(ProtobufFormat(text, message, None).arrow_schema().names)


def framed_field_names(fmt: FormatConfig) -> tuple[str, ...] | None:
    """The columns an Avro or Protobuf format's reader schema file gives, or None when the reader
    schema comes from the registry (known when the member starts)."""
    if fmt.reader_schema == "latest" or _VERSION.fullmatch(fmt.reader_schema):
        return None
    return _file_columns(fmt.type, Path(fmt.reader_schema).read_text(encoding="utf-8"), fmt.message)
