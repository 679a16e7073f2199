"""Kafka rows → output rows and dead letters in Arrow, on an executor, with no Spark and no JVM.

The same rule as :mod:`pipelines.runtime.records` (the reasons, their precedence and both tables'
columns), applied to whole Arrow blocks of records (:meth:`BlockDecoder.split`):

* ``null_value`` and ``value_too_large`` are decided on the block's columns;
* the JSON values that start with ``{`` (after JSON whitespace) are parsed by ``pyarrow.json`` in
  one call; a block it refuses (invalid JSON or UTF-8, a wrong type), or whose rows are not
  exactly one per value, is split in halves until each refusal is one value, which
  :func:`decode_value` decides alone. A few bad records in a block of thousands cost a few
  parses of shrinking halves, never a record-by-record pass over the block. Values holding a
  bare constant where a value goes (``NaN``, ``Inf``, ``Infinity``, with or without a minus: that
  parser reads them, strict JSON does not) or more than :data:`MAX_NESTING` opening brackets
  are decided alone whatever it says;
* :func:`decode_value` is the reference for one value: strict JSON (RFC 8259: one value, nothing
  after it but whitespace, no single quotes, no BOM, no bare ``NaN`` or ``Infinity``) of one
  object in valid UTF-8, nested at most :data:`MAX_NESTING` levels; fields by exact name, the
  last of duplicate names wins, each converted as Spark's ``from_json`` converts it (see
  :func:`convert_field`). An empty value, invalid UTF-8 and an object followed by more than
  whitespace have reasons of their own (``empty_value``, ``invalid_utf8``, ``trailing_data``).
  A value the decoder itself fails on (not a parse error) is the dead letter ``undecodable``.

Only the field types listed in :data:`BLOCK_TYPES` are decoded here (:func:`arrow_decodable`);
a schema with any other type (timestamp, date, decimal, binary) keeps the Spark SQL path.
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import struct
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.runtime.avro_records import AvroValues
from pipelines.runtime.protobuf_records import ProtobufValues
from pipelines.runtime.records import (EMPTY_VALUE, HEADERS, INVALID_UTF8, MALFORMED_JSON,
                                       MAX_BRACKETS_TOLD_APART, NULL_VALUE, SCHEMA_MISMATCH, TRAILING_DATA,
                                       VALUE_TOO_LARGE, RecordFormat, framed_batch_decisions, framed_reader,
                                       framed_values)

UNDECODABLE = "undecodable"  # the decoder failed on the value itself (not a parse error)
MAX_NESTING = 999  # deeper values are malformed: Spark SQL's check parses the value inside one more array,
                  # under Jackson's default limit of 1000 levels
BLOCK_TYPES = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(), "double": pa.float64(),
               "float": pa.float32(), "boolean": pa.bool_()}
_INT_BOUNDS = {"int": (-2 ** 31, 2 ** 31 - 1), "bigint": (-2 ** 63, 2 ** 63 - 1)}
_OBJECT_START = r"^[ \t\r\n]*\{"
# the block parser (RapidJSON with its NaN-and-infinity flag) reads a bare NaN, Inf or Infinity,
# each after an optional minus, where a value goes: after ':', '[' or ',' and JSON whitespace.
# Values holding one are decided alone (strict JSON has none of them)
_CONSTANT_STARTS = (b"NaN", b"Inf")  # Infinity starts with Inf
_BEFORE_A_VALUE = frozenset(b":[,")
_JSON_SPACE = frozenset(b" \t\r\n")
_SCAN_BYTES = 1 << 18  # the constants are searched for in slices of this size (the scan stays in cache)
_DDL_FIELD = re.compile(r"\s*(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)\s+([A-Za-z]+)\s*")


@dataclass(frozen=True)
class FieldSpec:
    """One field of a flat JSON schema: its name and its Spark type name (``int``, ``string``, ...)."""

    name: str
    type_name: str


def schema_fields(schema_ddl: str) -> tuple[FieldSpec, ...]:
    """The fields of a flat Spark DDL schema (``id BIGINT, name STRING``), types lower case."""
    fields = []
    for part in _split_top_level(schema_ddl):
        match = _DDL_FIELD.fullmatch(part)
        if match is None:  # decimal(p,s) or another type this module does not decode
            name, _, type_text = part.strip().partition(" ")
            fields.append(FieldSpec(name.strip("`"), type_text.strip().lower()))
            continue
        name = match.group(1)
        name = name[1:-1].replace("``", "`") if name.startswith("`") else name
        fields.append(FieldSpec(name, _canonical_type(match.group(2).lower())))
    return tuple(fields)


def _canonical_type(name: str) -> str:
    return {"integer": "int", "long": "bigint"}.get(name, name)


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text + ","):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    return [p for p in parts if p.strip()]


def arrow_decodable(fmt: RecordFormat) -> bool:
    """Whether records of ``fmt`` are decoded in Arrow: raw values and JSON whose fields are all
    of :data:`BLOCK_TYPES` by :class:`BlockDecoder`, Avro and Protobuf by
    :class:`FramedBlockDecoder`."""
    return decodable_in_arrow(fmt.kind, fmt.schema_ddl)


def decodable_in_arrow(kind: str, schema_ddl: str | None) -> bool:
    """:func:`arrow_decodable` for a format of ``kind`` (json, raw, avro, protobuf) whose JSON
    schema is ``schema_ddl``."""
    if kind in ("raw", "avro", "protobuf"):
        return True
    return kind == "json" and all(f.type_name in BLOCK_TYPES for f in schema_fields(schema_ddl or ""))


# -- one value: the reference --------------------------------------------------------------------

class _Mismatch(Exception):
    """A field's JSON value does not fit its type."""


