"""Protobuf schemas (``.proto`` text) as message classes and Arrow schemas, and messages as the
values Arrow takes (pure, apart from compiling a schema text with protoc in a temporary directory).

A ``.proto`` text is compiled by protoc (``grpcio-tools``; the well-known ``google/protobuf/*``
imports are included) into its own descriptor pool. A message's fields become columns in field
order, mapped as Spark's ``from_protobuf`` maps them:

=========================================  ================================
Protobuf                                   Arrow (Spark)
=========================================  ================================
int32, sint32, sfixed32                    int32
int64, sint64, sfixed64, uint32            int64
uint64                                     decimal128(20, 0)
float, double, bool, string, bytes         float32, float64, bool, string, binary
enum                                       string (the value's name)
message                                    struct
repeated T, map<K, V>                      list, map<K, V>
``google.protobuf.Timestamp``              timestamp[us, UTC]
=========================================  ================================

A field without presence (a proto3 scalar not marked ``optional``) reads as its default when the
writer left it out; a field with presence (a message, ``optional``, a ``oneof`` member) reads as
null. A recursive message is refused (:class:`UnsupportedProtobufType`).
"""
from __future__ import annotations

import datetime
import decimal
import functools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipelines.runtime.registry_client import RegistrySettings

SCHEMA_FILE = "schema.proto"
TIMESTAMP = "google.protobuf.Timestamp"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class UnsupportedProtobufType(ValueError):
    """A schema protoc refuses, or a message no table column can take; ``path`` names where."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path or 'the schema'}: {why}")
        self.path = path


@dataclass(frozen=True)
class ProtobufFormat:
    """What decoding a pipeline's Protobuf values needs: the reader schema (``.proto`` text), the
    message its columns come from (fully qualified; None: the file's first), and the registry
    that holds the writer schemas. Picklable; the registry's secrets never shown."""

    reader_schema: str
    message: str | None
    registry: RegistrySettings

    def reader(self) -> Any:
        """The reader message's descriptor."""
        return message_descriptor(compile_schema(self.reader_schema), self.message)

    def arrow_schema(self) -> pa.Schema:
        """The reader message's fields as Arrow columns."""
        struct = message_type(self.reader())
        return pa.schema([struct.field(i) for i in range(struct.num_fields)])


@functools.lru_cache(maxsize=64)
def compile_schema(text: str) -> Any:
    """The file descriptor of a schema text: ``.proto`` source (what Confluent's registry
    answers), or a base64 ``FileDescriptorProto`` (what Apicurio's Confluent-compatible API
    answers for a schema registered by confluent-kafka's serializer). UnsupportedProtobufType
    when protoc refuses it, or it imports a file other than the well-known ``google/protobuf/*``.
    Each text is compiled once per process (descriptors are immutable)."""
    descriptor = _serialized_descriptor(text)
    if descriptor is not None:
        return _file_of(descriptor)
    return _compiled(text)


def _serialized_descriptor(text: str) -> Any | None:
    import base64
    import binascii

    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped) or ";" in stripped:
        return None
    try:
        descriptor = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(stripped, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None
    return descriptor if descriptor.message_type else None


def _file_of(descriptor: Any) -> Any:
    """A serialized file descriptor in a pool of its own, with the well-known files it imports."""
    import importlib

    from google.protobuf import descriptor_pb2, descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    for dependency in descriptor.dependency:
        if not dependency.startswith("google/protobuf/"):
            raise UnsupportedProtobufType("", f"imports {dependency}, which is not a well-known type")
        module = importlib.import_module("google.protobuf." + dependency.removeprefix("google/protobuf/")
                                         .removesuffix(".proto").replace("/", ".") + "_pb2")
        known = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(known)
        pool.Add(known)
    try:
        pool.Add(descriptor)
        return pool.FindFileByName(descriptor.name)
    except (TypeError, KeyError) as exc:
        raise UnsupportedProtobufType("", f"the descriptor does not build: {exc}") from None


def _compiled(text: str) -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool
    from grpc_tools import protoc

    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="scg-proto-") as work:
        (Path(work) / SCHEMA_FILE).write_text(text, encoding="utf-8")
        out = Path(work) / "schema.pb"
        errors = Path(work) / "errors.txt"
        with open(errors, "w") as sink, _stderr_to(sink):
            code = protoc.main(["protoc", f"-I{work}", f"-I{include}", "--include_imports",
                                f"--descriptor_set_out={out}", SCHEMA_FILE])
        if code != 0:
            detail = errors.read_text(errors="replace").strip().splitlines()
            raise UnsupportedProtobufType("", "protoc refused it: " + (detail[0] if detail else f"exit {code}"))
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return pool.FindFileByName(SCHEMA_FILE)


class _stderr_to:
    """protoc writes its complaints to file descriptor 2; they go to ``sink`` instead."""

    def __init__(self, sink):
        self.sink = sink

    def __enter__(self):
        import os

        self.saved = os.dup(2)
        os.dup2(self.sink.fileno(), 2)

    def __exit__(self, *exc):
        import os

        os.dup2(self.saved, 2)
        os.close(self.saved)


