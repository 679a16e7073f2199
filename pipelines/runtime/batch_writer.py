"""The ``foreachBatch`` function of one member's query: one micro-batch → Delta, then Kafka.

Commit order (DESIGN invariants 3, 4, 6), per micro-batch:

1. the planned offset ranges are read from the query's checkpoint offset log (not from the rows);
2. dead letters are committed to the dead-letter table (exactly once, per-partition txn);
3. good rows are committed to the output table in ONE Delta commit with per-partition txn versions
   (see :class:`sinks.txn_table.TxnDeltaTable`); a fenced writer raises and writes nothing;
4. only then are the end offsets committed to the Kafka group with the member's generation.

Runs on the Spark driver, in the query's thread; not shared between queries.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from groupmgr.core import TopicPartition
from groupmgr.core import OffsetRange
from pipelines.runtime.checkpoint_log import CheckpointOffsetLog
from pipelines.runtime.records import RecordFormat, classify, dead_letters, good_rows
from sinks.txn_table import CommitResult, FencedWriterError, TxnDeltaTable

@dataclass(frozen=True)
class BatchReport:
    batch_id: int
    ranges: tuple[OffsetRange, ...]
    rows_written: int
    rows_skipped: int
    dead_letters: int
    delta_version: int | None
    duration_s: float
    commit_s: float
    kafka_committed: bool


@dataclass
class TableTargets:
    """The output and dead-letter tables with the owner epochs this member claimed."""

    table: TxnDeltaTable
    dead_table: TxnDeltaTable
    epochs: Mapping[TopicPartition, int]
    dead_epochs: Mapping[TopicPartition, int]


class BatchWriter:
    def __init__(self, fmt: RecordFormat, transform: str | None, targets: TableTargets,
                 offset_log: CheckpointOffsetLog,
                 commit_kafka: Callable[[Mapping[TopicPartition, int], str], bool],
                 report: Callable[[BatchReport], None],
                 refused: Callable[[int, FencedWriterError], None]):
        self.fmt, self.transform, self.targets = fmt, transform, targets
        self.offset_log, self.commit_kafka, self.report = offset_log, commit_kafka, report
        self.refused = refused

    def __call__(self, batch_df, batch_id: int) -> None:
        started = time.monotonic()
        ranges = self.offset_log.ranges(batch_id)
        good, dead = self._collect(batch_df)
        _fault_hold_before_commit()
        commit_started = time.monotonic()
        try:
            self.targets.dead_table.commit(dead, ranges, self.targets.dead_epochs)
            result = self.targets.table.commit(good, ranges, self.targets.epochs)
        except FencedWriterError as refused:
            self.refused(batch_id, refused)
            raise
        commit_s = time.monotonic() - commit_started
        committed = self._commit_kafka(ranges, result)
        self.report(BatchReport(batch_id, ranges, result.rows_written, result.rows_skipped,
                                dead.num_rows, result.table_version,
                                time.monotonic() - started, commit_s, committed))

    def _collect(self, batch_df) -> tuple[pa.Table, pa.Table]:
        classified = classify(batch_df, self.fmt).persist()
        try:
            output = apply_transform(good_rows(classified, self.fmt), self.transform)
            good = output.toArrow().cast(self.targets.table.schema)
            dead = dead_letters(classified).toArrow().cast(self.targets.dead_table.schema)
        finally:
            classified.unpersist()
        return good, dead

    def _commit_kafka(self, ranges: tuple[OffsetRange, ...], result: CommitResult) -> bool:
        offsets = {r.tp: r.end for r in ranges if r.end > r.start}
        if not offsets:
            return True
        metadata = f"delta:{result.table_version}" if result.table_version is not None else "delta:replay"
        return self.commit_kafka(offsets, metadata)


def _fault_hold_before_commit(max_wait_s: float = 300.0) -> None:
    """Fault injection for the end-to-end tests (never set in production): while the file named
    by ``SCG_FAULT_HOLD_BEFORE_COMMIT`` exists, a collected batch waits before its Delta commit,
    after creating ``<file>.waiting`` so the test knows a batch is in flight."""
    hold = os.environ.get("SCG_FAULT_HOLD_BEFORE_COMMIT")
    if not hold or not Path(hold).exists():
        return
    Path(hold + ".waiting").touch()
    deadline = time.monotonic() + max_wait_s
    while Path(hold).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def apply_transform(rows, transform: str | None):
    """Run the pipeline's SQL transform over the parsed rows, registered as the view ``input``."""
    if not transform:
        return rows
    rows.createOrReplaceTempView("input")
    return rows.sparkSession.sql(transform)
