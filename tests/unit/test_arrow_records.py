"""Kafka rows → output rows and dead letters in whole Arrow blocks (pipelines/runtime/arrow_records.py):
the reasons and their precedence, each record in exactly one table, bad records isolated by
halving the block (never a record-by-record pass), what never reaches the block parser."""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from pipelines.runtime import arrow_records as ar
from pipelines.runtime.arrow_records import (MAX_NESTING, UNDECODABLE, BlockDecoder, arrow_decodable, decode_value,
                                             jackson_text, nesting_depth, schema_fields)
from pipelines.runtime.kafka_range_reader import KAFKA_ROW_ARROW, KAFKA_ROW_WITH_HEADERS_ARROW
from pipelines.runtime.records import (EMPTY_VALUE, INVALID_UTF8, MALFORMED_JSON, MAX_BRACKETS_TOLD_APART, NULL_VALUE,
                                       SCHEMA_MISMATCH, TRAILING_DATA, VALUE_TOO_LARGE, RecordFormat)

SCHEMA = "i INT, l BIGINT, d DOUBLE, s STRING, b BOOLEAN, f FLOAT"
FIELDS = schema_fields(SCHEMA)
JSON = RecordFormat("json", SCHEMA, 1000)


def _block(values, keys=None, headers=None) -> pa.RecordBatch:
    n = len(values)
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    arrays = [pa.array(keys or [None] * n, pa.binary()), pa.array(values, pa.binary()), pa.array(["t"] * n),
              pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()),
              pa.array([when] * n, pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32())]
    if headers is None:
        return pa.RecordBatch.from_arrays(arrays, schema=KAFKA_ROW_ARROW)
    return pa.RecordBatch.from_arrays(arrays + [pa.array(headers, KAFKA_ROW_WITH_HEADERS_ARROW.field("headers").type)],
                                      schema=KAFKA_ROW_WITH_HEADERS_ARROW)


@pytest.mark.parametrize("value, reason", [
    (b'{"i":2147483648}', SCHEMA_MISMATCH), (b'{"i":-2147483649}', SCHEMA_MISMATCH), (b'{"i":1.5}', SCHEMA_MISMATCH),
    (b'{"i":1e2}', SCHEMA_MISMATCH), (b'{"i":"5"}', SCHEMA_MISMATCH), (b'{"i":true}', SCHEMA_MISMATCH),
    (b'{"l":9223372036854775808}', SCHEMA_MISMATCH), (b'{"b":"true"}', SCHEMA_MISMATCH), (b'{"b":1}', SCHEMA_MISMATCH),
    (b'{"d":"NaN"}', SCHEMA_MISMATCH), (b'{"d":true}', SCHEMA_MISMATCH),
    (b'{"d":NaN}', MALFORMED_JSON), (b'{"d":-Infinity}', MALFORMED_JSON), (b"{'i':1}", MALFORMED_JSON),
    (b'{"d":Inf}', MALFORMED_JSON), (b'{"d":-Inf}', MALFORMED_JSON), (b'{"i":1,"x":[-NaN]}', MALFORMED_JSON),
    (b'{"i":1} xyz', TRAILING_DATA), (b'{"i":1}{"i":2}', TRAILING_DATA), (b'[{"i":1}]', MALFORMED_JSON),
    (b'{"i":"x"} xyz', TRAILING_DATA), (b' {"i":1}],[{"i":2}', TRAILING_DATA), (b'[1] x', MALFORMED_JSON),
    (b'{"i":1} \x00', TRAILING_DATA), (b'{"i":1} \n\t\r ', None),
    (b'5', MALFORMED_JSON), (b'null', MALFORMED_JSON), (b'', EMPTY_VALUE), (b'  ', MALFORMED_JSON),
    (b'\xef\xbb\xbf{"i":1}', MALFORMED_JSON), (b'{"x":"a\xffb"}', INVALID_UTF8), (b'{"s":"x\ty"}', MALFORMED_JSON),
    (b'{"i":01}', MALFORMED_JSON), (b'{"i":1,}', MALFORMED_JSON), (b'{"i":1', MALFORMED_JSON),
])
def test_one_value_s_reason(value, reason):
    parsed, found = decode_value(value, FIELDS)
    assert found == reason and (parsed is None) == (reason is not None)


