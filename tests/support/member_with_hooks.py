"""A pipeline member with test hooks: ``python -m tests.support.member_with_hooks FILE --hold H``.

``--hold H``: while the file ``H`` exists, a prepared batch waits before its Delta commit, after
creating ``H.waiting`` so the test knows a batch is in flight (bounded: 300 s). The hook is passed
to the runner (``BatchHooks``); production code reads nothing from the environment for it.
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


def hold_while_exists(path: Path):
    def hold(batch_id, ranges) -> None:
        if not path.exists():
            return
        Path(f"{path}.waiting").touch()
        deadline = time.monotonic() + MAX_HOLD_S
        while path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return hold


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--hold", type=Path, required=True)
    args = parser.parse_args(argv)
    run_pipeline(load_pipeline(args.file), hooks=BatchHooks(before_commit=hold_while_exists(args.hold)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
