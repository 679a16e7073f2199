"""Build the SparkSession a pipeline runs in: Delta Lake enabled, Kafka source on the classpath.

Inside ``spark-submit`` the session already exists (with ``--packages`` or ``--jars`` supplying
the connectors) and is reused as is. Started from plain Python (``bin/scg run``, tests), the
session is created with the jars bin/bootstrap resolved, so no network is needed at run time.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait

from groupmgr.core import ExitCategory, ScgError
from pipelines.runtime.install_paths import conf_dir, jar_files

# Session settings the runner relies on, applied to any session, also one spark-submit created:
# a bounded query stop (a rebalance waits for it) and UTC timestamps (the tables' schemas are UTC).
RUNTIME_SETTINGS = {
    "spark.sql.streaming.stopTimeout": "60s",
    "spark.sql.session.timeZone": "UTC",
}
# A driver JVM that holds no record only plans, schedules and writes the checkpoint: C2's
# compilations of that code cost more CPU than they save (docs/performance.md)
COORDINATOR_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
DRIVER_JAVA_OPTIONS_SETTING = "spark.driver.extraJavaOptions"
KAFKA_SOURCE_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
# Source options Spark must redact in plans, progress and event logs, besides its own defaults
# (spark.redaction.regex matches secret|password|token|access.key in a key or a value): the
# inline TLS private key (its key and value match none of those: ``kafka.ssl.keystore.key`` for
# Spark's Kafka source, ``kafka.ssl.key.pem`` for scg-kafka; a client_config private key such as
# ``sasl.oauthbearer.assertion.private.key.pem`` and its passphrase) and the JAAS config.
OPTION_REDACTION = r"(?i)url|keystore[.]key|ssl[.]key[.]password|key[.]pem|passphrase|jaas|secret|password|token"
OPTION_REDACTION_SETTING = "spark.sql.redaction.options.regex"
# Spark (4.x, StreamExecution.PROXY_ERROR) decides whether a stopped query's foreachBatch failure
# is the stop's own interruption by matching the Py4JException's message, a Python traceback that
# holds the whole Java stack trace (thousands of characters), against a pattern whose group
# ``(.|\r\n|\r|\n)*`` java.util.regex matches by recursing once per character: a query stopped
# during a batch (every rebalance) ended its stream thread with a StackOverflowError and ~1000
# printed regex frames. ``[^\u0085\u2028\u2029]*`` matches exactly the same strings (``.`` is any
# character but a line terminator; the alternatives add back ``\r`` and ``\n``) in a loop.
SPARK_INTERRUPT_PATTERN_HOLDER = "org.apache.spark.sql.execution.streaming.runtime.StreamExecution"
RECURSIVE_ANY_TEXT = r"((.|\r\n|\r|\n)*)"
LINEAR_ANY_TEXT = r"([^\u0085\u2028\u2029]*)"


class SparkSessionNotReady(ScgError):
    """The Spark session lacks something the member needs (named in the message)."""

    condition = "SPARK_SESSION_NOT_READY"
    exit_category = ExitCategory.ENVIRONMENT

DELTA_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

LOCAL_DEFAULTS = {
    "spark.master": "local[*]",
    "spark.sql.shuffle.partitions": "4",
    # the Spark UI stays on (a pipeline's spark section may turn it off), with the status it keeps
    # bounded for a driver that runs micro-batches for weeks
    "spark.ui.enabled": "true",
    "spark.ui.retainedJobs": "200",
    "spark.ui.retainedStages": "200",
    "spark.ui.retainedTasks": "20000",
    "spark.sql.ui.retainedExecutions": "100",
    "spark.sql.streaming.ui.retainedQueries": "20",
    "spark.sql.streaming.ui.retainedProgressUpdates": "100",
    "spark.ui.showConsoleProgress": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    **RUNTIME_SETTINGS,
}


def get_or_create_spark(app_name: str, settings: Mapping[str, str] | None = None, rows_in_jvm: bool = True):
    """Return the active SparkSession, or create one with Delta and the Kafka connector.

    ``settings`` (from the pipeline YAML) override the local defaults but never the Delta
    extension settings. Under spark-submit the local defaults are not applied: the master, the
    jars (``--packages``/``--jars``) and the driver options are spark-submit's. Thread safe as far as SparkSession.builder is.
    ``rows_in_jvm=False``: no record will pass through the driver's JVM (a member whose batches
    take the one-pass Arrow path: the JVM plans, schedules and keeps the checkpoint), so a
    driver started here compiles with C1 only (:data:`COORDINATOR_JAVA_OPTIONS`).
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors write files with our packages
    builder = SparkSession.builder.appName(app_name)
    if _running_under_spark_submit():  # master, jars and JVM options come from spark-submit
        merged = {**(settings or {}), **DELTA_SETTINGS}
    else:
        merged = {**LOCAL_DEFAULTS, **(settings or {}), **DELTA_SETTINGS}
        merged["spark.jars"] = ",".join(str(j) for j in jar_files("spark"))
        os.environ.setdefault("PYSPARK_SUBMIT_ARGS", local_submit_args(rows_in_jvm, merged))
    for key, value in merged.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def local_submit_args(rows_in_jvm: bool = True, settings: Mapping[str, str] | None = None) -> str:
    """``PYSPARK_SUBMIT_ARGS`` for a member's driver started from this process
    (:func:`get_or_create_spark`'s ``rows_in_jvm``) with the session ``settings``: their
    ``spark.driver.extraJavaOptions`` goes last so that its flags win (spark-submit drops that
    setting when ``--driver-java-options`` is given, so it goes there)."""
    user_options = (settings or {}).get(DRIVER_JAVA_OPTIONS_SETTING, "")
    return submit_args(" ".join(o for o in ("" if rows_in_jvm else COORDINATOR_JAVA_OPTIONS, user_options) if o))


