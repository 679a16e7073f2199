"""`scg demo`: the main job end to end on an embedded local Kafka.

Starts a local broker, creates a topic, produces sample JSON events, runs the demo pipeline
(pipelines/resources/pipelines/demo.yaml, package data) as one group member until every produced
record is in the Delta table, prints the count and a few rows read back through delta-spark, and
stops everything it started, also on Ctrl-C. Every Kafka client it makes is closed before the
broker stops (an rdkafka client that outlives its broker logs "Connection refused" until the
process ends).
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import random
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from pipelines.runtime.install_paths import conf_dir, state_dir

DEMO_FILE = conf_dir() / "pipelines" / "demo.yaml"
FINISH_TIMEOUT_S = 240.0
ACTIONS = ("view", "click", "add_to_cart", "purchase")


def say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def run_demo(records: int = 20000, partitions: int = 6) -> int:
    from pipelines.local.local_kafka import LocalKafka

    home = state_dir() / "demo"
    kafka = LocalKafka(home / "kafka")
    kafka.stop()  # a previous demo killed hard may have left its broker behind
    shutil.rmtree(home / "data", ignore_errors=True)
    try:
        say("starting a local Apache Kafka broker (KRaft) ...")
        cluster = kafka.start(brokers=1, progress=say)
        say(f"Kafka ready at {cluster.bootstrap_servers}")
        config = _demo_config(cluster.bootstrap_servers, home / "data")
        create_topic(cluster.bootstrap_servers, config.topics[0], partitions)
        produce_events(cluster.bootstrap_servers, config.topics[0], records)
        return _run_until_complete(config, records)
    finally:
        gc.collect()  # clients held only by reference cycles (runner <-> member) are destroyed now
        say("stopping Kafka ...")
        kafka.stop()
        say("done")


def _demo_config(bootstrap: str, data: Path):
    from pipelines.config import load_pipeline

    config = load_pipeline(DEMO_FILE)
    kafka = dataclasses.replace(config.kafka, bootstrap_servers=(bootstrap,))
    sink = dataclasses.replace(config.sink, path=str(data / "events"),
                               dead_letter_path=str(data / "events_dead_letters"))
    return dataclasses.replace(config, kafka=kafka, sink=sink,
                               checkpoint_root=str(data / "checkpoints"))


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    say(f"creating topic {topic} with {partitions} partitions")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
    finally:
        admin = None  # the last reference: the client is destroyed here, also on an error


def produce_events(bootstrap: str, topic: str, count: int, seed: int = 7) -> None:
    from confluent_kafka import Producer

    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(count):
        event = {"event_id": i, "user": f"user-{rng.randrange(500)}", "action": rng.choice(ACTIONS),
                 "amount": round(rng.uniform(1, 300), 2), "ts": "2026-11-22T10:00:00Z"}
        producer.produce(topic, key=event["user"], value=json.dumps(event))
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(60)
    producer = None  # the last reference: the client is destroyed before the broker can stop
    say(f"produced {count} JSON events to {topic}")


def _run_until_complete(config, expected: int) -> int:
    from pipelines.runtime.pipeline_tables import batches_skip_the_jvm
    from pipelines.runtime.runner import PipelineRunner
    from pipelines.runtime.spark_session import get_or_create_spark

    say("starting Spark with Delta Lake and the Kafka source ...")
    spark = get_or_create_spark("scg-demo", config.spark_conf(), rows_in_jvm=not batches_skip_the_jvm(config))
    say("Spark is up; preparing the Delta tables")
    runner = PipelineRunner.open(config, spark, out=lambda line: print(line, flush=True))
    done = _all_recorded(config, expected)
    deadline = time.monotonic() + FINISH_TIMEOUT_S
    interrupted = threading.Event()
    with _ctrl_c_sets(interrupted):
        runner.run(interrupted, until=lambda: done() or time.monotonic() > deadline)
    if interrupted.is_set():
        say("interrupted: the query stopped at a batch boundary and the member left its group")
        return 130
    if not done():
        say(f"not all records arrived within {FINISH_TIMEOUT_S:.0f}s")
        return 1
    exact = _show_table(spark, config.sink.path, expected)
    spark.stop()
    return 0 if exact else 1


@contextlib.contextmanager
def _ctrl_c_sets(event: threading.Event):
    """Inside the block, the first Ctrl-C (SIGINT) sets ``event`` (the runner then stops at a batch
    boundary and leaves its group) instead of raising KeyboardInterrupt wherever the main thread
    is, e.g. inside a py4j call; a second one raises it as usual."""
    def first(signum, frame):
        event.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _all_recorded(config, expected: int):
    """A predicate: the table's recorded offsets reach the log end of every partition."""
    from groupmgr.core import TopicPartition
    from pipelines.runtime.broker_probe import log_end_offsets
    from sinks.txn_table import read_recorded_offsets

    topic = config.topics[0]
    partitions = [TopicPartition(topic, p) for p in range(_partition_count(config, topic))]
    latest = log_end_offsets(config.kafka.confluent_config(), partitions)

    def done() -> bool:
        recorded = read_recorded_offsets(config.sink.path, config.name, partitions,
                                         config.storage.delta_storage_options())
        return sum(latest.values()) == expected and all(
            (recorded.get(tp) or 0) >= latest[tp] for tp in partitions)
    return done


def _partition_count(config, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(config.kafka.confluent_config())
    try:
        return len(admin.list_topics(topic, timeout=30).topics[topic].partitions)
    finally:
        admin = None  # destroyed before the broker can stop


def _show_table(spark, path: str, expected: int) -> bool:
    """Print the table's count and first rows; True when it holds each produced record once."""
    table = spark.read.format("delta").load(path)
    count = table.count()
    distinct = table.select("topic", "partition", "offset").distinct().count()
    say(f"Delta table {path}: {count} rows ({distinct} distinct Kafka coordinates), "
        f"{expected} produced")
    table.orderBy("partition", "offset").show(5, truncate=False)
    if count != expected or distinct != expected:
        print("demo: row count does not match what was produced", file=sys.stderr)
        return False
    return True
