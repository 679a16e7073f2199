"""Human-readable progress of a running member: assignment changes, one line per micro-batch,
and a periodic lag line. Output goes through one callable (print by default); thread safe."""
from __future__ import annotations

import json
import threading
import time

from pipelines.batch_writer import BatchReport

LAG_EVERY_S = 10.0


class ProgressPrinter:
    def __init__(self, out):
        self.out, self._lock = out, threading.Lock()
        self._next_lag = time.monotonic() + LAG_EVERY_S
        self.batches = 0
        self.rows = 0
        self.dead = 0

    def _emit(self, text: str) -> None:
        with self._lock:
            self.out(f"[scg {time.strftime('%H:%M:%S')}] {text}")

    def note(self, text: str) -> None:
        self._emit(text)

    def assigned(self, generation, partitions) -> None:
        gen = getattr(generation, "generation_id", generation)
        self._emit(f"generation {gen}: assigned {len(partitions)} partition(s) {_names(partitions)}")

    def revoked(self, partitions) -> None:
        self._emit(f"revoked {len(partitions)} partition(s); stopping the query")

    def starting(self, starts) -> None:
        parts = ", ".join(f"{tp.topic}-{tp.partition}@{d.offset}({d.origin})"
                          for tp, d in sorted(starts.items()))
        self._emit(f"starting query from {parts}")

    def batch(self, report: BatchReport, lag=None) -> None:
        self.batches += 1
        self.rows += report.rows_written
        self.dead += report.dead_letters
        records = sum(r.count for r in report.ranges)
        rate = records / report.duration_s if report.duration_s > 0 else 0.0
        self._emit(f"batch {report.batch_id}: {records} records ({report.rows_written} rows, "
                   f"{report.dead_letters} dead letters, {report.rows_skipped} replayed) "
                   f"in {report.duration_s:.2f}s ({rate:,.0f}/s, Delta commit "
                   f"{report.commit_s:.2f}s, version {report.delta_version}){_lag_text(lag)}")

    def refused(self, batch_id: int, error) -> None:
        self._emit(f"batch {batch_id} refused by the table, nothing written: {error}")

    def tick(self, query) -> None:
        if query is None or time.monotonic() < self._next_lag:
            return
        self._next_lag = time.monotonic() + LAG_EVERY_S
        lag = query_lag(query)
        if lag:
            total = sum(lag.values())
            detail = ", ".join(f"{k}={v}" for k, v in sorted(lag.items()))
            self._emit(f"lag {total} ({detail})")


def _lag_text(lag) -> str:
    if not lag:
        return ""
    detail = ", ".join(f"{tp.partition}:{v}" for tp, v in sorted(lag.items()))
    return f"; lag {sum(lag.values())} [{detail}]"


def query_lag(query) -> dict[str, int]:
    """Per-partition lag (latest - end offset) from the query's last progress, if any."""
    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return {}
    source = progress["sources"][0]
    end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
    return {k: max(latest[k] - end.get(k, 0), 0) for k in latest}


def _offsets(raw) -> dict[str, int]:
    if not raw:
        return {}
    data = json.loads(raw) if isinstance(raw, str) else raw
    return {f"{t}-{p}": int(o) for t, parts in data.items() for p, o in parts.items()}


def _names(partitions) -> str:
    return "[" + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(partitions)) + "]"
