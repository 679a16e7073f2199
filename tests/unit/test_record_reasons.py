"""The dead-letter rule of pipelines.runtime.records, decided on Python values (no Spark): the same
rule (reason_rules) builds the Spark expression every batch is classified with."""
from __future__ import annotations

import pytest

from pipelines.runtime.records import (EMPTY_VALUE, HEADERS_DDL, INVALID_UTF8, KAFKA_ROW_DDL, MALFORMED_JSON,
                                       NULL_VALUE, SCHEMA_MISMATCH, TRAILING_DATA, VALUE_TOO_LARGE, RecordFormat,
                                       dead_letter_reason, kafka_row_ddl, reason_rules, record_facts)

LIMIT = 16
RAW = RecordFormat("raw", None, LIMIT)
JSON = RecordFormat("json", "id BIGINT", LIMIT)


@pytest.mark.parametrize("fmt", [RAW, JSON], ids=["raw", "json"])
def test_a_value_of_exactly_max_value_bytes_is_kept_and_one_byte_more_is_too_large(fmt):
    assert dead_letter_reason(fmt, record_facts(b"x" * (LIMIT - 1))) is None
    assert dead_letter_reason(fmt, record_facts(b"x" * LIMIT)) is None
    assert dead_letter_reason(fmt, record_facts(b"x" * (LIMIT + 1))) == VALUE_TOO_LARGE


def test_the_size_limit_counts_bytes_not_characters():
    value = ("é" * (LIMIT // 2)).encode()  # LIMIT bytes, LIMIT / 2 characters
    assert dead_letter_reason(RAW, record_facts(value)) is None
    assert dead_letter_reason(RAW, record_facts(value + b"!")) == VALUE_TOO_LARGE


def test_with_a_limit_of_zero_only_the_empty_value_is_kept():
    fmt = RecordFormat("raw", None, 0)
    assert dead_letter_reason(fmt, record_facts(b"")) is None
    assert dead_letter_reason(fmt, record_facts(b"x")) == VALUE_TOO_LARGE


@pytest.mark.parametrize("fmt", [RAW, JSON], ids=["raw", "json"])
def test_a_tombstone_is_a_null_value_whatever_else_holds(fmt):
    """A null value has no size and no JSON: ``null_value`` comes first."""
    assert dead_letter_reason(fmt, record_facts(None)) == NULL_VALUE
    assert dead_letter_reason(fmt, record_facts(None, json_failed=True)) == NULL_VALUE
    assert dead_letter_reason(fmt, record_facts(None, json_failed=True, json_object=True)) == NULL_VALUE


@pytest.mark.parametrize("json_object", [False, True])
def test_a_too_large_value_is_value_too_large_even_when_it_does_not_parse(json_object):
    """The size is checked before the JSON: an oversized value is never reported as malformed."""
    facts = record_facts(b"x" * (LIMIT + 1), json_failed=True, json_object=json_object)
    assert dead_letter_reason(JSON, facts) == VALUE_TOO_LARGE


def test_a_value_that_is_no_json_object_is_malformed_json():
    """Also when the facts do not say: a parse failure is malformed JSON unless the value is known
    to be a JSON object."""
    assert dead_letter_reason(JSON, record_facts(b"[1, 2]", json_failed=True, json_object=False)) == MALFORMED_JSON
    assert dead_letter_reason(JSON, record_facts(b"nope", json_failed=True)) == MALFORMED_JSON


def test_a_json_object_that_does_not_fit_the_schema_is_a_schema_mismatch():
    assert dead_letter_reason(JSON, record_facts(b'{"id": "x"}', json_failed=True, json_object=True)) == SCHEMA_MISMATCH


def test_a_value_that_parsed_is_kept_whatever_it_is():
    assert dead_letter_reason(JSON, record_facts(b'{"id": 1}')) is None
    assert dead_letter_reason(JSON, record_facts(b'{"id": 1}', json_object=True)) is None


def test_a_raw_format_has_no_json_reasons():
    """Raw values are not parsed: only a tombstone or the size makes a raw record a dead letter."""
    assert dead_letter_reason(RAW, record_facts(b"not json", json_failed=True)) is None
    assert dead_letter_reason(RAW, record_facts(b"{}", json_failed=True, json_object=True)) is None


def test_the_reasons_are_checked_in_the_documented_order():
    assert [reason for reason, _ in reason_rules(JSON)] == [NULL_VALUE, VALUE_TOO_LARGE, EMPTY_VALUE, INVALID_UTF8,
                                                            TRAILING_DATA, MALFORMED_JSON, SCHEMA_MISMATCH]
    assert [reason for reason, _ in reason_rules(RAW)] == [NULL_VALUE, VALUE_TOO_LARGE]
    assert (NULL_VALUE, VALUE_TOO_LARGE, EMPTY_VALUE, INVALID_UTF8, TRAILING_DATA, MALFORMED_JSON,
            SCHEMA_MISMATCH) == ("null_value", "value_too_large", "empty_value", "invalid_utf8", "trailing_data",
                                 "malformed_json", "schema_mismatch")  # the table's reason values


def test_an_empty_value_is_empty_value_in_json_and_a_row_in_raw():
    """An empty value is not a tombstone: its own reason, never a row of null fields."""
    assert dead_letter_reason(JSON, record_facts(b"", json_failed=True)) == EMPTY_VALUE
    assert dead_letter_reason(RAW, record_facts(b"")) is None


def test_bytes_that_are_not_utf8_are_invalid_utf8_before_any_json_reason():
    value = b'{"id": "\xff"}'
    assert dead_letter_reason(JSON, record_facts(value, json_failed=True, trailing_data=True)) == INVALID_UTF8
    assert dead_letter_reason(RAW, record_facts(value)) is None  # raw bytes are kept as they are


def test_an_object_followed_by_more_is_trailing_data_even_when_its_fields_mismatch():
    facts = record_facts(b'{"id": "x"} x', json_failed=True, json_object=True, trailing_data=True)
    assert dead_letter_reason(JSON, facts) == TRAILING_DATA


def test_kafka_rows_carry_headers_only_when_the_format_keeps_them():
    """The schema of the rows a batch is made of (the warm-up's made-up record, tests) is Spark's
    Kafka source's, with ``headers`` exactly when ``source.include_headers`` is on."""
    assert kafka_row_ddl(False) == KAFKA_ROW_DDL and "headers" not in KAFKA_ROW_DDL
    assert kafka_row_ddl(True) == f"{KAFKA_ROW_DDL}, {HEADERS_DDL}"
