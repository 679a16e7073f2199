"""Tables' file systems kept for the life of a process, as a Spark Python worker writes one
micro-batch's files after another (``spark.python.worker.reuse``).

A data file is written through deltalake's object store (:class:`deltalake.fs.DeltaStorageHandler`
behind a :class:`pyarrow.fs.PyFileSystem`). A new one per task starts a new client: new
connections (on an object store, a TLS handshake each) and, for cloud credentials, a new lookup.
``bench/bench_file_writes.py`` measures one small Parquet file through a kept file system against
a new one per task, against s3proxy on loopback (plain HTTP, so without the TLS a real object
store adds) and on local disk (bench/results/file_writes.md).

The key is the table's location and its storage options, credentials included: held in memory
only. At most ``max_kept`` are kept, the least recently used going first. Thread safe. A forked
child starts with none (the object store's runtime does not survive a fork).
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping


def delta_file_system(table_uri: str, storage_options: Mapping[str, str]):
    """A new file system of the table at ``table_uri``, through deltalake's object store."""
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import PyFileSystem

    return PyFileSystem(DeltaStorageHandler(table_uri, dict(storage_options) or None))


class TableFileSystems:
    """``get(table_uri, storage_options)``: the file system of that table, made by ``factory``
    once per key and process."""

    def __init__(self, factory: Callable[[str, Mapping[str, str]], object] = delta_file_system,
                 max_kept: int = 8):
        self._factory, self.max_kept = factory, max_kept
        self._kept: OrderedDict[tuple, object] = OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def get(self, table_uri: str, storage_options: Mapping[str, str]):
        key = (table_uri, tuple(sorted(storage_options.items())))
        with self._lock:
            if self._pid != os.getpid():
                self._kept, self._pid = OrderedDict(), os.getpid()
            fs = self._kept.get(key)
            if fs is not None:
                self._kept.move_to_end(key)
                return fs
        fs = self._factory(table_uri, storage_options)
        with self._lock:
            fs = self._kept.setdefault(key, fs)
            self._kept.move_to_end(key)
            while len(self._kept) > self.max_kept:
                self._kept.popitem(last=False)
        return fs


FILE_SYSTEMS = TableFileSystems()  # this process's
