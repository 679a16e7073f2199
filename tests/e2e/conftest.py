"""Per-test timeout in this directory: 1200 s instead of the suite's default (setup.cfg,
``[tool:pytest] timeout``), because the demo subprocess alone is allowed 600 s and every member
process starts its own Spark. A test with its own
``@pytest.mark.timeout`` keeps it. A hang fails with the test's name instead of running CI out of time.
"""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 1200


@pytest.fixture(autouse=True)
def no_member_outlives_its_test():
    """A failed test leaves no member process (and its Spark) running into the next test."""
    from tests.e2e.harness import RUNNING

    yield
    while RUNNING:
        RUNNING.pop().kill()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.resolve().is_relative_to(HERE) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIMEOUT_S))
