"""Protobuf values in the Confluent wire format → records of the reader message, or dead-letter
reasons.

A framed value is the byte ``0``, the writer schema's registry id (4 bytes, big-endian), the
message indexes (a zigzag varint count, then that many zigzag varints; a lone ``0`` byte means
the first message), then the message. Each value is parsed with the message its writer schema
(fetched from the registry once per id per process) and indexes name, then read into the reader
message's columns by field name: a field the reader lacks is dropped, one the writer lacks is
null.

Dead-letter rule after ``null_value`` and ``value_too_large`` (:mod:`pipelines.runtime.records`),
first match wins (the raw key and value bytes are kept):

* ``not_schema_registry_framed`` — shorter than 6 bytes, the first byte is not ``0``, or the
  message indexes do not decode;
* ``unknown_schema_id`` — the registry has no schema of that id;
* ``incompatible_schema`` — the writer schema does not compile, its indexes name no message or
  a message of another name than the reader's, or a field the reader has is of another type there;
* ``undecodable`` — the bytes do not parse as the writer's message.

A registry that does not answer is :class:`RegistryUnavailableError` (transient), as for Avro.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from pipelines.runtime.avro_records import INCOMPATIBLE_SCHEMA, NOT_FRAMED, UNDECODABLE, UNKNOWN_SCHEMA_ID
from pipelines.runtime.protobuf_types import (ProtobufFormat, UnsupportedProtobufType, compile_schema, message_at,
                                              message_type, to_record)
from pipelines.runtime.registry_client import MISSING, RegistrySchemas, process_registry

HEADER_BYTES = 5
MAX_INDEXES = 64  # deeper nesting is not a message index list but garbage

Read = Callable[[memoryview], tuple[dict | None, str | None]]


class ProtobufValues:
    """Reads framed values of one Protobuf format (:meth:`decode`); caches a reader per writer
    schema id and message indexes."""

    def __init__(self, protobuf: ProtobufFormat, registry: RegistrySchemas | None = None):
        self.registry = registry or process_registry(protobuf.registry)
        self.schema = protobuf.arrow_schema()
        self.message_name = protobuf.reader().full_name
        self._files: dict[int, Any] = {}
        self._readers: dict[tuple[int, tuple[int, ...]], Read | None] = {}

    def decode(self, value: bytes) -> tuple[dict | None, str | None]:
        """One framed value → (record, None), or (None, reason). Raises RegistryUnavailableError
        when its writer schema cannot be fetched."""
        if len(value) <= HEADER_BYTES or value[0] != 0:
            return None, NOT_FRAMED
        framed = _message_indexes(value, HEADER_BYTES)
        if framed is None:
            return None, NOT_FRAMED
        indexes, start = framed
        key = (int.from_bytes(value[1:HEADER_BYTES], "big"), indexes)
        if key not in self._readers:
            self._readers[key] = self._make_reader(*key)
        read = self._readers[key]
        if read is None:
            return None, UNKNOWN_SCHEMA_ID
        return read(memoryview(value)[start:])

    def _writer_file(self, schema_id: int) -> Any:
        if schema_id not in self._files:
            text = self.registry.schema_text(schema_id)
            if text is MISSING:
                self._files[schema_id] = MISSING
            else:
                try:
                    self._files[schema_id] = compile_schema(text)
                except UnsupportedProtobufType:
                    self._files[schema_id] = None
        return self._files[schema_id]

    def _make_reader(self, schema_id: int, indexes: tuple[int, ...]) -> Read | None:
        file = self._writer_file(schema_id)
        if file is MISSING:
            return None
        message = None if file is None else message_at(file, list(indexes))
        if message is None or message.full_name != self.message_name or not _readable_as(
                message_type(message), self.schema):
            return lambda data: (None, INCOMPATIBLE_SCHEMA)
        from google.protobuf import message_factory
        from google.protobuf.message import DecodeError

        parse = message_factory.GetMessageClass(message).FromString
        names = self.schema.names

        def read(data: memoryview) -> tuple[dict | None, str | None]:
            try:
                record = to_record(parse(data))
            except (DecodeError, ValueError, RuntimeError):  # truncated or corrupt bytes, bad UTF-8
                return None, UNDECODABLE
            return {name: record.get(name) for name in names}, None

        return read


def _message_indexes(value: bytes, at: int) -> tuple[tuple[int, ...], int] | None:
    """The message indexes at ``value[at:]`` and where the message starts, or None."""
    count, at = _zigzag_varint(value, at)
    if count is None or not 0 <= count <= MAX_INDEXES:
        return None
    if count == 0:
        return (0,), at
    indexes = []
    for _ in range(count):
        index, at = _zigzag_varint(value, at)
        if index is None or index < 0:
            return None
        indexes.append(index)
    return tuple(indexes), at


def _zigzag_varint(value: bytes, at: int) -> tuple[int | None, int]:
    result, shift = 0, 0
    while at < len(value) and shift < 64:
        byte = value[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at
        shift += 7
    return None, at


def _readable_as(writer: pa.DataType, reader: pa.Schema | pa.StructType) -> bool:
    """Whether every reader field the writer also has is of a type the reader reads it as."""
    fields = {f.name: f.type for f in writer}
    return all(name not in fields or _same_kind(fields[name], reader.field(name).type)
               for name in (reader.names if isinstance(reader, pa.Schema)
                            else [reader.field(i).name for i in range(reader.num_fields)]))


def _same_kind(writer: pa.DataType, reader: pa.DataType) -> bool:
    if pa.types.is_struct(writer) and pa.types.is_struct(reader):
        return _readable_as(writer, reader)
    if pa.types.is_list(writer) and pa.types.is_list(reader):
        return _same_kind(writer.value_type, reader.value_type)
    if pa.types.is_map(writer) and pa.types.is_map(reader):
        return writer.key_type == reader.key_type and _same_kind(writer.item_type, reader.item_type)
    return writer == reader
