"""sinks.schema_widening: which batch columns a Delta table takes, on Delta's JSON schemas."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import Schema

from sinks.schema_widening import ColumnTypeChanged, added_columns, type_text, widen


def delta(*fields: tuple[str, pa.DataType]) -> dict:
    return json.loads(Schema.from_arrow(pa.schema(list(fields))).to_json())


ADDRESS = pa.struct([("city", pa.string())])
TABLE = delta(("id", pa.int64()), ("name", pa.string()), ("address", ADDRESS))


def test_the_same_columns_leave_the_table_as_it_is():
    assert widen(TABLE, delta(("id", pa.int64()), ("name", pa.string()), ("address", ADDRESS))) is TABLE
    nested = delta(("items", pa.list_(ADDRESS)), ("by", pa.map_(pa.string(), ADDRESS)))
    assert widen(nested, delta(("items", pa.list_(ADDRESS)), ("by", pa.map_(pa.string(), ADDRESS)))) is nested


def test_a_widened_struct_before_an_unchanged_column_is_kept():
    table = delta(("address", ADDRESS), ("id", pa.int64()))
    widened = widen(table, delta(("address", pa.struct([("city", pa.string()), ("zip", pa.string())])),
                                 ("id", pa.int64())))
    assert type_text(widened) == "struct<address:struct<city:string,zip:string>,id:long>"


def test_fewer_columns_leave_the_table_as_it_is():
    assert widen(TABLE, delta(("id", pa.int64()))) is TABLE


def test_a_new_column_is_appended_nullable_after_the_table_columns():
    batch = delta(("email", pa.string()), ("id", pa.int64()))
    batch["fields"][0]["nullable"] = False
    widened = widen(TABLE, batch)
    assert [f["name"] for f in widened["fields"]] == ["id", "name", "address", "email"]
    assert widened["fields"][-1] == {"name": "email", "type": "string", "nullable": True, "metadata": {}}
    assert added_columns(TABLE, widened) == ["email"]
    assert [f["name"] for f in TABLE["fields"]] == ["id", "name", "address"]  # the table schema is not changed


def test_a_new_field_inside_a_struct_is_added_there():
    batch = delta(("id", pa.int64()), ("address", pa.struct([("city", pa.string()), ("zip", pa.string())])))
    widened = widen(TABLE, batch)
    assert type_text(widened) == "struct<id:long,name:string,address:struct<city:string,zip:string>>"
    assert added_columns(TABLE, widened) == ["address.zip"]


def test_new_fields_inside_array_elements_and_map_values_are_added():
    table = delta(("items", pa.list_(ADDRESS)), ("by", pa.map_(pa.string(), ADDRESS)))
    wider = pa.struct([("city", pa.string()), ("zip", pa.int32())])
    widened = widen(table, delta(("items", pa.list_(wider)), ("by", pa.map_(pa.string(), wider))))
    assert added_columns(table, widened) == ["items[].zip", "by{}.zip"]


@pytest.mark.parametrize("batch, path", [
    (delta(("id", pa.string())), "id"),
    (delta(("id", pa.int32())), "id"),
    (delta(("address", pa.string())), "address"),
    (delta(("address", pa.struct([("city", pa.int64())]))), "address.city"),
    (delta(("name", pa.struct([("first", pa.string())]))), "name"),
    (delta(("Name", pa.string())), "Name"),
    (delta(("address", pa.struct([("City", pa.string())]))), "address.City"),
])
def test_a_changed_type_or_a_name_differing_in_case_is_refused_by_path(batch, path):
    with pytest.raises(ColumnTypeChanged) as refused:
        widen(TABLE, batch)
    assert refused.value.path == path
    assert path.split(".")[0] in str(refused.value)


def test_decimals_of_another_precision_are_a_changed_type():
    with pytest.raises(ColumnTypeChanged, match="decimal"):
        widen(delta(("amount", pa.decimal128(10, 2))), delta(("amount", pa.decimal128(12, 2))))


@pytest.mark.parametrize("batch, path", [
    (delta(("items", pa.list_(pa.struct([("city", pa.int32())]))), ("by", pa.map_(pa.string(), ADDRESS))),
     "items[].city"),
    (delta(("items", pa.list_(ADDRESS)), ("by", pa.map_(pa.string(), pa.string()))), "by{}"),
])
def test_a_changed_type_inside_an_array_or_a_map_is_named_by_its_path(batch, path):
    table = delta(("items", pa.list_(ADDRESS)), ("by", pa.map_(pa.string(), ADDRESS)))
    with pytest.raises(ColumnTypeChanged) as refused:
        widen(table, batch)
    assert refused.value.path == path


def test_a_map_key_of_another_type_is_refused():
    with pytest.raises(ColumnTypeChanged) as refused:
        widen(delta(("m", pa.map_(pa.string(), pa.int64()))), delta(("m", pa.map_(pa.int32(), pa.int64()))))
    assert refused.value.path == "m{key}"


def test_type_text_spells_nested_types_as_spark_does():
    schema = delta(("a", pa.list_(pa.int32())), ("m", pa.map_(pa.string(), pa.float64())), ("s", ADDRESS))
    assert type_text(schema) == "struct<a:array<integer>,m:map<string,double>,s:struct<city:string>>"