def decode_value(value: bytes, fields: Sequence[FieldSpec]) -> tuple[dict | None, str | None]:
    """One JSON value → (its fields, None), or (None, the dead-letter reason): ``empty_value``
    for no bytes, ``invalid_utf8``, ``trailing_data`` for one object followed by more than
    whitespace (below ``MAX_BRACKETS_TOLD_APART`` brackets), ``malformed_json`` when it is not
    one strict JSON object otherwise, ``schema_mismatch`` when a field does not fit its type,
    ``undecodable`` when the decoder fails on it. Pure."""
    if not value:
        return None, EMPTY_VALUE
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return None, INVALID_UTF8
    try:
        try:
            depth = nesting_depth(text)
            if depth > MAX_NESTING:
                return None, MALFORMED_JSON
            with _recursion_room(depth):
                return _object_fields(text, fields)
        except ValueError:  # not JSON, or a bare NaN / Infinity
            return None, MALFORMED_JSON
    except RecursionError:
        return None, UNDECODABLE
    except Exception:  # noqa: BLE001 - a value that breaks the decoder is a dead letter, never a failed task
        return None, UNDECODABLE


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def nesting_depth(text: str) -> int:
    """How deeply ``text``'s arrays and objects nest (brackets inside strings not counted)."""
    brackets = _STRING.sub("", text).translate(_BRACKETS_ONLY)
    depth = deepest = 0
    for char in brackets:
        depth += 1 if char in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


class _BracketsOnly(dict):
    """A ``str.translate`` table that keeps ``[]{}`` and drops every other character."""

    def __missing__(self, code: int):
        return code if chr(code) in "[]{}" else None


_BRACKETS_ONLY = _BracketsOnly()


@contextlib.contextmanager
def _recursion_room(depth: int):
    """Enough of Python's recursion limit to parse and convert ``depth`` nested levels (the
    JSON decoder and :func:`jackson_text` recurse up to three frames per level), restored after."""
    before = sys.getrecursionlimit()
    needed = 4 * depth + 200
    if needed > before:
        sys.setrecursionlimit(needed)
    try:
        yield
    finally:
        if needed > before:
            sys.setrecursionlimit(before)


