"""``scg run``: one pipeline member until interrupted.

SIGINT / SIGTERM stop the query at a batch boundary, leave the group and exit.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from pipelines.config import PipelineConfig


def run_pipeline(config: PipelineConfig, stop: threading.Event | None = None,
                 out: Callable[[str], None] = print, **runner_options) -> None:
    """Check the pipeline's Kafka access (a wrong password, certificate or ACL fails here, named,
    before Spark starts), then run ``config``'s member in this process's Spark session (created or
    reused) until ``stop`` is set or a signal arrives; ``runner_options`` go to :class:`PipelineRunner` (e.g. test hooks)."""
    from pipelines.runtime.kafka_access import CHECK_TIMEOUT_S, check_kafka_access
    from pipelines.runtime.runner import PipelineRunner
    from pipelines.runtime.spark_session import get_or_create_spark

    stop = stop or threading.Event()
    out(f"[scg] starting pipeline {config.name}: group {config.group.id}, "
        f"topics {', '.join(config.topics) or config.topic_pattern}, table {config.sink.path}")
    if not check_kafka_access(config.kafka, config.topics, config.group.id):
        out(f"[scg] Kafka at {config.kafka.bootstrap_string} did not answer within "
            f"{CHECK_TIMEOUT_S:.0f} s; starting anyway, the member keeps trying to reach it")
    spark = get_or_create_spark(f"scg-{config.name}", config.spark_conf())
    runner = PipelineRunner(config, spark, out=out, **runner_options)
    with _StopOnSignals(stop):
        runner.run(stop)


class _StopOnSignals:
    """Set ``stop`` on SIGINT/SIGTERM while inside the block (main thread only)."""

    def __init__(self, stop: threading.Event):
        self.stop, self.previous = stop, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, lambda *_: self.stop.set())
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False
