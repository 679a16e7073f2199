"""Stand-ins for unit tests of the runner and its reader modes, without Spark, Kafka or tables:
a QueryContext of fakes, stand-ins for Spark's StreamingQuery, and a spark-kafka reader mode whose
starts are scripted."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from pipelines.runtime.batch_writer import BatchGate
from pipelines.runtime.owned_partitions import OwnedPartitions, PartitionChecks
from pipelines.runtime.progress import ProgressPrinter
from pipelines.runtime.reader_modes import QueryContext, RestartingQuery
from pipelines.runtime.warm_up import WarmUpContext


class FailedQuery:
    """A stopped query that failed with ``error`` (None: it finished)."""

    isActive = False

    def __init__(self, error):
        self.error = error
        self.stops = 0

    def exception(self):
        return self.error

    def stop(self):
        self.stops += 1


class RunningQuery(FailedQuery):
    """A running query; ``busy`` is its isTriggerActive answer."""

    isActive = True

    def __init__(self, busy: bool = False):
        super().__init__(None)
        self.busy = busy

    @property
    def stopped(self) -> bool:
        return self.stops > 0

    @property
    def status(self):
        return {"isTriggerActive": self.busy}


class CommitRecorder:
    """The group's offset commits (stopped partitions publish their condition there)."""

    def __init__(self):
        self.commits = []

    def __call__(self, offsets, metadata="") -> bool:
        self.commits.append((dict(offsets), metadata))
        return True


def owned_partitions(lines: list[str], clock, commit=None, checks=None, tables=None) -> OwnedPartitions:
    """OwnedPartitions over ``tables`` (default none: only what needs no table works):
    ``checks(partitions)`` (default: every partition runs from 0) stands in for the table,
    group and brokers."""
    owned = OwnedPartitions(tables=tables, source=None, committed=None, describe=None,
                            commit=commit or CommitRecorder(), note=lines.append, clock=clock)
    if checks is not None:
        owned.check = checks
    return owned


def query_context(lines: list[str], clock, owned: OwnedPartitions | None = None, spark=None,
                  lock: threading.RLock | None = None) -> QueryContext:
    """A QueryContext whose progress lines go to ``lines``; only what the test passes is real."""
    progress = ProgressPrinter(lines.append)
    warm = WarmUpContext(spark=spark, config=None, tables=None, probe=None, group_offsets=None,
                         note=progress.note, clock=clock)
    config = SimpleNamespace(trigger=SimpleNamespace(available_now=False))
    return QueryContext(spark=spark, config=config, tables=None, fs=None, probe=None,
                        owned=owned or owned_partitions(lines, clock), commit=CommitRecorder(),
                        report=lambda report: None, progress=progress, warm_up=warm,
                        lock=lock or threading.RLock(), clock=clock)


class ScriptedQuery(RestartingQuery):
    """The spark-kafka mode with scripted starts: each start takes the next of ``starts`` (an
    exception to raise, or a query to run over the owned partitions; a RunningQuery when none
    is left). Its warm-up runs ``warm_up_does`` (default: nothing)."""

    def __init__(self, ctx: QueryContext, *starts, warm_up_does=lambda: None):
        super().__init__(ctx)
        self.starts, self._warm_up_does = list(starts), warm_up_does
        self.started: list = []

    def warm_up(self, stop: threading.Event) -> None:
        self._warm_up_does()

    def start(self, generation) -> None:
        outcome = self.starts.pop(0) if self.starts else RunningQuery()
        if isinstance(outcome, BaseException):
            raise outcome
        self.query, self.writer = outcome, SimpleNamespace(gate=BatchGate(), failure=None)
        self.partitions = self.ctx.owned.partitions
        self.started.append(outcome)


class ClaimingTable:
    """A table's ownership claims only: each claim of a partition takes the next epoch, as
    TxnDeltaTable's do."""

    def __init__(self, path: str):
        self.path, self.epochs = path, {}

    def claim(self, partitions) -> dict:
        for tp in partitions:
            self.epochs[tp] = self.epochs.get(tp, 0) + 1
        return {tp: self.epochs[tp] for tp in partitions}


def every_partition_runs(partitions) -> PartitionChecks:
    from pipelines.runtime.partition_checks import PartitionVerdict

    return PartitionChecks([PartitionVerdict(tp, 0) for tp in partitions])
