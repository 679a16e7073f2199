"""Build the SparkSession a pipeline runs in: Delta Lake enabled, Kafka source on the classpath.

Inside ``spark-submit`` the session already exists (with ``--packages`` or ``--jars`` supplying
the connectors) and is reused as is. Started from plain Python (``bin/scg run``, tests), the
session is created with the jars bin/bootstrap resolved, so no network is needed at run time.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from pipelines.runtime.install_paths import conf_dir, jar_files

DELTA_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

LOCAL_DEFAULTS = {
    "spark.master": "local[*]",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopTimeout": "60s",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
}


def get_or_create_spark(app_name: str, settings: Mapping[str, str] | None = None):
    """Return the active SparkSession, or create one with Delta and the Kafka connector.

    ``settings`` (from the pipeline YAML) override the local defaults but never the Delta
    extension settings. Under spark-submit the local defaults are not applied: the master, the
    jars (``--packages``/``--jars``) and the driver options are spark-submit's. Thread safe as far as SparkSession.builder is.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if _running_under_spark_submit():  # master, jars and JVM options come from spark-submit
        merged = {**(settings or {}), **DELTA_SETTINGS}
    else:
        merged = {**LOCAL_DEFAULTS, **(settings or {}), **DELTA_SETTINGS}
        merged["spark.jars"] = ",".join(str(j) for j in jar_files("spark"))
        # Driver JVM options only apply when given at launch, so they go through the submit args.
        log4j = conf_dir() / "spark-log4j2.properties"
        os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                              f'--driver-java-options "-Dlog4j2.configurationFile={log4j}" pyspark-shell')
    for key, value in merged.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _running_under_spark_submit() -> bool:
    """spark-submit starts the Python driver with the gateway of its own JVM."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
