"""The errors that end a pipeline member, and the file that keeps a failure's whole cause chain
for the one line a person sees."""
from __future__ import annotations

import os
import tempfile
import time

from groupmgr.core import ScgError
from groupmgr.kafka_faults import Fault, FaultKind
from pipelines.runtime.failure_rules import Verdict
from pipelines.runtime.streaming_query import failure_text


class QueryFailedRepeatedly(ScgError):
    """The member's query kept failing, for a reason no rule recognises, after restarts from the
    table's offsets."""

    condition = "QUERY_FAILED_REPEATEDLY"


class PermanentFault(ScgError):
    """A failure a person must fix ended the member; ``condition`` is the fault's own
    (``TOPIC_AUTHORIZATION_FAILED``, ``STORAGE_UNAVAILABLE``, ``KAFKA_DATA_LOSS``, ...)."""

    def __init__(self, fault: Fault, what: str):
        self.fault = fault
        self.condition = fault.condition  # type: ignore[misc]  # per instance, like BrokerError
        super().__init__(f"[{fault.condition}] {what}: {fault.detail}")


def fatal_error(exc: BaseException, verdict: Verdict, what: str, details_dir: str | None = None) -> ScgError:
    """The error that ends the member after ``verdict`` gave up on ``exc``: the project's own
    error as it is, else a named :class:`PermanentFault` or :class:`QueryFailedRepeatedly`. Its
    ``details`` names a file (in ``details_dir``, default the temp directory) holding ``exc``'s
    whole cause chain (the JVM's and the failed batch's tracebacks), for the one line a person sees."""
    if verdict.fault.kind is FaultKind.UNKNOWN:
        error: ScgError = QueryFailedRepeatedly(f"{what} {verdict.unknown_count} times in a row for reasons no "
                                                f"rule recognises; last error: {verdict.fault.detail}")
    elif isinstance(exc, ScgError):
        error = exc
    else:
        error = PermanentFault(verdict.fault, what)
    error.details = error.details or write_failure_details(exc, details_dir)
    return error


def write_failure_details(exc: BaseException, directory: str | None = None) -> str | None:
    """Write ``exc`` with its cause chain to a new file; its path, or None when it cannot be written."""
    try:
        directory = directory or os.path.join(tempfile.gettempdir(), "scg-failures")
        os.makedirs(directory, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=time.strftime("failure-%Y%m%d-%H%M%S-"), suffix=".txt", dir=directory)
        with os.fdopen(fd, "w") as out:
            out.write(failure_text(exc))
        return path
    except OSError:
        return None
