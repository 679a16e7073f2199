"""scg check's storage probe (pipelines.runtime.storage_probe.check_writable): an object written and
deleted is ok; a delete that fails after the write is a failure naming the object left behind."""
from __future__ import annotations

import io

import pytest

import sinks.table_file_systems
from pipelines.runtime.storage_probe import check_writable
from sinks.txn_table import StorageUnavailable


class Stream(io.BytesIO):
    def close(self):  # pyarrow's writer closes the stream; keep it readable for the test
        pass


class Store:
    """A file system whose delete fails with ``delete_error`` (or succeeds when None)."""

    def __init__(self, delete_error=None):
        self.delete_error, self.written, self.deleted = delete_error, [], []

    def open_output_stream(self, path):
        self.written.append(path)
        return Stream()

    def delete_file(self, path):
        if self.delete_error is not None:
            raise self.delete_error
        self.deleted.append(path)


@pytest.fixture
def store(monkeypatch):
    def use(fs):
        monkeypatch.setattr(sinks.table_file_systems, "delta_file_system", lambda uri, options: fs)
        return fs
    return use


def test_an_object_written_and_deleted_is_writable(store):
    fs = store(Store())
    assert check_writable("s3://bucket/table", {}) == "an object written and deleted"
    assert fs.deleted == fs.written and fs.written[0].startswith("_scg_check_")


def test_a_failed_delete_is_a_failure_naming_the_object_left_behind(store):
    fs = store(Store(PermissionError("AccessDenied: no s3:DeleteObject")))
    with pytest.raises(StorageUnavailable) as raised:
        check_writable("s3://bucket/table", {})
    assert fs.written[0] in str(raised.value) and "left in the table's location" in str(raised.value)
    assert "AccessDenied" in str(raised.value)


def test_a_failed_write_reports_the_write_not_the_delete(store):
    class Unwritable(Store):
        def open_output_stream(self, path):
            raise PermissionError("AccessDenied: no s3:PutObject")
    store(Unwritable(FileNotFoundError("nothing there")))
    with pytest.raises(StorageUnavailable) as raised:
        check_writable("s3://bucket/table", {})
    assert "PutObject" in str(raised.value) and "left" not in str(raised.value)