def test_trailing_data_is_told_from_nesting_only_below_the_bracket_bound():
    """Spark SQL cannot tell trailing content from nesting past its parser's limit: a value with
    that many brackets that is not exactly one JSON value is malformed on both paths."""
    few = b'{"s":"' + b"[" * (MAX_BRACKETS_TOLD_APART - 2) + b'"} x'  # with the object's: one bracket short
    many = b'{"s":"' + b"[" * (MAX_BRACKETS_TOLD_APART - 1) + b'"} x'
    assert decode_value(few, FIELDS) == (None, TRAILING_DATA)
    assert decode_value(many, FIELDS) == (None, MALFORMED_JSON)
    assert decode_value(many[:-2], FIELDS)[1] is None  # one value: brackets inside a string are fine


@pytest.mark.parametrize("value, fields", [
    (b'{"i":2147483647,"l":-9223372036854775808}', {"i": 2147483647, "l": -9223372036854775808}),
    (b'{"d":1e400,"f":3.4e39}', {"d": math.inf, "f": math.inf}), (b'{"d":5}', {"d": 5.0}), (b'{"i":-0}', {"i": 0}),
    (b' \t{"i":1,"i":2}\r\n', {"i": 2}), (b'{"I":4,"x":{"deep":[1]}}', {}), (b'{"s":null}', {}),
    (b'{"s":"\\u00e9\\ud83d\\ude00"}', {"s": "é😀"}), (b'{"s":"\\ud800x"}', {"s": "?x"}),
    (b'{"s":{"a":1, "b" : [1.50, "x\\u00e9\\u0001\\n", null, true]}}', {"s": '{"a":1,"b":[1.5,"xé\\u0001\\n",null,true]}'}),
    (b'{"s":1e20}', {"s": "1.0E20"}), (b'{"s":{"k":1,"k":2}}', {"s": '{"k":1,"k":2}'}), (b'{\n"i":9\n}', {"i": 9}),
])
def test_one_value_s_fields(value, fields):
    parsed, reason = decode_value(value, FIELDS)
    assert reason is None
    assert {k: v for k, v in parsed.items() if v is not None} == fields


@pytest.mark.parametrize("number, text", [(1.0, "1.0"), (1e20, "1.0E20"), (1.5, "1.5"), (0.001, "0.001"),
                                          (1e-4, "1.0E-4"), (1234567.0, "1234567.0"), (1e7, "1.0E7"),
                                          (-2.5e-10, "-2.5E-10"), (-0.0, "-0.0"), (123.456, "123.456")])
def test_numbers_in_a_string_field_read_as_java_writes_them(number, text):
    assert ar._java_double(number) == text


def test_nesting_at_the_limit_is_read_and_past_it_is_malformed():
    at_limit = "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1)
    assert nesting_depth('{"a":"[[[\\"[","b":[{}]}') == 3
    assert decode_value(f'{{"s":{at_limit}}}'.encode(), FIELDS)[0]["s"] == at_limit
    assert decode_value(f'{{"x":[{at_limit}]}}'.encode(), FIELDS) == (None, MALFORMED_JSON)
    assert decode_value(b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}", FIELDS) == (None, MALFORMED_JSON)


def test_a_value_that_breaks_the_decoder_is_undecodable(monkeypatch):
    def explode(value, type_name):
        raise MemoryError("boom")

    monkeypatch.setattr(ar, "convert_field", explode)
    assert decode_value(b'{"i":1}', FIELDS) == (None, UNDECODABLE)


def test_jackson_text_keeps_duplicates_and_order():
    parsed = json.loads('{"b":1,"a":[{"x":null}],"b":2}', object_pairs_hook=ar._Pairs, parse_float=ar._FloatText)
    assert jackson_text(parsed) == '{"b":1,"a":[{"x":null}],"b":2}'


