"""Named assignor error conditions.

Every error carries its parameters as attributes and a stable ``condition``
string (Spark ``KafkaExceptions`` style). Tests and callers match on the class
or on ``condition``, never on the message text, so messages may be reworded
freely.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from groupmgr.core import ExitCategory, ScgError


def one_line_summary(cause: BaseException, limit: int = 300) -> str:
    """``Type: first line of the text`` of ``cause``, at most ``limit`` characters (a
    ``SystemExit`` shows its exit code)."""
    if isinstance(cause, SystemExit):
        text = f"exit code {cause.code!r}"
    else:
        text = next((line.strip() for line in str(cause).splitlines() if line.strip()), "")
    summary = f"{type(cause).__name__}: {text}" if text else type(cause).__name__
    return summary if len(summary) <= limit else summary[:limit - 3] + "..."


class AssignorError(ScgError):
    """Base class of every assignor error; ``condition`` names the case."""

    condition: str = "ASSIGNOR_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(f"[{self.condition}] {message}")


class UnknownAssignorError(AssignorError, LookupError):
    """No built-in, entry point or importable ``module:Class`` has this name."""

    condition = "UNKNOWN_ASSIGNOR"
    exit_category = ExitCategory.CONFIG

    def __init__(self, name: str, available: Sequence[str]) -> None:
        self.name = name
        self.available = tuple(available)
        super().__init__(
            f"unknown assignor {name!r}; available: {', '.join(self.available) or '(none)'}"
            " (or give 'package.module:Class')"
        )


class AssignorImportError(AssignorError, ImportError):
    """A ``module:Class`` spec or entry point could not be loaded or instantiated. The message is
    one line: the cause's type and the first line of its text (``summary``)."""

    condition = "ASSIGNOR_IMPORT_FAILED"
    exit_category = ExitCategory.CONFIG

    def __init__(self, spec: str, cause: BaseException) -> None:
        self.spec = spec
        self.cause = cause
        self.summary = one_line_summary(cause)
        super().__init__(f"cannot load assignor {spec!r}: {self.summary}")


class DuplicateAssignorError(AssignorError):
    """Two sources register the same assignor name with different targets."""

    condition = "DUPLICATE_ASSIGNOR"
    exit_category = ExitCategory.CONFIG

    def __init__(self, name: str, sources: Sequence[str]) -> None:
        self.name = name
        self.sources = tuple(sources)
        super().__init__(
            f"assignor name {name!r} is registered by several targets: {', '.join(self.sources)}"
        )


class AssignorFailedError(AssignorError):
    """``assign()`` of the named assignor raised; ``cause`` is the original exception."""

    condition = "ASSIGNOR_FAILED"

    def __init__(self, name: str, cause: BaseException) -> None:
        self.name = name
        self.cause = cause
        super().__init__(f"assignor {name!r} raised {type(cause).__name__}: {cause}")


class InvalidAssignmentError(AssignorError):
    """An assignment broke an invariant; ``reason`` says which one.

    Reasons: ``partition_assigned_twice``, ``assigned_to_non_subscriber``,
    ``unknown_member``, ``missing_member``, ``partition_unassigned``,
    ``unknown_partition``, ``bad_result_type``. ``condition`` is
    ``INVALID_ASSIGNMENT.<REASON>``.
    """

    REASONS = (
        "partition_assigned_twice",
        "assigned_to_non_subscriber",
        "unknown_member",
        "missing_member",
        "partition_unassigned",
        "unknown_partition",
        "bad_result_type",
    )

    def __init__(self, name: str, reason: str, details: Mapping[str, Any]) -> None:
        self.name = name
        self.reason = reason
        self.details = dict(details)
        self.condition = f"INVALID_ASSIGNMENT.{reason.upper()}"
        super().__init__(f"assignor {name!r} produced an invalid assignment: {reason} {self.details}")
