"""Shared Hypothesis settings for the fuzz tests (pipeline files, record values).

:data:`FUZZ` runs a fixed number of examples from a fixed seed (``derandomize``), so the fast
tier is repeatable and takes the same time on every run; ``SCG_FUZZ_EXAMPLES`` raises the budget
for a longer run (docs/testing.md). No example database is read or written: a failure is
reproduced from the seed, not from files left behind. Each fuzz test bounds its own time per
example where the contract has one, so ``deadline`` is off (a loaded machine would make it flaky).
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES_VARIABLE = "SCG_FUZZ_EXAMPLES"
FUZZ_EXAMPLES = int(os.environ.get(FUZZ_EXAMPLES_VARIABLE, "200"))

FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
    print_blob=True,
)
