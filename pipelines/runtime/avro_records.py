"""Avro values in the Confluent wire format → output rows and dead letters in Arrow, on an executor.

A framed value is the byte ``0``, the writer schema's registry id (4 bytes, big-endian), then the
record in Avro's binary encoding. Each value is read with its writer schema (fetched from the
registry once per id per process, :mod:`pipelines.runtime.registry_client`) into the pipeline's
reader schema (Avro schema resolution: fields the reader lacks are dropped, fields the writer
lacks take the reader's default), and a block's records become Arrow columns in one call.

Dead-letter rule, first match wins (the raw key and value bytes are kept):

* ``null_value``, ``value_too_large`` — as for every format;
* ``not_schema_registry_framed`` — shorter than 5 bytes, or the first byte is not ``0``;
* ``unknown_schema_id`` — the registry has no schema of that id;
* ``incompatible_schema`` — the writer schema cannot be read as the reader schema (a field of
  another type, a field the reader needs and the writer does not have, without a default);
* ``undecodable`` — the bytes do not decode with the writer schema, or bytes are left after the
  record.

A registry that does not answer is no reason: :class:`RegistryUnavailableError` fails the task,
and the batch is retried as a transient fault.
"""
from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.runtime.arrow_records import BlockSplit, FieldSpec, dead_letter_columns, output_columns
from pipelines.runtime.avro_types import AvroFormat, record_fixup, record_schema
from pipelines.runtime.records import NULL_VALUE, VALUE_TOO_LARGE, RecordFormat
from pipelines.runtime.registry_client import MISSING, RegistrySchemas, process_registry

NOT_FRAMED = "not_schema_registry_framed"
UNKNOWN_SCHEMA_ID = "unknown_schema_id"
INCOMPATIBLE_SCHEMA = "incompatible_schema"
UNDECODABLE = "undecodable"
MAGIC_BYTE = 0
HEADER_BYTES = 5


class AvroBlockDecoder:
    """Splits Arrow blocks of Kafka rows of an Avro format into output rows and dead letters
    (the interface of :class:`~pipelines.runtime.arrow_records.BlockDecoder`)."""

    def __init__(self, fmt: RecordFormat, registry: RegistrySchemas | None = None):
        from fastavro import parse_schema

        if fmt.avro is None:
            raise ValueError("not an Avro record format")
        self.fmt = fmt
        self.registry = registry or process_registry(fmt.avro.registry)
        reader = json.loads(fmt.avro.reader_schema)
        self.schema = record_schema(reader)
        self.fields = tuple(FieldSpec(name, "") for name in self.schema.names)
        self._reader_text = json.dumps(reader, sort_keys=True)
        self._reader = parse_schema(reader)
        self._fixup = record_fixup(reader)
        self._readers: dict[int, Callable[[bytes], Any]] = {}

    def split(self, block: pa.RecordBatch | pa.Table) -> BlockSplit:
        """The block's output rows and dead letters; each record is in exactly one of them.
        Raises RegistryUnavailableError when a writer schema cannot be fetched."""
        rows = block if isinstance(block, pa.Table) else pa.Table.from_batches([block])
        values = rows.column("value").combine_chunks()
        reasons: list[str | None] = []
        records: list[dict] = []
        good: list[int] = []
        limit = self.fmt.max_value_bytes
        for index, value in enumerate(values.to_pylist()):
            if value is None:
                reason = NULL_VALUE
            elif len(value) > limit:
                reason = VALUE_TOO_LARGE
            else:
                record, reason = self.decode(value)
                if reason is None:
                    records.append(self._fixup(record) if self._fixup else record)
                    good.append(index)
            reasons.append(reason)
        reason_array = pa.array(reasons, pa.string())
        parsed = pa.Table.from_pylist(records, schema=self.schema)
        good_rows = rows if len(good) == rows.num_rows else rows.take(pa.array(good, pa.int64()))
        dead = pc.is_valid(reason_array)
        return BlockSplit(output_columns(good_rows, self.fmt, self.fields, parsed),
                          dead_letter_columns(rows.filter(dead), reason_array.filter(dead), self.fmt))

    def decode(self, value: bytes) -> tuple[dict | None, str | None]:
        """One framed value → (record, None), or (None, reason)."""
        if len(value) < HEADER_BYTES or value[0] != MAGIC_BYTE:
            return None, NOT_FRAMED
        read = self._reader_of(int.from_bytes(value[1:HEADER_BYTES], "big"))
        if read is None:
            return None, UNKNOWN_SCHEMA_ID
        return read(value)

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
