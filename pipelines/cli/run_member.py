"""``scg run``: one pipeline member until interrupted.

SIGINT / SIGTERM stop the query at a batch boundary, leave the group and exit. The way out is
bounded: a member that has not exited :data:`SHUTDOWN_GRACE_S` seconds after the first signal (a
batch stuck in a Python function or a JVM call makes ``query.stop()`` wait), or that gets a second
signal, is ended by a watchdog thread with ``os._exit(128 + signal number)`` (143 after SIGTERM,
130 after SIGINT, what a shell reports for a process the signal ended), after one line saying so.
Exactly-once is not at risk: a batch in flight either committed whole to Delta or not at all, and
the next owner's claim bumps the partitions' owner epochs in both tables, so the table refuses any
commit the abandoned batch could still attempt (docs/DESIGN.md, invariant 3, ``FENCED_WRITER``);
the group evicts the member after its session timeout when no LeaveGroup was sent.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

from pipelines.config import PipelineConfig

# Under Spark's own query stop bound (spark.sql.streaming.stopTimeout 60 s, RUNTIME_SETTINGS) and
# systemd's 90 s before SIGKILL; a Kubernetes pod needs terminationGracePeriodSeconds above it.
SHUTDOWN_GRACE_S = 50.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_pipeline(config: PipelineConfig, stop: threading.Event | None = None,
                 out: Callable[[str], None] | None = print, shutdown_grace_s: float = SHUTDOWN_GRACE_S,
                 **runner_options) -> None:
    """Check the pipeline's Kafka access (a wrong password, certificate or ACL fails here, named,
    before Spark starts), then run ``config``'s member in this process's Spark session (created or
    reused) until ``stop`` is set or a signal arrives. ``out``: where the member's lines go (None:
    the process's logging, as ``scg run`` configures it); ``runner_options`` go to
    :meth:`PipelineRunner.open` (e.g. test hooks).
    After a SIGINT/SIGTERM the process exits within ``shutdown_grace_s`` seconds, cleanly or
    through :class:`_StopOnSignals`' watchdog (module docstring)."""
    from pipelines.runtime.kafka_access import CHECK_TIMEOUT_S, check_kafka_access
    from pipelines.runtime.pipeline_tables import batches_skip_the_jvm
    from pipelines.runtime.runner import PipelineRunner
    from pipelines.runtime.spark_session import get_or_create_spark

    stop = stop or threading.Event()
    runner_out, out = out, out or _logged
    out(f"[scg] starting pipeline {config.name}: group {config.group.id}, "
        f"topics {', '.join(config.topics) or config.topic_pattern}, "
        + (f"table {config.sink.path}" if not config.sink.tables else
           "tables " + ", ".join(f"{t.name} ({t.path})" for t in config.sink.tables)))
    check_kafka_access(config.kafka, config.topics, config.group.id, CHECK_TIMEOUT_S,
                       topic_pattern=config.topic_pattern, session_timeout_ms=config.group.session_timeout_ms,
                       rebalance_timeout_ms=config.group.rebalance_timeout_ms,
                       inconclusive=lambda reason: out(f"[scg] access check inconclusive: {reason}; starting "
                                                       "anyway, the member keeps trying"))
    spark = get_or_create_spark(f"scg-{config.name}", config.spark_conf(),
                                rows_in_jvm=not batches_skip_the_jvm(config))
    runner = PipelineRunner.open(config, spark, out=runner_out, **runner_options)
    with _StopOnSignals(stop, shutdown_grace_s, out):
        runner.run(stop)


def _logged(line: str) -> None:
    """A line of this module, logged like the member's progress (``out=None``)."""
    import logging

    logging.getLogger("scg.progress").info(line.removeprefix("[scg] "), extra={"event": "note"})


class _StopOnSignals:
    """Set ``stop`` on SIGINT/SIGTERM while inside the block (main thread only), and bound the way
    out: a watchdog thread ends the process with ``exit(128 + signum)`` when it has not exited
    ``grace_s`` seconds after the first signal, or at once on a second one, printing one line.

    The watchdog learns of signals through :func:`signal.set_wakeup_fd` (the C-level handler
    writes the signal number to a pipe), not from the Python handler, so it is armed even when the
    main thread is stuck in native code that does not return to the interpreter. Once armed it
    stays armed after the block (Spark's and Python's own shutdown are covered too); without a
    signal it ends with the block. ``exit`` is for tests."""

    def __init__(self, stop: threading.Event, grace_s: float = SHUTDOWN_GRACE_S,
                 out: Callable[[str], None] = print, exit: Callable[[int], None] = os._exit):
        self.stop, self.grace_s, self.out, self.exit = stop, grace_s, out, exit
        self.previous: dict = {}
        self._wakeup = None      # (read fd, write fd) while the watchdog listens
        self._old_wakeup_fd = -1

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # set_wakeup_fd requires it
        self._old_wakeup_fd = signal.set_wakeup_fd(write_fd)
        self._wakeup = (read_fd, write_fd)
        for sig in SIGNALS:  # a Python handler, so the C handler runs and writes to the pipe
            self.previous[sig] = signal.signal(sig, lambda *_: self.stop.set())
        threading.Thread(target=self._watch, args=(read_fd,), name="scg-shutdown-watchdog", daemon=True).start()
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        if self._wakeup is not None:
            signal.set_wakeup_fd(self._old_wakeup_fd)
            os.close(self._wakeup[1])  # the watchdog reads EOF: ends, or keeps its deadline if armed
            self._wakeup = None
        return False

    def _watch(self, read_fd: int) -> None:
        first: int | None = None
        deadline = None
        try:
            while True:
                timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                ready, _, _ = select.select([read_fd], [], [], timeout)
                if not ready:  # the grace period is over
                    return self._exit_now(first, f"member did not stop within {self.grace_s:g} s "
                                                 f"after {signal.Signals(first).name}")
                data = os.read(read_fd, 64)
                if not data:  # the block ended before any signal, or after the first one
                    if deadline is not None:
                        time.sleep(max(deadline - time.monotonic(), 0.0))
                        return self._exit_now(first, f"member did not stop within {self.grace_s:g} s "
                                                     f"after {signal.Signals(first).name}")
                    return None
                for signum in data:
                    if signum not in SIGNALS:
                        continue
                    if first is not None:
                        return self._exit_now(signum, f"second {signal.Signals(signum).name} "
                                                      f"before the member stopped")
                    first, deadline = signum, time.monotonic() + self.grace_s
                    self.stop.set()
                    self.out(f"[scg] {signal.Signals(signum).name}: stopping the member (within "
                             f"{self.grace_s:g} s; a second signal exits at once)")
        finally:
            os.close(read_fd)

    def _exit_now(self, signum: int, why: str) -> None:
        self.out(f"[scg] {why}; exiting now (partitions are fenced by the next owner's claim)")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
        self.exit(128 + signum)
