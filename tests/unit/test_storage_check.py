"""The start-up storage check (sinks.txn_table.TxnDeltaTable.check_storage): it reads or creates the
table itself, and bounds that one read by the start-up retry options unless the user set them."""
from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sinks.txn_table import STARTUP_STORAGE_OPTIONS, TxnDeltaTable, startup_storage_options

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())])


def test_the_check_creates_the_table_with_its_schema_and_partition_columns(tmp_path):
    path = tmp_path / "table"
    TxnDeltaTable(str(path), "app", SCHEMA, partition_by=("partition",)).check_storage()
    created = DeltaTable(str(path))
    assert created.schema().to_arrow() == SCHEMA
    assert created.metadata().partition_columns == ["partition"]
    assert created.version() == 0


def test_the_check_reads_an_existing_table_without_writing(tmp_path):
    table = TxnDeltaTable(str(tmp_path), "app", SCHEMA)
    table.snapshot()
    table.check_storage()
    assert DeltaTable(str(tmp_path)).version() == 0


@pytest.fixture
def opened(monkeypatch):
    """The storage options each snapshot is taken with (no storage is touched)."""
    seen: list[dict] = []
    monkeypatch.setattr(TxnDeltaTable, "snapshot", lambda self: seen.append(dict(self.storage_options)))
    return seen


def test_the_check_adds_the_start_up_retry_bound_to_the_options(opened):
    TxnDeltaTable("s3://b/t", "app", SCHEMA, storage_options={"aws_region": "x"}).check_storage()
    assert opened == [{**STARTUP_STORAGE_OPTIONS, "aws_region": "x"}]
    TxnDeltaTable("s3://b/t", "app", SCHEMA).check_storage()
    assert opened[-1] == STARTUP_STORAGE_OPTIONS


@pytest.mark.parametrize("key", ["retry_timeout", "RETRY_TIMEOUT", "Retry_Timeout"])
def test_a_retry_timeout_the_user_set_wins_in_any_spelling(opened, key):
    table = TxnDeltaTable("s3://b/t", "app", SCHEMA, storage_options={key: "90s"})
    table.check_storage()
    assert opened == [{key: "90s"}]
    assert table.storage_options == {key: "90s"}          # the table's own options are unchanged


@pytest.mark.parametrize(("timeout", "bound"), [("5s", "2500ms"), ("5 seconds", "2500ms"), ("500ms", "250ms"),
                                                ("1m", "30000ms"), ("2.5s", "1250ms"), ("1ms", "1ms")])
def test_a_request_timeout_the_user_set_halves_into_the_retry_bound(timeout, bound):
    """An unanswered request fails the check after one request timeout: no retry starts after it."""
    assert startup_storage_options({"timeout": timeout}) == {"retry_timeout": bound, "timeout": timeout}
    assert startup_storage_options({"TIMEOUT": timeout})["retry_timeout"] == bound


@pytest.mark.parametrize("timeout", ["soon", "", "5h", "-5s"])
def test_a_timeout_that_is_not_a_plain_duration_keeps_the_default_bound(timeout):
    assert startup_storage_options({"timeout": timeout}) == {**STARTUP_STORAGE_OPTIONS, "timeout": timeout}
