"""Command-line argument errors and checks shared by the ``scg`` commands."""
from __future__ import annotations

import argparse
from typing import NoReturn

from groupmgr.core import ExitCategory, ScgError


class BadArgumentsError(ScgError):
    """The command line itself is wrong (missing or malformed arguments); exit 2."""

    condition = "BAD_ARGUMENTS"
    exit_category = ExitCategory.CONFIG


class ArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`BadArgumentsError` instead of exiting by itself."""

    def error(self, message: str) -> NoReturn:
        raise BadArgumentsError(f"{self.prog}: {message}")


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def tcp_port(text: str) -> int:
    """An argparse ``type``: a TCP port 1-65535."""
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1-65535)")
    return value