_JSON_WHITESPACE = " \t\r\n"


def _object_fields(text: str, fields: Sequence[FieldSpec]) -> tuple[dict | None, str | None]:
    start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
    pairs, end = _DECODER.raw_decode(text, start)
    if not isinstance(pairs, _Pairs):
        return None, MALFORMED_JSON
    if text[end:].strip(_JSON_WHITESPACE):
        too_many = text.count("{") + text.count("[") >= MAX_BRACKETS_TOLD_APART
        return None, MALFORMED_JSON if too_many else TRAILING_DATA
    found = dict(pairs)  # the last of duplicate names wins, as in Spark
    try:
        return {f.name: convert_field(found.get(f.name), f.type_name) for f in fields}, None
    except _Mismatch:
        return None, SCHEMA_MISMATCH


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


class _Pairs(list):
    """A JSON object as its (name, value) pairs in order, duplicates kept."""


class _FloatText(str):
    """A JSON number with a fraction or exponent, as written."""


_DECODER = json.JSONDecoder(object_pairs_hook=_Pairs, parse_float=_FloatText, parse_constant=_refuse_constant)


def convert_field(value, type_name: str):
    """One field's JSON value (as :func:`decode_value` parsed it) → its value under Spark's
    ``from_json`` rules: null stays null; INT and BIGINT take integers in range; FLOAT and DOUBLE
    take numbers (``1e400`` is infinity; no string, not even ``"NaN"``); BOOLEAN takes ``true`` and ``false``; STRING takes a
    string (an escaped lone surrogate becomes ``?``, as Java's UTF-8 encoder writes it) or any
    other JSON value as compact JSON text in Jackson's notation (``1.0E20``, ``[1,2]``). Anything
    else raises :class:`_Mismatch`."""
    if value is None:
        return None
    if type_name in _INT_BOUNDS:
        low, high = _INT_BOUNDS[type_name]
        if type(value) is int and low <= value <= high:
            return value
        raise _Mismatch
    if type_name in ("double", "float"):
        if type(value) is int:
            number = _int_to_float(value)
        elif isinstance(value, _FloatText):
            number = float(value)
        else:
            raise _Mismatch
        return number if type_name == "double" else _single(number)
    if type_name == "boolean":
        if type(value) is bool:
            return value
        raise _Mismatch
    if type_name == "string":
        if isinstance(value, _FloatText):
            return _java_double(float(value))
        if isinstance(value, str):
            return _java_text(value)
        return jackson_text(value)
    raise _Mismatch


def _int_to_float(value: int) -> float:
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _single(number: float) -> float:
    """``number`` rounded to single precision (past its range: infinity)."""
    try:
        return struct.unpack("f", struct.pack("f", number))[0]
    except OverflowError:
        return math.copysign(math.inf, number)


def _java_text(text: str) -> str:
    """``text`` as Java's UTF-8 encoder keeps it: a lone surrogate becomes ``?``."""
    return text.encode("utf-8", "replace").decode("utf-8")


def jackson_text(value) -> str:
    """A parsed JSON value as compact JSON text, as Jackson writes it for Spark's STRING fields:
    no spaces, object members in order with duplicates, integers exact, other numbers in Java's
    ``Double.toString`` notation, strings with Jackson's escapes."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, _Pairs):
        return "{" + ",".join(f"{_jackson_string(k)}:{jackson_text(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(jackson_text(v) for v in value) + "]"
    if isinstance(value, _FloatText):
        return _java_double(float(value))
    if isinstance(value, str):
        return _jackson_string(value)
    return str(value)


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _jackson_string(text: str) -> str:
    """``text`` as a JSON string the way Jackson's UTF-8 generator writes it: the short escapes,
    other control characters as ``\\u00XX``, and a character past U+FFFF as its two UTF-16
    surrogates escaped (``\\uD83D\\uDE00``), upper-case hex."""
    out = []
    for char in _java_text(text):
        code = ord(char)
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif code < 0x20:
            out.append(f"\\u{code:04X}")
        elif code > 0xFFFF:
            high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
            out.append(f"\\u{high:04X}\\u{low:04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _java_double(value: float) -> str:
    """Java's ``Double.toString`` of ``value`` with the shortest digits that read back as it:
    ``1.0``, ``0.001``, ``1.0E7``, ``1.0E-4``, ``Infinity``, ``NaN``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    shortest = Decimal(repr(abs(value)))
    if 1e-3 <= abs(value) < 1e7:
        text = format(shortest, "f")
        return sign + (text if "." in text else text + ".0")
    digits = "".join(map(str, shortest.as_tuple().digits)).rstrip("0") or "0"
    exponent = shortest.adjusted()
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