def test_nested_text_escapes_characters_past_the_bmp_as_jackson_does():
    """Jackson's UTF-8 generator writes a character past U+FFFF as its escaped UTF-16 surrogates
    (keys too); one in the BMP stays as it is, a control character is escaped."""
    value = '{"s":{"\U0001F600":["\U000e4792","é\\u0001"]}}'.encode()
    assert decode_value(value, FIELDS)[0]["s"] == '{"\\uD83D\\uDE00":["\\uDB51\\uDF92","é\\u0001"]}'
    assert decode_value('{"s":"\U0001F600"}'.encode(), FIELDS)[0]["s"] == "\U0001F600"  # a string stays


class CountingParse:
    """The block parser, counting what it is given."""

    def __init__(self):
        self.calls, self.lines = 0, []

    def __call__(self, buffer, schema):
        self.calls += 1
        self.lines += buffer.to_pybytes().split(b"\n")[:-1]
        return ar._parse_json_lines(buffer, schema)


def test_each_record_lands_in_exactly_one_table_with_the_rule_s_precedence():
    values = [b'{"i":1}', None, b'x' * 1001, b'{"i":"no"}', b'nope', b'{"i":2}']
    split = BlockDecoder(JSON).split(_block(values))
    assert split.output.column("offset").to_pylist() == [0, 5]
    assert split.output.column("i").to_pylist() == [1, 2]
    assert dict(zip(split.dead_letters.column("offset").to_pylist(), split.dead_letters.column("reason").to_pylist())) == {
        1: NULL_VALUE, 2: VALUE_TOO_LARGE, 3: SCHEMA_MISMATCH, 4: MALFORMED_JSON}
    assert split.dead_letters.column("value").to_pylist()[1:] == values[2:5]  # the exact bytes


def test_a_few_bad_records_in_a_large_block_are_isolated_by_halving():
    values = [json.dumps({"i": n, "s": f"v{n}"}).encode() for n in range(10_000)]
    for bad in (17, 5000, 9999):
        values[bad] = b'{"i":"bad"}'
    parse = CountingParse()
    split = BlockDecoder(JSON, parse=parse).split(_block(values))
    assert split.dead_letters.column("offset").to_pylist() == [17, 5000, 9999]
    assert split.output.num_rows == 9997
    assert split.output.column("i").to_pylist() == [n for n in range(10_000) if n not in (17, 5000, 9999)]
    assert parse.calls <= 1 + 2 * 3 * 14       # about log2(10,000) halvings per bad record
    assert len(parse.lines) <= 10_000 * 15     # never one parse per record


def test_a_block_of_only_bad_records():
    values = [b'{"i":"x"}'] * 64
    split = BlockDecoder(JSON).split(_block(values))
    assert split.output.num_rows == 0
    assert split.dead_letters.column("reason").to_pylist() == [SCHEMA_MISMATCH] * 64


def test_what_the_block_parser_never_sees_and_never_decides():
    """A value that is no object never reaches it (``null`` crashes pyarrow's parser); one that
    holds a bare-constant spelling or could nest too deep is decided alone, whatever it says."""
    deep = b'{"x":' + b"[" * 1000 + b"]" * 1000 + b"}"
    values = [b"null", b'{"d":NaN}', b'{"s":"Infinity"}', b' [1]', deep, b'{"i":3}']
    parse = CountingParse()
    split = BlockDecoder(RecordFormat("json", SCHEMA, 10_000), parse=parse).split(_block(values))
    assert b"null" not in parse.lines and b" [1]" not in parse.lines
    assert split.output.column("offset").to_pylist() == [2, 5]
    assert split.output.column("s").to_pylist() == ["Infinity", None]
    assert dict(zip(split.dead_letters.column("offset").to_pylist(), split.dead_letters.column("reason").to_pylist())) == {
        0: MALFORMED_JSON, 1: MALFORMED_JSON, 3: MALFORMED_JSON, 4: MALFORMED_JSON}


