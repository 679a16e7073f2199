"""The one error root of spark-consumer-groups.

Every error the framework raises on purpose is an :class:`ScgError`: it carries a stable
``condition`` name (tests and callers match on it, never on message text) and an
``exit_category`` that tells the CLI which exit code a person should see. Subclasses set both as
class attributes; a few set ``condition`` per instance (a broker error code's name, an invalid
assignment's reason).
"""
from __future__ import annotations

import enum


class ExitCategory(enum.IntEnum):
    """What kind of failure an error is, as the process exit code ``scg`` returns for it."""

    RUNTIME = 1        # something failed while running; retrying later may help
    CONFIG = 2         # the pipeline file or the command's arguments are wrong; fix them
    ENVIRONMENT = 3    # the machine is missing something (Java, jars, a free port)


class ScgError(Exception):
    """Base of every named error; ``condition`` is stable, the message is for humans."""

    condition: str = "SCG_ERROR"
    exit_category: ExitCategory = ExitCategory.RUNTIME
    details: str | None = None  # where the whole story is (a file), when one line cannot hold it

    def headline(self) -> str:
        """One line naming the condition: ``[CONDITION] message`` (the tag is not repeated when
        the message already starts with it)."""
        text = str(self).splitlines()[0] if str(self) else ""
        tag = f"[{self.condition}]"
        return text if text.startswith(tag) else f"{tag} {text}".rstrip()