# -- whole blocks --------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockSplit:
    """One block's rows for the two tables: ``output`` in the output table's columns,
    ``dead_letters`` in the dead-letter table's (see :mod:`pipelines.runtime.records`)."""

    output: pa.Table
    dead_letters: pa.Table


class BlockDecoder:
    """Splits Arrow blocks of Kafka rows (``kafka_range_reader.KAFKA_ROW_ARROW``) of one record
    format (:func:`arrow_decodable`) into output rows and dead letters. Immutable."""

    def __init__(self, fmt: RecordFormat, parse: Callable[[pa.Buffer, pa.Schema], pa.Table] | None = None):
        """``parse(buffer, schema)``: how a block of newline-separated JSON objects is parsed
        (default ``pyarrow.json``, single-threaded: Spark runs one task per core)."""
        if not arrow_decodable(fmt) or fmt.framed is not None:
            raise ValueError(f"records of this format are not decoded in Arrow: {fmt.schema_ddl}")
        self.fmt = fmt
        self.fields = () if fmt.kind == "raw" else schema_fields(fmt.schema_ddl)
        self.schema = pa.schema([pa.field(f.name, BLOCK_TYPES[f.type_name]) for f in self.fields])
        self._parse = parse or _parse_json_lines

    def split(self, block: pa.RecordBatch | pa.Table) -> BlockSplit:
        """The block's output rows and dead letters; each record is in exactly one of them."""
        rows = block if isinstance(block, pa.Table) else pa.Table.from_batches([block])
        values = rows.column("value").combine_chunks()
        is_null = pc.is_null(values)
        too_large = pc.fill_null(pc.greater(pc.binary_length(values), self.fmt.max_value_bytes), False)
        reasons = pc.if_else(is_null, pa.scalar(NULL_VALUE),
                             pc.if_else(too_large, pa.scalar(VALUE_TOO_LARGE), pa.scalar(None, pa.string())))
        if self.fmt.kind == "raw":
            good = pc.is_null(reasons)
            output = output_columns(rows.filter(good), self.fmt, (), None)
        else:
            candidates = pc.and_not(pc.invert(is_null), too_large)
            decoded = _Decoding(self, values)
            decoded.run(candidates)
            reasons = decoded.reasons_over(reasons)
            good_rows = rows if len(decoded.good_indices) == rows.num_rows else rows.take(decoded.good_indices)
            output = output_columns(good_rows, self.fmt, self.fields, decoded.good_fields)
        dead = pc.is_valid(reasons)
        return BlockSplit(output, dead_letter_columns(rows.filter(dead), reasons.filter(dead), self.fmt))