def message_descriptor(file: Any, name: str | None) -> Any:
    """The message ``name`` (fully qualified, or relative to the file's package) of ``file``, or
    its first message when ``name`` is None."""
    if name is None:
        if not file.message_types_by_name:
            raise UnsupportedProtobufType("", "the schema has no message")
        return file.message_types_by_name[next(iter(file.message_types_by_name))]
    package = file.package
    for candidate in (name, f"{package}.{name}" if package else name):
        try:
            return file.pool.FindMessageTypeByName(candidate)
        except KeyError:
            continue
    raise UnsupportedProtobufType("message", f"no message {name!r} in the schema")


def message_at(file: Any, indexes: list[int]) -> Any | None:
    """The message a Confluent frame's message indexes point at (``[0]``: the first top-level
    message; ``[1, 0]``: the first nested message of the second), or None."""
    messages = list(file.message_types_by_name.values())
    found = None
    for index in indexes:
        if not 0 <= index < len(messages):
            return None
        found = messages[index]
        messages = list(found.nested_types)
    return found


_SCALARS = {"int32": pa.int32(), "sint32": pa.int32(), "sfixed32": pa.int32(), "int64": pa.int64(),
            "sint64": pa.int64(), "sfixed64": pa.int64(), "uint32": pa.int64(), "fixed32": pa.int64(),
            "uint64": pa.decimal128(20, 0), "fixed64": pa.decimal128(20, 0), "float": pa.float32(),
            "double": pa.float64(), "bool": pa.bool_(), "string": pa.string(), "bytes": pa.binary(),
            "enum": pa.string()}


def _type_name(field: Any) -> str:
    return _field_type_names()[field.type]


@functools.lru_cache(maxsize=1)
def _field_type_names() -> dict[int, str]:
    from google.protobuf.descriptor import FieldDescriptor

    return {value: name.removeprefix("TYPE_").lower() for name, value in vars(FieldDescriptor).items()
            if name.startswith("TYPE_") and isinstance(value, int)}


def message_type(message: Any, path: str = "", seen: tuple[str, ...] = ()) -> pa.StructType:
    """The Arrow struct of a message descriptor."""
    if message.full_name in seen:
        raise UnsupportedProtobufType(path, f"message {message.full_name} contains itself; a table column cannot")
    return pa.struct([pa.field(f.name, field_type(f, f"{path}.{f.name}" if path else f.name,
                                                  seen + (message.full_name,)))
                      for f in message.fields])


def field_type(field: Any, path: str, seen: tuple[str, ...]) -> pa.DataType:
    """The Arrow type of one field (repeated and map fields included)."""
    if _is_map(field):
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return pa.map_(_single_type(key, path, seen), _single_type(value, path, seen))
    single = _single_type(field, path, seen)
    return pa.list_(single) if field.is_repeated else single


def _single_type(field: Any, path: str, seen: tuple[str, ...]) -> pa.DataType:
    if field.message_type is not None:
        if field.message_type.full_name == TIMESTAMP:
            return pa.timestamp("us", tz="UTC")
        return message_type(field.message_type, path, seen)
    return _SCALARS[_type_name(field)]


def _is_map(field: Any) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def to_record(message: Any) -> dict:
    """A parsed message as a dict of its fields' values, as :func:`message_type`'s struct holds
    them."""
    return record_reader(message.DESCRIPTOR)(message)


@functools.lru_cache(maxsize=256)
def record_reader(descriptor: Any) -> Callable[[Any], dict]:
    """What turns a parsed message of ``descriptor`` into a dict, decided once per message type."""
    plan = [(field.name, _field_reader(field)) for field in descriptor.fields]

    def read(message: Any) -> dict:
        return {name: value(message) for name, value in plan}

    return read


def _field_reader(field: Any) -> Callable[[Any], Any]:
    name = field.name
    if _is_map(field):
        convert = _converter(field.message_type.fields_by_name["value"])
        if convert is _same:
            return lambda message: list(getattr(message, name).items())
        return lambda message: [(key, convert(value)) for key, value in getattr(message, name).items()]
    convert = _converter(field)
    if field.is_repeated:
        if convert is _same:
            return lambda message: list(getattr(message, name))
        return lambda message: [convert(v) for v in getattr(message, name)]
    if field.has_presence:
        return lambda message: convert(getattr(message, name)) if message.HasField(name) else None
    if convert is _same:
        return lambda message: getattr(message, name)
    return lambda message: convert(getattr(message, name))


def _converter(field: Any) -> Callable[[Any], Any]:
    if field.message_type is not None:
        if field.message_type.full_name == TIMESTAMP:
            return _timestamp
        return record_reader(field.message_type)
    if field.enum_type is not None:
        enum = field.enum_type
        return lambda number: enum.values_by_number[number].name if number in enum.values_by_number else str(number)
    if _type_name(field) in ("uint64", "fixed64"):
        return decimal.Decimal
    return _same


def _same(value: Any) -> Any:
    return value


def _timestamp(value: Any) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)
