"""Record the class archive a Spark driver started here maps (:mod:`pipelines.runtime.class_archive`).

``bin/bootstrap`` runs ``python -m pipelines.local.record_class_archive``: when no archive is
recorded for the current JVM and jars, a child driver started with ``-XX:ArchiveClassesAtExit``
does what a member's driver does before its first batch (:func:`record_classes`, no broker
needed) and the JVM writes the classes it loaded when it exits. Takes about a minute, once.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pipelines.runtime.class_archive import archive_path, beside, current_key, holds
from pipelines.runtime.spark_session import submit_args

RECORD_TIMEOUT_S = 600


def record_classes(work_dir: Path) -> None:
    """What a member's driver does before its first batch, without a broker: the session and its
    checks, the output analysis, the batch path's warm-up (:func:`batch_writer.warm_up`), a
    micro-batch of a streaming query through ``foreachBatch``, the Kafka source's plan, and a
    Delta table read with delta-spark. Run by :func:`record` in a driver that dumps its classes."""
    from pyspark.sql import functions as F

    from pipelines.config import load_pipeline
    from pipelines.runtime.batch_writer import PlannedWrite, SparkBatch, TableTargets, warm_up
    from pipelines.runtime.pipeline_tables import open_tables
    from pipelines.runtime.spark_session import get_or_create_spark, prepare_session

    pipeline = work_dir / "pipeline.yaml"
    pipeline.write_text(
        "name: scg-class-archive\nkafka: {bootstrap_servers: 127.0.0.1:9}\ntopics: [scg-class-archive]\n"
        "group: {id: scg-class-archive}\n"
        f"sink: {{path: {work_dir / 'table'}, dead_letter_path: {work_dir / 'dead'}}}\n"
        f"checkpoint_root: {work_dir / 'checkpoints'}\n"
        'format: {type: json, schema: "id BIGINT, name STRING"}\n')
    config = load_pipeline(pipeline)
    spark = get_or_create_spark("scg-class-archive", {**config.spark_conf(), "spark.master": "local[1]"})
    prepare_session(spark)
    tables = open_tables(config, spark)
    targets = TableTargets(tables.table, tables.dead_table, {}, {})
    warm_up(spark, tables.record_format, None, targets)

    def one_batch(rows, batch_id):
        writes = [PlannedWrite(table.file_writer(file_prefix="archive"), {})
                  for table in (tables.dead_table, tables.table)]
        SparkBatch(rows, tables.record_format, None).write_both(*writes)

    kafka_shaped = spark.readStream.format("rate").option("rowsPerSecond", 10).load().select(
        F.lit(b"k").alias("key"), F.to_json(F.struct("value")).cast("binary").alias("value"),
        F.lit("scg-class-archive").alias("topic"), F.lit(0).alias("partition"),
        F.col("value").alias("offset"), F.col("timestamp"), F.lit(0).alias("timestampType"))
    query = (kafka_shaped.writeStream.foreachBatch(one_batch).trigger(availableNow=True)
             .option("checkpointLocation", str(work_dir / "checkpoints" / "rate")).start())
    query.awaitTermination(RECORD_TIMEOUT_S)
    spark.readStream.format("kafka").options(**tables.source_options).option("subscribe", "x").load().schema
    spark.range(3).write.format("delta").save(str(work_dir / "delta-spark"))
    spark.read.format("delta").load(str(work_dir / "delta-spark")).collect()
    jvm = spark.sparkContext._gateway.proc  # pyspark's spark-submit child, the driver JVM
    spark.stop()
    jvm.stdin.close()  # the driver JVM exits when its stdin closes, writing the archive first
    jvm.wait(RECORD_TIMEOUT_S)


def record(archive: Path | None = None, log=print) -> bool:
    """Record the archive for the current JVM and jars unless it is already there, or a
    recording for them failed before (not retried at every bootstrap; delete ``.failed`` to
    retry). True when an archive matching the current key exists afterwards. The driver's output
    (the JVM lists every class it could not archive) goes to ``<archive>.log``."""
    archive = archive or archive_path()
    key = current_key()
    if key is None:
        log("no java found: Spark's classes are not archived")
        return False
    key_file, failed, partial = (beside(archive, suffix) for suffix in (".key", ".failed", ".partial"))
    if archive.is_file() and holds(key_file, key):
        return True
    if holds(failed, key):
        return False
    archive.parent.mkdir(parents=True, exist_ok=True)
    for stale in (archive, key_file, failed, partial):
        stale.unlink(missing_ok=True)
    log("archiving the classes a Spark driver loads, so members start faster (first run only, about a minute)")
    with tempfile.TemporaryDirectory(prefix="scg-class-archive-") as work, \
            open(beside(archive, ".log"), "w") as out:
        from pipelines.runtime.spark_session import submit_args

        env = {**os.environ, "PYSPARK_SUBMIT_ARGS": submit_args(f"-XX:ArchiveClassesAtExit={partial}")}
        code = f"from pathlib import Path; from pipelines.local.record_class_archive import record_classes; record_classes(Path({work!r}))"
        try:
            done = subprocess.run([sys.executable, "-c", code], env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=RECORD_TIMEOUT_S).returncode == 0
        except subprocess.TimeoutExpired:
            done = False
    if not done or not partial.is_file():
        partial.unlink(missing_ok=True)
        failed.write_text(key + "\n")
        log(f"could not archive Spark's classes (see {out.name}); members start without the archive")
        return False
    partial.rename(archive)
    key_file.write_text(key + "\n")
    return True


if __name__ == "__main__":  # bin/bootstrap; an archive that cannot be recorded fails nothing
    record(log=lambda text: print(f"[bootstrap] {text}", file=sys.stderr))