class FramedBlockDecoder:
    """Splits Arrow blocks of Kafka rows of a registry-framed format (Avro, Protobuf) into output
    rows and dead letters (:class:`BlockDecoder`'s interface; the rule of
    :func:`~pipelines.runtime.records.framed_decisions`)."""

    def __init__(self, fmt: RecordFormat, values: AvroValues | ProtobufValues | None = None,
                 keys: AvroValues | ProtobufValues | None = None):
        """``values``, ``keys``: the readers of ``fmt``'s values and (when framed) keys (default:
        ones over this process's registry)."""
        if fmt.framed is None:
            raise ValueError("not a registry-framed record format")
        self.fmt = fmt
        self.values = values or framed_values(fmt)
        self.keys = keys or (framed_reader(fmt.key_framed) if fmt.key_framed is not None else None)
        self.fields = tuple(FieldSpec(name, "") for name in self.values.schema.names)

    def split(self, block: pa.RecordBatch | pa.Table) -> BlockSplit:
        """The block's output rows and dead letters; each record is in exactly one of them.
        Raises RegistryUnavailableError when a writer schema cannot be fetched."""
        rows = block if isinstance(block, pa.Table) else pa.Table.from_batches([block])
        reasons, records, keys = framed_batch_decisions(rows.column("key").combine_chunks(),
                                                        rows.column("value").combine_chunks(), self.fmt,
                                                        self.values, self.keys)
        good, dead = pc.is_null(reasons), pc.is_valid(reasons)
        parsed = pa.Table.from_struct_array(records.filter(good))
        return BlockSplit(output_columns(rows.filter(good), self.fmt, self.fields, parsed,
                                         None if keys is None else keys.filter(good)),
                          dead_letter_columns(rows.filter(dead), reasons.filter(dead), self.fmt))


class _Decoding:
    """One block's JSON values being decoded: the parsed pieces (indices into the block and
    their fields) and the reasons of the values decided alone."""

    def __init__(self, decoder: BlockDecoder, values: pa.Array):
        self.decoder, self.values = decoder, values
        self.pieces: list[tuple[pa.Array, pa.Table]] = []
        self.alone_rows: list[tuple[int, tuple]] = []
        self.alone_reasons: dict[int, str] = {}
        self.flagged: set[int] = set()  # decided alone although they go through the block parser

    def run(self, candidates: pa.Array) -> None:
        """Decide every candidate: values that do not start an object, and those the block
        parser must not decide (:func:`_decided_alone`; their rows in a parsed block are
        dropped), alone; the others in blocks (copying none of them when all are candidates)."""
        values = self.values
        objects = pc.and_(candidates, pc.fill_null(pc.match_substring_regex(values, _OBJECT_START), False))
        for index in pc.indices_nonzero(pc.and_not(candidates, objects)).to_pylist():
            self._one(index)
        in_block = pc.indices_nonzero(objects)
        alone = _decided_alone(values)
        self.flagged = alone.intersection(in_block.to_pylist()) if alone and len(in_block) else set()
        for index in sorted(self.flagged):
            self._one(index)
        self._parse(in_block)

    def _parse(self, indices: pa.Array) -> None:
        """Parse ``indices``' values as one block; halves of a refused block are parsed again,
        one refused value is decided alone."""
        if len(indices) == 0:
            return
        whole = len(indices) == len(self.values)  # every value (indices are ascending and unique)
        table = self._try_parse(self.values if whole else self.values.take(indices))
        if table is not None:
            self.pieces.append((indices, table))
        elif len(indices) == 1:
            if indices[0].as_py() not in self.flagged:
                self._one(indices[0].as_py())
        else:
            middle = len(indices) // 2
            self._parse(indices.slice(0, middle))
            self._parse(indices.slice(middle))

    def _try_parse(self, taken: pa.Array) -> pa.Table | None:
        try:
            pc.cast(taken, pa.string())  # invalid UTF-8 anywhere in a value: decided alone
            lines = pc.binary_join_element_wise(taken, pa.scalar(b"\n"), pa.scalar(b""))
            offsets = _value_offsets(lines)
            start, end = int(offsets[0]), int(offsets[-1])
            table = self.decoder._parse(lines.buffers()[2].slice(start, end - start), self.decoder.schema)
        except Exception:  # noqa: BLE001 - a refused block is split; one value is decided alone
            return None
        return table if table.num_rows == len(taken) else None

    def _one(self, index: int) -> None:
        parsed, reason = decode_value(self.values[index].as_py(), self.decoder.fields)
        if reason is None:
            self.alone_rows.append((index, tuple(parsed[f.name] for f in self.decoder.fields)))
        else:
            self.alone_reasons[index] = reason

    def reasons_over(self, reasons: pa.Array) -> pa.Array:
        """``reasons`` with the reasons of the values decided alone set."""
        if not self.alone_reasons:
            return reasons
        mask = [False] * len(reasons)
        for index in self.alone_reasons:
            mask[index] = True
        replacements = pa.array([self.alone_reasons[i] for i in sorted(self.alone_reasons)], pa.string())
        return pc.replace_with_mask(reasons, pa.array(mask), replacements)

    @property
    def good_indices(self) -> pa.Array:
        return self._good[0]

    @property
    def good_fields(self) -> pa.Table:
        return self._good[1]

    @functools.cached_property
    def _good(self) -> tuple[pa.Array, pa.Table]:
        """The decoded values' block indices in order, and their fields in that order."""
        schema = self.decoder.schema
        pieces = self.pieces
        if self.flagged:  # decided alone: their rows from the block parser are not theirs to keep
            flagged = pa.array(sorted(self.flagged), pa.int64())
            kept = [pc.invert(pc.is_in(i.cast(pa.int64()), value_set=flagged)) for i, _ in pieces]
            pieces = [(i.filter(k), t.filter(k)) for (i, t), k in zip(pieces, kept)]
        indices = [i for i, _ in pieces]
        tables = [t.select(schema.names).cast(schema) for _, t in pieces]
        if self.alone_rows:
            indices.append(pa.array([i for i, _ in self.alone_rows], pa.int64()))
            tables.append(pa.Table.from_pylist([dict(zip(schema.names, row)) for _, row in self.alone_rows],
                                               schema=schema))
        if not indices:
            return pa.array([], pa.int64()), schema.empty_table()
        merged = pa.concat_arrays([i.cast(pa.int64()) for i in indices])
        if len(tables) == 1:  # one piece: its indices ascend already
            return merged, tables[0]
        order = pc.array_sort_indices(merged)
        return merged.take(order), pa.concat_tables(tables).take(order)


