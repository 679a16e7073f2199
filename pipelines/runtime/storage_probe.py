"""Can this process write where a table lives? Asked without creating the table.

An existing location (a local directory, or any object-store URI) gets one small Parquet object
written and deleted at ``_scg_check_<random>.parquet`` through the object store the data files are
written with (:mod:`sinks.table_file_systems`), with the start-up retry bound. A write that
succeeded and a delete that failed (a principal without delete permission) is a failure naming the
object left behind. A local table that does not
exist yet needs its nearest existing parent to be a directory this process may write: the member
creates the table there.
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path

from sinks.txn_table import StorageUnavailable, startup_storage_options, storage_error_reason


def check_writable(table_uri: str, storage_options: Mapping[str, str]) -> str:
    """What was found writable (one line); raises :class:`StorageUnavailable` with the store's
    reason otherwise."""
    local = _local_path(table_uri)
    if local is not None and not local.exists():
        parent = next(p for p in local.parents if p.exists())
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise StorageUnavailable(table_uri, PermissionError(f"{parent} is not a directory this process may write"))
        return f"not there yet; {parent} is writable, the member creates it"
    from sinks.table_file_systems import delta_file_system

    options = startup_storage_options(storage_options)
    probe = f"_scg_check_{uuid.uuid4().hex}.parquet"
    written = False
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        fs = delta_file_system(table_uri, options)
        try:
            with fs.open_output_stream(probe) as stream:
                pq.write_table(pa.table({"scg_check": [1]}), stream)
            written = True
        finally:
            deleted = _delete(fs, probe)
        if written and deleted is not None:
            raise ProbeLeftBehind(f"{probe} was written but could not be deleted: it is left in the "
                                  f"table's location (delete it by hand): {storage_error_reason(deleted)}")
    except Exception as exc:  # noqa: BLE001 - the store's own reason, named
        raise StorageUnavailable(table_uri, exc) from None
    return "an object written and deleted"


class ProbeLeftBehind(Exception):
    """The probe object was written and its delete failed: the message names the file left."""


def _delete(fs, path: str) -> Exception | None:
    """Delete ``path``: None when it is gone, or the delete's error (an object never written has
    nothing to delete, and its error is not reported)."""
    try:
        fs.delete_file(path)
    except Exception as exc:  # noqa: BLE001 - the caller decides whether it matters
        return exc
    return None


def _local_path(uri: str) -> Path | None:
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    return Path(uri) if "://" not in uri else None
