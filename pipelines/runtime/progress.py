"""A running member's progress: assignment changes, one line per micro-batch (records, rate,
duration, Delta commit time, lag per partition) and one line per retry after a failure (its kind
and condition, the attempt, the wait, how long it has persisted). Thread safe.

Each line is an event with fields (``event``, and where they apply ``generation``,
``partitions``, ``condition``, ``batch_id``). With an ``out`` callable (print by default) the line
goes there as text, stamped with the date, time and zone; without one it is logged on the
``scg.progress`` logger with its fields as record attributes, and the process's logging
configuration (``scg run --log-format text|json``) decides its shape.
"""
from __future__ import annotations

import logging
import re
import threading
import time

from pipelines.runtime.batch_writer import BatchReport

log = logging.getLogger("scg.progress")
_CONDITION = re.compile(r"\[([A-Z][A-Z0-9_.]{3,})\]")


def timestamp(now: float | None = None) -> str:
    """``now`` (default: the current time) as local ISO-8601 with its UTC offset, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now))


class ProgressPrinter:
    """Reports a member's progress events; ``out``: where text lines go (None: the ``scg.progress``
    logger)."""

    def __init__(self, out=print):
        self.out, self._lock = out, threading.Lock()

    def _emit(self, text: str, event: str, **fields) -> None:
        if self.out is None:
            condition = fields.pop("condition", None) or _condition_in(text)
            log.info(text, extra={"event": event, "condition": condition, **fields})
            return
        with self._lock:
            self.out(f"[scg {timestamp()}] {text}")

    def note(self, text: str) -> None:
        self._emit(text, "note")

    def assigned(self, generation, partitions, remark: str = "") -> None:
        gen = getattr(generation, "generation_id", generation)
        self._emit(f"generation {gen}: assigned {len(partitions)} partition(s) {_names(partitions)}"
                   + (f" ({remark})" if remark else ""), "assigned", generation=gen,
                   partitions=_list(partitions))

    def revoked(self, partitions, how: str = "stopping the query") -> None:
        self._emit(f"revoked {len(partitions)} partition(s); {how}", "revoked", partitions=_list(partitions))

    def starting(self, starts, how: str = "") -> None:
        """Where the partitions start (``how``: the query keeps running and reads them from its
        next batch; default: a query starts over them)."""
        parts = ", ".join(f"{tp.topic}-{tp.partition}@{d.offset}({d.origin})"
                          for tp, d in sorted(starts.items()))
        self._emit(f"{how}: {parts}" if how else f"starting query from {parts}", "claimed",
                   partitions=_list(starts))

    def batch(self, report: BatchReport, lag=None) -> None:
        records = sum(r.count for r in report.ranges)
        rate = records / report.duration_s if report.duration_s > 0 else 0.0
        self._emit(f"batch {report.batch_id}: {records} records ({report.rows_written} rows, "
                   f"{report.dead_letters} dead letters, {report.rows_skipped} replayed) "
                   f"in {report.duration_s:.2f}s ({rate:,.0f}/s, Delta commit "
                   f"{report.commit_s:.2f}s, version {report.delta_version}){_merged_text(report.merged)}"
                   f"{_lag_text(lag)}", "batch",
                   batch_id=report.batch_id, partitions=_list(r.tp for r in report.ranges))

    def refused(self, batch_id: int, error) -> None:
        self._emit(f"batch {batch_id} refused by the table, nothing written: {error}", "refused",
                   batch_id=batch_id, condition=getattr(error, "condition", None))

    def retrying(self, what: str, verdict) -> None:
        """One line per retry: ``what`` failed; ``verdict`` (failure_rules.Verdict) names the fault
        and when the next attempt is. An unrecognised failure shows its restart budget (n/limit);
        a transient one, retried as long as it lasts, its attempt and how long it has persisted."""
        fault = verdict.fault
        budget = (f"({verdict.unknown_count}/{verdict.unknown_limit})" if fault.kind.value == "unknown"
                  else f"(retry {verdict.attempt}, {fault.kind.value}, failing for {verdict.persisted_s:.0f}s)")
        self._emit(f"{what} ({fault.headline()[:300]}); restarting from the table's offsets "
                   f"{budget} in {verdict.delay_s:.1f}s", "retrying", condition=fault.condition)


def _condition_in(text: str) -> str | None:
    """The first ``[CONDITION]`` a line names, if any."""
    match = _CONDITION.search(text)
    return match.group(1) if match else None


def _merged_text(merged) -> str:
    """An upsert table's merge: ``; merged 3 inserted, 5 updated, 1 deleted`` (nothing for appends)."""
    if not merged:
        return ""
    return "; merged " + ", ".join(f"{count} {change}" for change, count in merged.items())


def _lag_text(lag) -> str:
    if not lag:
        return ""
    detail = ", ".join(f"{tp.partition}:{v}" for tp, v in sorted(lag.items()))
    return f"; lag {sum(lag.values())} [{detail}]"


def _names(partitions) -> str:
    return "[" + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(partitions)) + "]"


def _list(partitions) -> list[str]:
    return [f"{tp.topic}-{tp.partition}" for tp in sorted(partitions)]
