"""Avro values in the Confluent wire format → records of the reader schema, or dead-letter reasons.

A framed value is the byte ``0``, the writer schema's registry id (4 bytes, big-endian), then the
record in Avro's binary encoding. Each value is read with its writer schema (fetched from the
registry once per id per process, :mod:`pipelines.runtime.registry_client`) into the pipeline's
reader schema (Avro schema resolution: fields the reader lacks are dropped, fields the writer
lacks take the reader's default).

Dead-letter rule after ``null_value`` and ``value_too_large`` (:mod:`pipelines.runtime.records`),
first match wins (the raw key and value bytes are kept):

* ``not_schema_registry_framed`` — shorter than 5 bytes, or the first byte is not ``0``;
* ``unknown_schema_id`` — the registry has no schema of that id;
* ``incompatible_schema`` — the writer schema cannot be read as the reader schema (a field of
  another type, a field the reader needs and the writer does not have, without a default);
* ``undecodable`` — the bytes do not decode with the writer schema, or bytes are left after the
  record.

A registry that does not answer is no reason: :class:`RegistryUnavailableError` fails the task,
and the batch is retried as a transient fault. Both paths use this module: the Arrow path's
blocks (:mod:`pipelines.runtime.arrow_records`) and the Spark SQL path's ``mapInArrow``
(:mod:`pipelines.runtime.records`).
"""
from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

from pipelines.runtime.avro_types import AvroFormat, record_fixup, record_schema
from pipelines.runtime.registry_client import MISSING, RegistrySchemas, process_registry

NOT_FRAMED = "not_schema_registry_framed"
UNKNOWN_SCHEMA_ID = "unknown_schema_id"
INCOMPATIBLE_SCHEMA = "incompatible_schema"
UNDECODABLE = "undecodable"
MAGIC_BYTE = 0
HEADER_BYTES = 5


class AvroValues:
    """Reads framed values of one Avro format: :meth:`decode` one value into a record of the
    reader schema, or names why not. Caches a reader per writer schema id (the registry is asked
    once per id per process)."""

    def __init__(self, avro: AvroFormat, registry: RegistrySchemas | None = None):
        from fastavro import parse_schema

        self.registry = registry or process_registry(avro.registry)
        reader = json.loads(avro.reader_schema)
        self.schema = record_schema(reader)
        self._reader_text = json.dumps(reader, sort_keys=True)
        self._reader = parse_schema(reader)
        self._fixup = record_fixup(reader)
        self._readers: dict[int, Callable[[bytes], tuple[dict | None, str | None]] | None] = {}

    def decode(self, value: bytes) -> tuple[dict | None, str | None]:
        """One framed value → (record, None), or (None, reason). Raises RegistryUnavailableError
        when its writer schema cannot be fetched."""
        if len(value) < HEADER_BYTES or value[0] != MAGIC_BYTE:
            return None, NOT_FRAMED
        read = self._reader_of(int.from_bytes(value[1:HEADER_BYTES], "big"))
        if read is None:
            return None, UNKNOWN_SCHEMA_ID
        record, reason = read(value)
        return (self._fixup(record) if self._fixup and record is not None else record), reason

    def _reader_of(self, schema_id: int) -> Callable[[bytes], tuple[dict | None, str | None]] | None:
        if schema_id not in self._readers:
            text = self.registry.schema_text(schema_id)
            self._readers[schema_id] = None if text is MISSING else self._make_reader(text)
        return self._readers[schema_id]

    def _make_reader(self, writer_text: str) -> Callable[[bytes], tuple[dict | None, str | None]]:
        from fastavro import parse_schema, schemaless_reader
        from fastavro.read import SchemaResolutionError

        try:
            writer_json = json.loads(writer_text)
            writer = parse_schema(writer_json)
        except Exception:  # not an Avro schema (a Protobuf or JSON Schema id)
            return lambda value: (None, INCOMPATIBLE_SCHEMA)
        reader = None if json.dumps(writer_json, sort_keys=True) == self._reader_text else self._reader

        def read(value: bytes) -> tuple[dict | None, str | None]:
            stream = io.BytesIO(value)
            stream.seek(HEADER_BYTES)
            try:
                record = schemaless_reader(stream, writer, reader)
            except SchemaResolutionError:
                return None, INCOMPATIBLE_SCHEMA
            except Exception:  # truncated or corrupt bytes: EOFError, ValueError, UnicodeDecodeError, ...
                return None, UNDECODABLE
            if stream.tell() != len(value) or not isinstance(record, dict):
                return None, UNDECODABLE
            return record, None

        return read
