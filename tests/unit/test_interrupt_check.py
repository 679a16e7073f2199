"""Spark's "was this foreachBatch failure the stop's own interruption?" check on a real message.

A query stopped during a batch (every rebalance) makes the batch's Python function fail; Spark
gets a ``py4j.Py4JException`` whose message is the Python traceback, the whole Java stack trace
included, and matches it against ``StreamExecution.PROXY_ERROR``. Spark's pattern recursed once
per character there, so the stream thread died of a StackOverflowError;
:func:`linear_interrupt_check` swaps in an equivalent linear pattern.

Runs Spark's own code in a bare Spark JVM (py4j gateway, no SparkContext: about 3 s).
"""
from __future__ import annotations

import pytest

from pipelines.runtime.spark_session import (LINEAR_ANY_TEXT, OPTION_REDACTION, RECURSIVE_ANY_TEXT,
                                             SPARK_INTERRUPT_PATTERN_HOLDER, linear_interrupt_check,
                                             option_redaction_regex)

pytestmark = pytest.mark.integration  # a JVM with Spark's jars, started here

FRAME = "\tat org.apache.spark.scheduler.DAGScheduler.runJob(DAGScheduler.scala:1234)\n"


def stopped_batch_message(cause: str = "java.lang.InterruptedException", frames: int = 400) -> str:
    """What Spark's foreachBatch sees when the batch's Python code failed because the query was
    stopped: py4j's error answer with Python's traceback of the Py4JJavaError (about 30 KB)."""
    return ("An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
            '  File "/work/pipelines/runtime/batch_writer.py", line 1, in __call__\n'
            "py4j.protocol.Py4JJavaError: An error occurred while calling o81.collectToPython.\r\n"
            ": org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 3 cancelled part of cancelled job group\n"
            + FRAME * frames + f"Caused by: {cause}\n" + FRAME * frames)


@pytest.fixture(scope="module")
def jvm():
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway()
    try:
        yield gateway.jvm
    finally:
        gateway.shutdown()
        gateway.proc.stdin.close()  # the gateway JVM ends when its stdin closes
        try:
            gateway.proc.wait(30)
        except Exception:  # noqa: BLE001 - never leave the JVM behind
            gateway.proc.kill()
            gateway.proc.wait(30)


def is_interruption(jvm, message: str) -> bool:
    stream_execution = getattr(jvm, SPARK_INTERRUPT_PATTERN_HOLDER)
    return stream_execution.isInterruptionException(jvm.py4j.Py4JException(message), None)


def proxy_error(jvm):
    return getattr(jvm, SPARK_INTERRUPT_PATTERN_HOLDER).PROXY_ERROR()  # a scala.util.matching.Regex


def test_sparks_own_pattern_recurses_per_character(jvm):
    """The cause: Spark's pattern, compiled as Spark ships it, overflows the stack on the message."""
    from py4j.protocol import Py4JJavaError

    current = proxy_error(jvm).pattern().pattern()
    original = jvm.java.util.regex.Pattern.compile(current.replace(LINEAR_ANY_TEXT, RECURSIVE_ANY_TEXT))
    with pytest.raises(Py4JJavaError, match="StackOverflowError"):
        original.matcher(stopped_batch_message()).find()


def test_a_batch_stopped_by_the_query_stop_is_an_interruption(jvm):
    assert linear_interrupt_check(jvm)
    assert is_interruption(jvm, stopped_batch_message())  # no StackOverflowError, and recognised
    assert is_interruption(jvm, stopped_batch_message(frames=20_000))  # ~1.5 MB of trace
    other = stopped_batch_message(cause="java.lang.IllegalStateException: boom")  # Spark goes on to
    assert not proxy_error(jvm).findFirstIn(other).isDefined()  # other checks, which need a SparkContext
    assert linear_interrupt_check(jvm)  # idempotent


@pytest.mark.parametrize("tail", [
    "x\r\n: java.lang.InterruptedException", "x\r: java.io.InterruptedIOException", "x\n\n\r\nClosedByInterruptException",
    "x\u2028java.lang.InterruptedException", "x\u0085java.lang.InterruptedException", "\u2029InterruptedException",
    ": java.lang.IllegalStateException", "", "java.nio.channels.ClosedByInterruptException\u2028",
])
def test_the_linear_pattern_matches_what_sparks_pattern_matches(jvm, tail):
    linear_interrupt_check(jvm)
    current = proxy_error(jvm).pattern().pattern()
    assert LINEAR_ANY_TEXT in current and RECURSIVE_ANY_TEXT not in current
    original = jvm.java.util.regex.Pattern.compile(current.replace(LINEAR_ANY_TEXT, RECURSIVE_ANY_TEXT))
    linear = jvm.java.util.regex.Pattern.compile(current)
    text = "Return Message: py4j.protocol.Py4JJavaError: An error occurred while calling o1.x" + tail
    assert linear.matcher(text).find() == original.matcher(text).find()


def test_our_option_redaction_pattern_is_linear_on_long_text(jvm):
    """Not the cause: the redaction pattern the project adds is an alternation of literals (no
    repeated group), so java.util.regex does not recurse per character on a long plan or error."""
    long_text = "x" * 200_000 + "jaas"
    for regex in (OPTION_REDACTION, option_redaction_regex("(?i)url")):
        assert jvm.java.util.regex.Pattern.compile(regex).matcher(long_text).find()
        assert not jvm.java.util.regex.Pattern.compile(regex).matcher("x" * 200_000).find()
