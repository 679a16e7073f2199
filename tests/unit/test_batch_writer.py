"""Commit order of one micro-batch (docs/DESIGN.md invariants 3, 4, 6): dead letters, then the output
table, then Kafka offsets — and no Kafka commit when the table refuses the batch."""
import pyarrow as pa
import pytest

from groupmgr.core import TopicPartition
from pipelines.runtime.batch_writer import BatchWriter, TableTargets
from groupmgr.core import OffsetRange
from pipelines.runtime.records import RecordFormat
from sinks.txn_table import CommitResult, FencedWriterError

RANGES = (OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 3, 3))


class FakeTable:
    def __init__(self, name, calls, error=None):
        self.name, self.calls, self.error = name, calls, error

    def commit(self, rows, ranges, epochs):
        self.calls.append(self.name)
        if self.error:
            raise self.error
        return CommitResult(7, rows.num_rows, 0, ())


class FakeLog:
    def ranges(self, batch_id):
        return RANGES


def make_writer(calls, table_error=None):
    targets = TableTargets(FakeTable("table", calls, table_error), FakeTable("dead", calls), {}, {})
    writer = BatchWriter(RecordFormat("raw", None, 1024), None, targets, FakeLog(),
                         commit_kafka=lambda offsets, meta: calls.append(("kafka", offsets, meta)) or True,
                         report=lambda report: calls.append("report"),
                         refused=lambda batch_id, err: calls.append("refused"))
    writer._collect = lambda df: (pa.table({"offset": [0, 1]}), pa.table({"offset": []}))
    return writer


def test_delta_then_kafka_with_next_offsets_of_nonempty_ranges():
    calls = []
    make_writer(calls)(None, 0)
    assert calls == ["dead", "table", ("kafka", {TopicPartition("t", 0): 5}, "delta:7"), "report"]


def test_refused_batch_commits_nothing_to_kafka():
    calls = []
    error = FencedWriterError("tbl", TopicPartition("t", 0), 1, 2)
    with pytest.raises(FencedWriterError):
        make_writer(calls, table_error=error)(None, 0)
    assert calls == ["dead", "table", "refused"]
