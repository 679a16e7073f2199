"""Every example pipeline (pipelines/resources/pipelines/) is run, not only validated. demo.yaml
is run by the demo test; this module runs ``example-secure.yaml`` with ``bin/scg run`` against the
secured broker (``secure_kafka``), through the environment variables the file reads. The file is
used as shipped except its absolute ``/tmp/scg/orders/...`` table and checkpoint paths, which a
copy redirects under the test's directory (the config has no ``${ENV}`` for paths).

The file says ``starting_offsets: error`` (fail rather than guess): a new group has no committed
offsets, so, as an operator must before the first start, the test sets the group's offsets
first (to the log start, as ``kafka-consumer-groups --reset-offsets --to-earliest`` would)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient

from pipelines.config import load_pipeline
from pipelines.local.acls import Acl, AclAdmin
from pipelines.runtime.install_paths import PROJECT_ROOT
from tests.support.kafka_data import create_topic, delta_coordinates, log_end_offsets, produce, table_reached
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
SCG = str(PROJECT_ROOT / "bin" / "scg")
EXAMPLE = PROJECT_ROOT / "pipelines" / "resources" / "pipelines" / "example-secure.yaml"
SHIPPED_ROOT = "/tmp/scg/orders/"
PARTITIONS = 2
RECORDS_PER_TOPIC = 600   # 1,200 in all: above the file's min_offsets_per_trigger (1000)
HANG_GUARD_S = 600


def _orders(n: int, region: str):
    return [(f"c{i % 13}", json.dumps({"order_id": f"{region}-{i}", "customer_id": i % 13,
                                       "total": f"{i}.{i % 100:02d}", "created_at": "2026-11-22T10:00:00Z"}))
            for i in range(n)]


def _set_group_offsets(admin_config, group: str, topics) -> None:
    """Commit offset 0 for every partition of ``topics`` as the group's (an Empty group takes a
    commit from a non-member); retried while the new topics' metadata spreads (a per-partition
    error), then read back."""
    admin = AdminClient(admin_config)
    wanted = [CkTopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)]

    def committed() -> bool:
        request = ConsumerGroupTopicPartitions(group, wanted)
        result = admin.alter_consumer_group_offsets([request])[group].result(timeout=30)
        if any(tp.error is not None for tp in result.topic_partitions):
            return False
        asked = [CkTopicPartition(tp.topic, tp.partition) for tp in wanted]
        listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, asked)])
        offsets = listed[group].result(timeout=30).topic_partitions
        return sorted((tp.topic, tp.partition, tp.offset) for tp in offsets) == sorted(
            (tp.topic, tp.partition, 0) for tp in wanted)
    try:
        wait_until(committed, 120, f"group {group} to hold offset 0 for {topics}", poll_s=1)
    finally:
        admin = None  # destroyed now, not after the session's broker stops


def test_example_secure_runs_as_shipped_and_writes_each_record_once(secure_kafka, spark, tmp_path):
    security = secure_kafka.security
    admin_config = security.admin_config()
    suffix = uuid.uuid4().hex[:8]
    topics = [f"orders.eu.{suffix}", f"orders.us.{suffix}"]
    config_path = tmp_path / "example-secure.yaml"
    shipped = EXAMPLE.read_text()
    assert shipped.count(SHIPPED_ROOT) == 3  # table, dead letters, checkpoints: nothing else is changed
    config_path.write_text(shipped.replace(SHIPPED_ROOT, f"{tmp_path}/orders/"))
    env = {**os.environ, "KAFKA_BOOTSTRAP": security.sasl_ssl_bootstrap, "KAFKA_USER": security.client_username,
           "KAFKA_PASSWORD": Path(security.client_password_file).read_text().strip(),
           "KAFKA_CA_FILE": security.ca_file, "SCG_INSTANCE_ID": "orders-0", "PYTHONUNBUFFERED": "1"}
    config = load_pipeline(config_path, env=env)
    group = config.group.id

    for topic in topics:
        create_topic(security.sasl_ssl_bootstrap, topic, PARTITIONS, client=admin_config)
    AclAdmin(admin_config).grant(security.client_principal,
                                 [Acl.topic("orders.", "READ", pattern="PREFIXED"), Acl.group(group, "READ")])
    _set_group_offsets(admin_config, group, topics)
    produced = set()
    for topic, region in zip(topics, ("eu", "us")):
        produced |= produce(security.sasl_ssl_bootstrap, topic, _orders(RECORDS_PER_TOPIC, region),
                            client=admin_config)

    validated = subprocess.run([SCG, "validate", str(config_path)], capture_output=True, text=True, env=env,
                               timeout=HANG_GUARD_S)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    log_path = tmp_path / "member.log"
    with open(log_path, "w") as log:
        member = subprocess.Popen([SCG, "run", str(config_path)], stdout=log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
    try:
        ends = log_end_offsets(produced)

        def done() -> bool:
            assert member.poll() is None, f"the member exited ({member.returncode}):\n{log_path.read_text()[-4000:]}"
            return table_reached(config.sink.path, config.name, ends)
        wait_until(done, HANG_GUARD_S, "the table to hold every produced order")
    finally:
        if member.poll() is None:
            member.send_signal(signal.SIGTERM)
        try:
            code = member.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(member.pid, signal.SIGKILL)
            raise
    assert code == 0, log_path.read_text()[-4000:]
    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)) == len(produced) and set(rows) == produced
    table = spark.read.format("delta").load(config.sink.path)
    assert {r.day.isoformat() for r in table.select("day").distinct().collect()} == {"2026-11-22"}
    assert spark.read.format("delta").load(config.sink.dead_letter_path).count() == 0