def submit_args(extra_java_options: str = "") -> str:
    """``PYSPARK_SUBMIT_ARGS`` for a driver this process starts. Driver JVM options only apply
    when given at launch, so they go here: the project's log4j settings, the class archive
    (:mod:`pipelines.runtime.class_archive`) when one is recorded for this JVM and these jars,
    and ``extra_java_options``."""
    from pipelines.runtime.class_archive import driver_java_options

    log4j = conf_dir() / "spark-log4j2.properties"
    options = " ".join(o for o in (f"-Dlog4j2.configurationFile={log4j}", driver_java_options(),
                                   extra_java_options) if o)
    return f"--driver-java-options {shlex.quote(options)} pyspark-shell"  # pyspark splits it with shlex


def _running_under_spark_submit() -> bool:
    """spark-submit starts the Python driver with the gateway of its own JVM."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def prepare_session(spark, hadoop_settings: Mapping[str, str] | None = None, arrow_path: bool = True) -> list[str]:
    """Make any session fit to run a member, however it was created (here or by spark-submit):
    :func:`configure_session`, then the check of the executors' Python
    (:func:`_check_executor_python`), raising :class:`SparkSessionNotReady` naming what is
    missing. Returns :func:`configure_session`'s notes."""
    notes = configure_session(spark, hadoop_settings)
    _check_executor_python(spark, arrow_path)
    return notes


def configure_session(spark, hadoop_settings: Mapping[str, str] | None = None) -> list[str]:
    """Applies :data:`RUNTIME_SETTINGS` (runtime SQL settings, so they take effect on an existing
    session), adds :data:`OPTION_REDACTION` to the session's option redaction pattern, and checks
    that Spark's Kafka source is on the classpath, raising :class:`SparkSessionNotReady` naming
    what is missing. Returns notes for the progress lines: each setting that had another value and
    was changed, and Delta's SQL extension when absent (the member writes through deltalake and
    does not need it; reading the table with Spark SQL does). ``hadoop_settings`` (the storage
    section's) go into the session's Hadoop configuration, which Spark's checkpoint and file
    access use on the driver and ship to tasks."""
    notes = []
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in (hadoop_settings or {}).items():
        hadoop.set(key, value)
    for key, value in RUNTIME_SETTINGS.items():
        current = spark.conf.get(key, None)
        if current != value:
            spark.conf.set(key, value)
            if current is not None:
                notes.append(f"{key} was {current}, set to {value}")
    spark.conf.set(OPTION_REDACTION_SETTING,
                   option_redaction_regex(spark.conf.get(OPTION_REDACTION_SETTING, None)))
    linear_interrupt_check(spark.sparkContext._jvm)
    if not _has_class(spark, KAFKA_SOURCE_CLASS):
        raise SparkSessionNotReady(
            f"Spark's Kafka source ({KAFKA_SOURCE_CLASS}) is not on the classpath; add "
            "spark-sql-kafka-0-10 with --packages or --jars (see README, Running with spark-submit)")
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if "DeltaSparkSessionExtension" not in extensions:
        notes.append("spark.sql.extensions has no io.delta.sql.DeltaSparkSessionExtension: the member "
                     "writes without it, but Spark SQL cannot read the tables in this session")
    return notes