def _decided_alone(values: pa.Array) -> set[int]:
    """The indices of the values the block parser must not decide: those holding a bare-constant spelling
    (:data:`_CONSTANTS`, found in the block's bytes at once), and those with more than
    :data:`MAX_NESTING` opening brackets (the block parser nests without bound; counted only in
    values long enough to nest that deep)."""
    flagged = set(_holding_constants(values))
    long = pc.greater(pc.binary_length(values), 2 * MAX_NESTING)  # d levels take 2d bytes
    if pc.any(long).as_py():
        indices = pc.indices_nonzero(long)
        subset = values.take(indices)
        deep = pc.greater(pc.add(pc.count_substring(subset, "["), pc.count_substring(subset, "{")), MAX_NESTING)
        flagged.update(i for i, is_deep in zip(indices.to_pylist(), deep.to_pylist()) if is_deep)
    return flagged


def _holding_constants(values: pa.Array) -> list[int]:
    """The indices of the values holding a bare constant where a value goes
    (:data:`_CONSTANT_STARTS`): the block's data buffer searched at once, each hit checked for
    what precedes it and mapped to its value. A constant inside a string may be called a hit too
    (its value is then decided alone, still by the same rule); one where a value goes is never
    missed."""
    data = values.buffers()[2]
    if data is None or len(values) == 0:
        return []
    raw = np.frombuffer(data, np.uint8)
    hits = [at for at in _constant_starts(raw).tolist() if _where_a_value_goes(raw, at)]
    if not hits:
        return []
    found = np.unique(np.searchsorted(_value_offsets(values), hits, side="right") - 1)
    return [int(i) for i in found if 0 <= i < len(values)]


