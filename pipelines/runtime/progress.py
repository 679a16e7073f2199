"""Human-readable progress of a running member: assignment changes, one line per micro-batch
(records, rate, duration, Delta commit time, lag per partition) and one line per retry after a
failure (its kind and condition, the attempt, the wait, how long it has persisted). Output goes
through one callable (print by default); thread safe."""
from __future__ import annotations

import threading
import time

from pipelines.runtime.batch_writer import BatchReport


class ProgressPrinter:
    """Prints a member's progress lines (assignments, one line per batch with lag); thread safe."""

    def __init__(self, out):
        self.out, self._lock = out, threading.Lock()

    def _emit(self, text: str) -> None:
        with self._lock:
            self.out(f"[scg {time.strftime('%H:%M:%S')}] {text}")

    def note(self, text: str) -> None:
        self._emit(text)

    def assigned(self, generation, partitions, remark: str = "") -> None:
        gen = getattr(generation, "generation_id", generation)
        self._emit(f"generation {gen}: assigned {len(partitions)} partition(s) {_names(partitions)}"
                   + (f" ({remark})" if remark else ""))

    def revoked(self, partitions, how: str = "stopping the query") -> None:
        self._emit(f"revoked {len(partitions)} partition(s); {how}")

    def starting(self, starts, how: str = "") -> None:
        """Where the partitions start (``how``: the query keeps running and reads them from its
        next batch; default: a query starts over them)."""
        parts = ", ".join(f"{tp.topic}-{tp.partition}@{d.offset}({d.origin})"
                          for tp, d in sorted(starts.items()))
        self._emit(f"{how}: {parts}" if how else f"starting query from {parts}")

    def batch(self, report: BatchReport, lag=None) -> None:
        records = sum(r.count for r in report.ranges)
        rate = records / report.duration_s if report.duration_s > 0 else 0.0
        self._emit(f"batch {report.batch_id}: {records} records ({report.rows_written} rows, "
                   f"{report.dead_letters} dead letters, {report.rows_skipped} replayed) "
                   f"in {report.duration_s:.2f}s ({rate:,.0f}/s, Delta commit "
                   f"{report.commit_s:.2f}s, version {report.delta_version}){_lag_text(lag)}")

    def refused(self, batch_id: int, error) -> None:
        self._emit(f"batch {batch_id} refused by the table, nothing written: {error}")

    def retrying(self, what: str, verdict) -> None:
        """One line per retry: ``what`` failed; ``verdict`` (failure_rules.Verdict) names the fault
        and when the next attempt is. An unrecognised failure shows its restart budget (n/limit);
        a transient one, retried as long as it lasts, its attempt and how long it has persisted."""
        fault = verdict.fault
        budget = (f"({verdict.unknown_count}/{verdict.unknown_limit})" if fault.kind.value == "unknown"
                  else f"(retry {verdict.attempt}, {fault.kind.value}, failing for {verdict.persisted_s:.0f}s)")
        self._emit(f"{what} ({fault.headline()[:300]}); restarting from the table's offsets "
                   f"{budget} in {verdict.delay_s:.1f}s")

def _lag_text(lag) -> str:
    if not lag:
        return ""
    detail = ", ".join(f"{tp.partition}:{v}" for tp, v in sorted(lag.items()))
    return f"; lag {sum(lag.values())} [{detail}]"


def _names(partitions) -> str:
    return "[" + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(partitions)) + "]"