# Spark writes two files into a query's checkpoint per micro-batch (offsets/N before it runs,
# commits/N after). On the local file system its default manager (Hadoop's FileContext) starts a
# ``readlink`` and a ``chmod`` process for each file when Hadoop's native library is missing, as
# with pip's pyspark (bench/bench_checkpoint.py measures both managers). Hadoop's FileSystem API
# renames with File.renameTo, atomic on a local disk, and starts no ``readlink``. Its
# check-then-rename meets no concurrent writer: each query of a member has a checkpoint of its own.
CHECKPOINT_MANAGER_SETTING = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_CHECKPOINT_MANAGERS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",  # older Spark 4 layout
)


def local_checkpoint_manager(qualified_checkpoint_root: str, current: str | None,
                             available: Callable[[str], bool]) -> str | None:
    """The checkpoint file manager to set for a checkpoint root (qualified as Spark resolves it):
    the first of :data:`LOCAL_CHECKPOINT_MANAGERS` that ``available`` finds, for a root on the
    local file system (``file:``) when the session sets no manager (``current``); else None (HDFS
    and object stores keep Spark's choice, so does a manager the user set)."""
    if current or not qualified_checkpoint_root.startswith("file:"):
        return None
    return next((name for name in LOCAL_CHECKPOINT_MANAGERS if available(name)), None)


def use_local_checkpoint_manager(spark, checkpoint_root: str, qualify: Callable[[str], str]) -> str | None:
    """Apply :func:`local_checkpoint_manager` to the session (a runtime setting: every query
    started in the session afterwards uses it, the member's and any other) for
    ``checkpoint_root`` as ``qualify`` resolves it (a root it cannot resolve, e.g. a scheme
    without its file system, is left to the query to report); the class set, or None."""
    try:
        qualified = qualify(checkpoint_root)
    except Exception:  # noqa: BLE001 - see the docstring
        return None
    manager = local_checkpoint_manager(qualified, spark.conf.get(CHECKPOINT_MANAGER_SETTING, None),
                                       lambda name: _has_class(spark, name))
    if manager is not None:
        spark.conf.set(CHECKPOINT_MANAGER_SETTING, manager)
    return manager


def option_redaction_regex(current: str | None) -> str:
    """``spark.sql.redaction.options.regex`` covering every secret option the framework sets,
    keeping the session's own pattern (it still redacts what it did). Idempotent."""
    if not current or current == OPTION_REDACTION or current.endswith(f"|(?:{OPTION_REDACTION})"):
        return current or OPTION_REDACTION
    return f"(?:{current})|(?:{OPTION_REDACTION})"


def linear_interrupt_check(jvm) -> bool:
    """Make Spark's check "was this foreachBatch failure the query's own stop?" linear in the
    message's length (see :data:`RECURSIVE_ANY_TEXT`): replace, in the JVM behind ``jvm`` (a py4j
    view), the compiled pattern of ``StreamExecution.PROXY_ERROR`` by the same pattern with
    :data:`LINEAR_ANY_TEXT`, which matches the same messages. Without it a query stopped during a
    batch dies of a StackOverflowError instead of ending as stopped. A Spark whose pattern lacks
    the recursive group (changed, or fixed upstream) is left alone; so is a JVM without the class
    (no Spark SQL). Idempotent; returns whether the pattern is now linear."""
    try:
        regex = getattr(jvm, SPARK_INTERRUPT_PATTERN_HOLDER).PROXY_ERROR()
        current = regex.pattern().pattern()
        if LINEAR_ANY_TEXT in current:
            return True
        if current.count(RECURSIVE_ANY_TEXT) != 1:
            return False
        field = regex.getClass().getDeclaredField("pattern")  # scala.util.matching.Regex.pattern
        field.setAccessible(True)
        field.set(regex, jvm.java.util.regex.Pattern.compile(current.replace(RECURSIVE_ANY_TEXT, LINEAR_ANY_TEXT)))
        return True
    except Exception:  # noqa: BLE001 - another Spark layout: its own pattern stays, nothing breaks
        return False


