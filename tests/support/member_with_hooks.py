"""A pipeline member with test hooks: ``python -m tests.support.member_with_hooks FILE [options]``.

``--hold H``: while the file ``H`` exists, a prepared batch waits before its Delta commit, after
creating ``H.waiting`` so the test knows a batch is in flight.
``--hold-after-files H``: the same, after the executors wrote data files for a table (a write that
produced files) and before the driver commits them (a crash there leaves unreferenced files, never
rows).
``--hold-after-delta H``: the same, after the batch's Delta commits and before its Kafka offset
commit (the window a crash must survive, docs/DESIGN.md invariant 4).
``--hold-after-table H``: the same, right after the commit of the table whose path ``H`` holds
(a pipeline with several tables: the others, later in the list, not committed yet).
Each hold is bounded (300 s). The hooks are passed to the runner (``BatchHooks``); production code
reads nothing from the environment for them.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pipelines.cli.run_member import run_pipeline
from pipelines.config import load_pipeline
from pipelines.runtime.batch_writer import BatchHooks

MAX_HOLD_S = 300.0


def hold_while_exists(path: Path | None):
    def hold(batch_id, ranges) -> None:
        if path is None or not path.exists():
            return
        Path(f"{path}.waiting").touch()
        deadline = time.monotonic() + MAX_HOLD_S
        while path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return hold


def hold_after_table(path: Path | None):
    """A ``table_committed`` hook: holds (as :func:`hold_while_exists`) after the commit of the
    table whose path the file ``path`` holds."""
    hold = hold_while_exists(path)

    def after_table(batch_id, ranges, table_path: str) -> None:
        try:
            chosen = path.read_text().strip() if path is not None else None
        except FileNotFoundError:
            return
        if chosen == table_path:
            hold(batch_id, ranges)
    return after_table


def _when_files(hold):
    def hold_if_files(batch_id, ranges, written) -> None:
        if written.files:
            hold(batch_id, ranges)
    return hold_if_files


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--hold", type=Path)
    parser.add_argument("--hold-after-files", type=Path)
    parser.add_argument("--hold-after-delta", type=Path)
    parser.add_argument("--hold-after-table", type=Path)
    args = parser.parse_args(argv)
    hooks = BatchHooks(before_commit=hold_while_exists(args.hold),
                       files_written=_when_files(hold_while_exists(args.hold_after_files)),
                       after_delta_commit=hold_while_exists(args.hold_after_delta),
                       table_committed=hold_after_table(args.hold_after_table))
    run_pipeline(load_pipeline(args.file), hooks=hooks)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