def _value_offsets(values: pa.Array) -> np.ndarray:
    """Where each of ``values`` (binary or string, 32-bit offsets) begins in its data buffer, and
    where the last one ends: ``len(values) + 1`` offsets, read in place."""
    return np.frombuffer(values.buffers()[1], np.int32, len(values) + 1, values.offset * 4)


def _constant_starts(raw: np.ndarray) -> np.ndarray:
    """The offsets in ``raw`` (bytes) where one of :data:`_CONSTANT_STARTS` begins."""
    found = []
    for start in range(0, max(len(raw) - 2, 0), _SCAN_BYTES):
        part = raw[start:start + _SCAN_BYTES + 2]
        first, second, third = part[:-2], part[1:-1], part[2:]
        at = np.flatnonzero(functools.reduce(np.logical_or, (
            (first == word[0]) & (second == word[1]) & (third == word[2]) for word in _CONSTANT_STARTS)))
        if len(at):
            found.append(at + start)
    return np.concatenate(found) if found else np.empty(0, np.int64)


def _where_a_value_goes(raw: np.ndarray, at: int) -> bool:
    """Whether a constant beginning at ``raw[at]`` stands where the block parser reads a value:
    after an optional minus, JSON whitespace and ':', '[' or ',' (or nothing: a conservative yes)."""
    at -= 1
    if at >= 0 and raw[at] == 0x2D:  # '-'
        at -= 1
    while at >= 0 and int(raw[at]) in _JSON_SPACE:
        at -= 1
    return at < 0 or int(raw[at]) in _BEFORE_A_VALUE


def _parse_json_lines(buffer: pa.Buffer, schema: pa.Schema) -> pa.Table:
    import pyarrow.json as pj

    return pj.read_json(pa.BufferReader(buffer),
                        read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, buffer.size + 1)),
                        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))


def key_text(keys: pa.Array) -> pa.Array:
    """Keys as UTF-8 text, null where the bytes are not valid UTF-8 (records.key_text's rule)."""
    try:
        return pc.cast(keys, pa.string())
    except pa.ArrowInvalid:
        return pa.array([_utf8_or_none(k) for k in keys.to_pylist()], pa.string())


def _utf8_or_none(raw: bytes | None) -> str | None:
    try:
        return None if raw is None else raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _coordinates(rows: pa.Table) -> list[pa.ChunkedArray]:
    return [rows.column(c) for c in ("topic", "partition", "offset", "timestamp")]


def output_columns(rows: pa.Table, fmt: RecordFormat, fields: Sequence[FieldSpec],
                   parsed: pa.Table | None, decoded_keys: pa.Array | None = None) -> pa.Table:
    """The output table's columns of ``rows`` (Kafka rows): the coordinates, the key (as text, or
    ``decoded_keys`` when given), the headers when ``fmt`` keeps them, then ``parsed``'s
    ``fields`` (the raw value when ``parsed`` is None)."""
    keys = rows.column("key").combine_chunks()
    arrays = _coordinates(rows) + [key_text(keys) if decoded_keys is None else decoded_keys, keys]
    names = ["topic", "partition", "offset", "timestamp", "key", "key_bytes"]
    if fmt.headers:
        arrays.append(rows.column(HEADERS))
        names.append(HEADERS)
    if parsed is None:
        arrays.append(rows.column("value"))
        names.append("value")
    else:
        arrays += [parsed.column(f.name) for f in fields]
        names += [f.name for f in fields]
    return pa.Table.from_arrays(arrays, names=names)


def dead_letter_columns(rows: pa.Table, reasons: pa.Array, fmt: RecordFormat) -> pa.Table:
    """The dead-letter table's columns of ``rows`` (Kafka rows) with their ``reasons``."""
    arrays = _coordinates(rows) + [rows.column("key"), rows.column("value"), reasons]
    names = ["topic", "partition", "offset", "timestamp", "key", "value", "reason"]
    if fmt.headers:
        arrays.append(rows.column(HEADERS))
        names.append(HEADERS)
    return pa.Table.from_arrays(arrays, names=names)
