"""The check of the executors' Python runs beside the member's start-up on the driver
(spark_session.executor_python_checked): the block runs while the check's tasks do, a failed
check still stops the start-up, named, and an error of the block itself is never masked. The
session is a stand-in: what is tested is the ordering, not Spark."""
from __future__ import annotations

import threading

import pytest

from pipelines.runtime.spark_session import SparkSessionNotReady, executor_python_checked

WAIT_S = 10.0


class _Rdd:
    def __init__(self, collect):
        self._collect = collect

    def mapPartitions(self, function):  # noqa: N802 - PySpark's name
        return self

    def collect(self):
        return self._collect()


class _Session:
    """Enough of a SparkSession for the check's Python RDD job: ``collect`` is what its job does."""

    def __init__(self, collect):
        self.sparkContext = self
        self.defaultParallelism = 2
        self._collect = collect

    def parallelize(self, items, slices):
        return _Rdd(self._collect)


def test_the_block_runs_while_the_check_runs():
    block_ran, check_ended = threading.Event(), threading.Event()

    def collect():  # ends only once the block has run: a check run before the block never ends
        assert block_ran.wait(WAIT_S), "the block did not run while the check was running"
        check_ended.set()
        return [1, 1]

    with executor_python_checked(_Session(collect)):
        block_ran.set()
    assert check_ended.is_set()  # leaving waited for the check


def test_a_failed_check_stops_the_start_after_the_block():
    block_done = []

    def collect():
        raise RuntimeError("PythonException: ModuleNotFoundError: No module named 'deltalake'")

    with pytest.raises(SparkSessionNotReady, match="the executors' Python lacks deltalake"):
        with executor_python_checked(_Session(collect)):
            block_done.append(True)
    assert block_done == [True]


def test_an_error_of_the_block_is_not_masked_by_the_check():
    check_ended = threading.Event()

    def collect():
        check_ended.set()
        raise RuntimeError("No module named 'pyarrow'")

    with pytest.raises(ValueError, match="the table's schema"):
        with executor_python_checked(_Session(collect)):
            raise ValueError("the table's schema")
    assert check_ended.is_set()  # the check ended before the error went on
