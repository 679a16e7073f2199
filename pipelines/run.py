"""Run one pipeline member until interrupted; also the ``spark-submit`` entry point:

    spark-submit --packages <pinned connectors> pipelines/run.py conf/pipelines/x.yaml

SIGINT / SIGTERM stop the query at a batch boundary, leave the group and exit.
"""
from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

if __package__ in (None, ""):  # started as a script by spark-submit
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def run_pipeline(config, stop: threading.Event | None = None, out=print) -> None:
    from pipelines.runner import PipelineRunner
    from pipelines.spark_session import get_or_create_spark

    stop = stop or threading.Event()
    out(f"[scg] starting pipeline {config.name}: group {config.group.id}, "
        f"topics {', '.join(config.topics) or config.topic_pattern}, table {config.sink.path}")
    spark = get_or_create_spark(f"scg-{config.name}", config.spark_conf())
    runner = PipelineRunner(config, spark, out=out)
    with _stop_on_signals(stop):
        runner.run(stop)


class _stop_on_signals:
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


def main(argv: list[str] | None = None) -> int:
    from pipelines.cli import main as cli_main

    return cli_main(["run", *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    sys.exit(main())
