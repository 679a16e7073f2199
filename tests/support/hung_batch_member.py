"""A pipeline member whose batches can hang, with a short shutdown grace period:
``python -m tests.support.hung_batch_member FILE --hang H --grace S``.

While the file ``H`` exists a prepared batch waits before its Delta commit (after creating
``H.waiting``), as a batch stuck in a slow Python function would: ``query.stop()`` then waits for
it. ``--grace S`` is ``run_pipeline``'s ``shutdown_grace_s`` (tests/integration/test_sigterm_bound.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipelines.cli.run_member import run_pipeline
from pipelines.config import load_pipeline
from pipelines.runtime.batch_writer import BatchHooks
from tests.support.member_with_hooks import hold_while_exists


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--hang", type=Path, required=True)
    parser.add_argument("--grace", type=float, required=True)
    args = parser.parse_args(argv)
    run_pipeline(load_pipeline(args.file), shutdown_grace_s=args.grace,
                 hooks=BatchHooks(before_commit=hold_while_exists(args.hang)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
