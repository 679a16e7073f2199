"""Logging of an ``scg`` process, configured once at start: one event per line on standard
output, as text (``[scg <ISO-8601 time with zone>] message``) or as JSON objects (``--log-format
json`` or ``SCG_LOG_FORMAT=json``: ISO-8601 UTC ``time``, ``level``, ``logger``, ``message``,
``pipeline``, ``member`` and, where an event has them, ``event``, ``generation``, ``condition``,
``partitions``, ``batch_id``). The project's loggers (``scg.*``, ``groupmgr.*``) log at INFO
(rebalances, claims, fencing, stops); other libraries at WARNING."""
from __future__ import annotations

import logging
import os
import sys
import time

from pythonjsonlogger.json import JsonFormatter

from pipelines.runtime.progress import timestamp

FORMATS = ("text", "json")
PROJECT_LOGGERS = ("scg", "groupmgr")
ENV_FORMAT = "SCG_LOG_FORMAT"
_JSON_FIELDS = ("pipeline", "member", "event", "generation", "condition", "partitions", "batch_id")


class _TextFormatter(logging.Formatter):
    """A progress event as its line; any other record with its level and logger."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.name != "scg.progress":
            text = f"{record.levelname} {record.name}: {text}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return f"[scg {timestamp(record.created)}] {text}"


class _Fields(logging.Filter):
    """Gives every record the pipeline and the member it comes from."""

    def __init__(self, pipeline: str | None, member: str | None):
        super().__init__()
        self.pipeline, self.member = pipeline, member

    def filter(self, record: logging.LogRecord) -> bool:
        record.pipeline = getattr(record, "pipeline", self.pipeline)
        record.member = getattr(record, "member", self.member)
        return True


def log_format(requested: str | None) -> str:
    """The format asked for on the command line, else by ``SCG_LOG_FORMAT``, else text."""
    chosen = (requested or os.environ.get(ENV_FORMAT) or "text").lower()
    if chosen not in FORMATS:
        from pipelines.cli.arguments import BadArgumentsError

        raise BadArgumentsError(f"log format {chosen!r} is not one of {', '.join(FORMATS)} ({ENV_FORMAT})")
    return chosen


def configure_logging(fmt: str = "text", pipeline: str | None = None, member: str | None = None,
                      stream=None) -> logging.Handler:
    """Send every log record to ``stream`` (standard output) in ``fmt``; replaces what an earlier
    call installed. The handler installed."""
    handler = logging.StreamHandler(stream or sys.stdout)
    if fmt == "json":
        formatter = JsonFormatter("{asctime}{levelname}{name}{message}", style="{", datefmt="%Y-%m-%dT%H:%M:%SZ",
                                  rename_fields={"asctime": "time", "levelname": "level", "name": "logger"})
        formatter.converter = time.gmtime
    else:
        formatter = _TextFormatter()
    handler.setFormatter(formatter)
    handler.addFilter(_Fields(pipeline, member))
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "scg_handler", False)]:
        root.removeHandler(old)
    handler.scg_handler = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name in PROJECT_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    return handler
