"""No member process outlives its end-to-end test. (The tests' per-test timeout and marker:
tests/conftest.py.)"""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_member_outlives_its_test():
    """A failed test leaves no member process (and its Spark) running into the next test."""
    from tests.e2e.harness import RUNNING

    yield
    while RUNNING:
        RUNNING.pop().kill()
