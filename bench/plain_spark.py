"""Plain Spark as a user would write it without this project, run as a whole process (the
baseline of bench/bench_backfill.py and bench/bench_freshness.py): Spark's Kafka source →
``from_json`` → delta-spark's streaming Delta sink, on ``local[2]``.

    python bench/plain_spark.py BOOTSTRAP TOPIC TABLE_PATH available-now
    python bench/plain_spark.py BOOTSTRAP TOPIC TABLE_PATH stream TRIGGER STOP_FILE

``available-now`` reads what is there and exits; ``stream`` runs with ``processingTime TRIGGER``
until STOP_FILE exists. The output keeps the Kafka coordinates and ``timestamp`` as this project's
output table does.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SCHEMA = "id BIGINT, name STRING, category STRING, amount DOUBLE, note STRING"


def main(bootstrap: str, topic: str, path: str, mode: str, trigger: str = "2 seconds", stop_file: str = "") -> None:
    from pyspark.sql import functions as F

    from pipelines.runtime.spark_session import get_or_create_spark

    spark = get_or_create_spark("plain-spark", {"spark.master": "local[2]"})
    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "500000").load())
    parsed = stream.select("topic", "partition", "offset", "timestamp", F.col("key").cast("string").alias("key"),
                           F.from_json(F.col("value").cast("string"), SCHEMA).alias("j")).select(
        "topic", "partition", "offset", "timestamp", "key", "j.*")
    writer = parsed.writeStream.format("delta").option("checkpointLocation", tempfile.mkdtemp(prefix="plain-cp-"))
    if mode == "available-now":
        writer.trigger(availableNow=True).start(path).awaitTermination()
    else:
        query = writer.trigger(processingTime=trigger).start(path)
        while not Path(stop_file).exists() and query.isActive:
            time.sleep(0.2)
        query.stop()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