def test_a_bare_constant_wherever_a_value_goes_is_decided_alone_and_one_inside_a_string_is_not_missed():
    """The block parser reads NaN, Inf and Infinity (with a minus too) where a value goes, also in
    fields the schema leaves out; strict JSON reads none of them."""
    bare = [b'{"d":Inf}', b'{"i":1, "x": \t-NaN}', b'{"i":2,"x":{"y":[1,\r\nInfinity]}}', b'{"d":-Inf}']
    in_strings = [b'{"s":"Information"}', b'{"s":"NaNa"}', b'{"s":"x: NaN"}', b'{"s":"[Inf"}']
    values = bare + in_strings + [b'{"i":3}']
    parse = CountingParse()
    split = BlockDecoder(RecordFormat("json", SCHEMA, 10_000), parse=parse).split(_block(values))
    assert split.dead_letters.column("offset").to_pylist() == [0, 1, 2, 3]
    assert set(split.dead_letters.column("reason").to_pylist()) == {MALFORMED_JSON}
    assert split.output.column("s").to_pylist() == ["Information", "NaNa", "x: NaN", "[Inf", None]
    # a constant after text that cannot precede a value never costs a value its block
    assert {b'{"s":"Information"}', b'{"s":"NaNa"}'} <= set(parse.lines)


def test_bare_constants_are_found_across_scan_slices_and_in_a_sliced_array(monkeypatch):
    monkeypatch.setattr(ar, "_SCAN_BYTES", 8)
    values = pa.array([b'{"a":1}', b'{"s":"NaN"}', b'{"long":' + b" " * 20 + b"NaN}", b'{"b":[Inf]}', b"{}"], pa.binary())
    assert ar._holding_constants(values) == [2, 3]
    assert ar._holding_constants(values.slice(2)) == [0, 1]
    assert ar._holding_constants(values.slice(3, 2)) == [0]
    assert ar._holding_constants(values.slice(4)) == []
    assert ar._holding_constants(pa.array([b"-Inf", b"{}"], pa.binary())) == [0]  # nothing before it


def test_line_breaks_inside_values_are_read_as_json_reads_them():
    values = [b'{"i":1}\n{"i":2}', b'{"s":"a\nb"}', b'{\n "i":3\r\n}', b'{"i":4}\n']
    split = BlockDecoder(JSON).split(_block(values * 50))
    assert split.output.column("i").to_pylist() == [3, 4] * 50
    assert split.dead_letters.column("reason").to_pylist() == [TRAILING_DATA, MALFORMED_JSON] * 50


def test_keys_headers_and_raw_values_keep_their_bytes():
    keys = [b"\xff\xfe", None, "grüße".encode(), b""]
    headers = [None, [("h", b"\xff"), ("h", None)], [], None]
    raw = RecordFormat("raw", None, 3, headers=True)
    split = BlockDecoder(raw).split(_block([b"abc", b"abcd", None, b""], keys, headers))
    assert split.output.column("key").to_pylist() == [None, ""]
    assert split.output.column("key_bytes").to_pylist() == [b"\xff\xfe", b""]
    assert split.output.column("value").to_pylist() == [b"abc", b""]
    assert split.output.column("headers").to_pylist() == [None, None]
    assert split.dead_letters.column("key").to_pylist() == [None, "grüße".encode()]
    assert split.dead_letters.column("reason").to_pylist() == [VALUE_TOO_LARGE, NULL_VALUE]
    assert split.dead_letters.column("headers").to_pylist()[0] == [{"key": "h", "value": b"\xff"},
                                                                   {"key": "h", "value": None}]


def test_which_formats_are_decoded_in_arrow():
    assert arrow_decodable(JSON) and arrow_decodable(RecordFormat("raw", None, 1))
    assert arrow_decodable(RecordFormat("json", "`odd name` STRING, n LONG, m INTEGER", 1))
    for other in ("t TIMESTAMP", "d DATE", "x DECIMAL(10,2)", "b BINARY", "i INT, t TIMESTAMP"):
        assert not arrow_decodable(RecordFormat("json", other, 1))
    with pytest.raises(ValueError):
        BlockDecoder(RecordFormat("json", "t TIMESTAMP", 1))