def _has_class(spark, name: str) -> bool:
    try:
        spark.sparkContext._jvm.org.apache.spark.util.Utils.classForName(name, True, False)
        return True
    except Exception:  # noqa: BLE001 - py4j wraps ClassNotFoundException
        return False


EXECUTOR_MODULES = ("pyarrow", "deltalake", "pandas")
# imported ahead of the first batch where they can be (the Spark's-Kafka-source path needs no
# confluent_kafka on the executors)
BATCH_PATH_MODULES = ("confluent_kafka", "pyarrow.json", "pyarrow.parquet", "pipelines.runtime.arrow_batches")


@contextlib.contextmanager
def executor_python_checked(spark, arrow_path: bool = True) -> Iterator[None]:
    """Check the executors' Python (:func:`_check_executor_python`) in a thread of its own while
    the block runs: the check's tasks start Python workers on the executors, the block goes on
    on the driver. Leaving waits for the check. A block that ended normally then raises the
    check's :class:`SparkSessionNotReady`, if any; an exception of the block goes on unchanged.
    ``arrow_path``: whether the member's batches run the Arrow path's jobs (which workers the
    check warms)."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="scg-executor-python-check")
    check = pool.submit(_check_executor_python, spark, arrow_path)
    pool.shutdown(wait=False)
    try:
        yield
    except BaseException:
        futures_wait([check])
        raise
    check.result()


def _check_executor_python(spark, arrow_path: bool = True) -> None:
    """Run one tiny task per core the application has: the executors' Python must import what
    the data-file writer needs. Each task's Python worker also imports the batch path's modules
    (:data:`BATCH_PATH_MODULES`), so the first batch's tasks, on the workers Spark keeps, do not.
    Spark keeps one pool of workers for Python RDD jobs and another for Arrow UDFs: with
    ``arrow_path`` the tasks are a Python RDD's, as the Arrow path's batch jobs are, else an Arrow
    UDF's (``mapInArrow``), as the Spark SQL path's."""
    slots = max(1, spark.sparkContext.defaultParallelism)
    try:
        if arrow_path:
            spark.sparkContext.parallelize(range(slots), slots).mapPartitions(_import_executor_modules).collect()
        else:
            spark.range(0, slots, 1, slots).mapInArrow(_import_executor_modules_in_arrow_udf, "ok INT").collect()
    except Exception as exc:  # noqa: BLE001 - any failure here means executors cannot write files
        detail = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        missing = [m for m in EXECUTOR_MODULES if f"No module named '{m}'" in str(exc)]
        what = f"lacks {', '.join(missing)}" if missing else f"failed ({detail})"
        raise SparkSessionNotReady(
            f"the executors' Python {what}: executors write the data files with pyarrow and "
            f"deltalake; point PYSPARK_PYTHON (or spark.pyspark.python) at a Python with this "
            f"project's packages installed") from None


def _import_executor_modules_in_arrow_udf(batches: Iterator) -> Iterator:
    """:func:`_import_executor_modules` as an Arrow UDF."""
    import pyarrow as pa

    for _ in _import_executor_modules(batches):
        yield pa.RecordBatch.from_pylist([{"ok": 1}], schema=pa.schema([("ok", pa.int32())]))


def _import_executor_modules(items: Iterator) -> Iterator:
    import importlib

    for name in EXECUTOR_MODULES:
        importlib.import_module(name)
    for name in BATCH_PATH_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # a batch that needs it fails itself, naming it
            pass
    for _ in items:
        pass
    yield 1
