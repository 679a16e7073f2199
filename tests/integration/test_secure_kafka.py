"""The secured local Kafka against real clients: SCRAM-SHA-512 over TLS and mutual TLS with
confluent-kafka and kafka-python, refusals (wrong password, unknown user, no or untrusted client
certificate) as errors rather than hangs, ACLs enforced per principal, and no secret in the
cluster's files or logs. Every wait is bounded by a deadline."""
from __future__ import annotations

import json
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pipelines.local.acls import Acl, AclAdmin, consumer_acls, producer_acls
from pipelines.local.certificates import issue_client_certificate
from pipelines.local.local_kafka import free_port
from pipelines.runtime.install_paths import PROJECT_ROOT

pytestmark = pytest.mark.integration

WAIT_S = 30.0
REFUSED = {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError._TRANSPORT,
           KafkaError._ALL_BROKERS_DOWN}


class _Quiet:
    def log(self, *args, **kwargs):
        pass


def quiet(conf: dict) -> dict:
    return {**conf, "log_level": 0, "logger": _Quiet()}


@pytest.fixture(scope="module")
def security(secure_kafka):
    return secure_kafka.security


@pytest.fixture(scope="module")
def acl_admin(security):
    return AclAdmin(security.admin_config())


@pytest.fixture
def topic(security, unique_name) -> str:
    admin = AdminClient(quiet(security.admin_config()))
    admin.create_topics([NewTopic(unique_name, 2, 1)])[unique_name].result(timeout=WAIT_S)
    return unique_name


def produce(conf: dict, topic: str, n: int) -> None:
    producer = Producer(quiet({**conf, "acks": "all", "message.timeout.ms": int(WAIT_S * 1000)}))
    failed = []
    for i in range(n):
        producer.produce(topic, value=f"m{i}".encode(), partition=i % 2,
                         on_delivery=lambda err, msg: err and failed.append(err))
    assert producer.flush(WAIT_S) == 0 and not failed, failed


def consume(conf: dict, topic: str, group: str, n: int) -> list[bytes]:
    consumer = Consumer(quiet({**conf, "group.id": group, "auto.offset.reset": "earliest",
                               "enable.auto.commit": False}))
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(seen) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            seen.append(msg.value())
    finally:
        consumer.close()
    return seen


def first_consumer_error(conf: dict, topic: str, group: str) -> KafkaError:
    """The first error a subscribed consumer reports (bounded)."""
    consumer = Consumer(quiet({**conf, "group.id": group, "auto.offset.reset": "earliest",
                               "enable.auto.commit": False}))
    consumer.subscribe([topic])
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is not None, "a record was read"
                return msg.error()
    finally:
        consumer.close()
    pytest.fail(f"no error within {WAIT_S}s")


def refusal(conf: dict) -> set[int]:
    """Error codes a client reports while it is refused; fails if it is ever served metadata."""
    errors: list[KafkaError] = []
    admin = AdminClient(quiet({**conf, "error_cb": errors.append}))
    deadline = time.monotonic() + WAIT_S
    while not errors and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=2)
        except KafkaException:
            pass
        else:
            pytest.fail("the broker served metadata to a client it should refuse")
        admin.poll(0.1)
    assert errors, f"no error reported within {WAIT_S}s"
    return {e.code() for e in errors}


def messages(n: int) -> list[bytes]:
    return sorted(f"m{i}".encode() for i in range(n))


# -- SCRAM-SHA-512 over TLS ----------------------------------------------------------------------
def test_scram_client_with_acls_produces_and_consumes(security, acl_admin, topic):
    group = f"{topic}-g"
    acl_admin.grant(security.client_principal, producer_acls(topic) + consumer_acls(topic, group))
    produce(security.scram_config(), topic, 20)
    assert sorted(consume(security.scram_config(), topic, group, 20)) == messages(20)


@pytest.mark.parametrize("who", ["wrong password", "unknown user"])
def test_bad_credentials_are_an_authentication_error(security, who):
    conf = (security.scram_config(password="not-the-password") if who == "wrong password"
            else security.scram_config(username=f"nobody-{uuid.uuid4().hex[:6]}", password="x"))
    assert KafkaError._AUTHENTICATION in refusal(conf)


def test_broker_certificate_from_another_ca_is_not_trusted(security, tmp_path):
    other_ca = issue_client_certificate(tmp_path, "x").cert_file.with_name("ca.pem")
    conf = {**security.scram_config(), "ssl.ca.location": str(other_ca)}
    assert refusal(conf) & {KafkaError._SSL, KafkaError._TRANSPORT}


# -- mutual TLS ----------------------------------------------------------------------------------
def test_mtls_client_with_acls_produces_and_consumes(security, acl_admin, topic):
    group = f"{topic}-g"
    acl_admin.grant(security.client_principal, producer_acls(topic) + consumer_acls(topic, group))
    produce(security.mtls_config(), topic, 10)
    assert sorted(consume(security.mtls_config(), topic, group, 10)) == messages(10)


def test_mtls_without_client_certificate_is_refused(security):
    assert refusal(security.mtls_config(with_certificate=False)) & REFUSED


def test_mtls_with_a_certificate_of_another_ca_is_refused(security, tmp_path):
    stranger = issue_client_certificate(tmp_path, "stranger")
    assert refusal(security.mtls_config(stranger.cert_file, stranger.key_file)) & REFUSED


# -- ACLs --------------------------------------------------------------------------------------
def test_principal_without_read_on_the_topic_is_denied_by_name(security, acl_admin, topic):
    produce(security.admin_config(), topic, 4)
    reader, password, group = f"reader-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex, f"{topic}-g"
    acl_admin.create_scram_user(reader, password)
    lacking_read = [a for a in consumer_acls(topic, group) if a != Acl.topic(topic, "READ")]
    acl_admin.grant(f"User:{reader}", lacking_read)
    error = first_consumer_error(security.scram_config(reader, password), topic, group)
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error


def test_certificate_principal_without_read_on_the_group_is_denied_by_name(security, acl_admin, topic):
    cert = issue_client_certificate(Path(security.ca_file).parent, f"member-{uuid.uuid4().hex[:6]}")
    group = f"{topic}-g"
    lacking_group = [a for a in consumer_acls(topic, group) if a.resource_type != "GROUP"]
    acl_admin.grant(cert.principal, lacking_group)
    error = first_consumer_error(security.mtls_config(cert.cert_file, cert.key_file), topic, group)
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error


def test_grant_and_revoke_are_enforced(security, acl_admin, topic):
    produce(security.admin_config(), topic, 6)
    principal = f"User:{security.client_username}"
    group = f"{topic}-g"
    acl_admin.grant(principal, consumer_acls(topic, group))
    assert set(consumer_acls(topic, group)) <= acl_admin.acls(principal)
    assert len(consume(security.scram_config(), topic, group, 6)) == 6
    acl_admin.revoke(principal, [Acl.topic(topic, "READ")])
    assert Acl.topic(topic, "READ") not in acl_admin.acls(principal)
    error = first_consumer_error(security.scram_config(), topic, group)  # nothing committed: from 0
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error


# -- kafka-python (the group member's client) ---------------------------------------------------
@pytest.mark.parametrize("listener", ["sasl_ssl", "mtls"])
def test_kafka_python_reads_over_each_listener(security, acl_admin, topic, listener):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    acl_admin.grant(security.client_principal, [Acl.topic(topic, "READ")])
    produce(security.admin_config(), topic, 8)
    kwargs = security.kafka_python_scram() if listener == "sasl_ssl" else security.kafka_python_mtls()
    consumer = KafkaConsumer(**kwargs, enable_auto_commit=False, bootstrap_timeout_ms=int(WAIT_S * 1000),
                             request_timeout_ms=int(WAIT_S * 1000))
    seen: list[bytes] = []
    try:
        consumer.assign([KafkaTopicPartition(topic, p) for p in (0, 1)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + WAIT_S
        while len(seen) < 8 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                seen.extend(r.value for r in records)
    finally:
        consumer.close()
    assert sorted(seen) == messages(8)


# -- no secret in the cluster's files -----------------------------------------------------------
def test_secrets_stay_in_their_files(secure_kafka, security):
    state_dir = Path(secure_kafka.nodes[0].log_file).parents[2]
    passwords = [Path(f).read_text().strip() for f in (security.admin_password_file,
                                                        security.client_password_file)]
    key_body = Path(security.client_key_file).with_name("broker-key.pem").read_text().splitlines()[1]
    for path in (security.admin_password_file, security.client_password_file, security.client_key_file):
        assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600, path
    assert stat.S_IMODE(Path(security.admin_password_file).parent.stat().st_mode) == 0o700
    props = Path(secure_kafka.nodes[0].log_file).with_name("server.properties")
    assert stat.S_IMODE(props.stat().st_mode) == 0o600
    recorded = json.loads((state_dir / "cluster.json").read_text())["security"]
    assert recorded["admin_password_file"] == security.admin_password_file
    for text in ((state_dir / "cluster.json").read_text(), Path(secure_kafka.nodes[0].log_file).read_text()):
        assert not any(p in text for p in passwords) and key_body not in text


# -- the command line -------------------------------------------------------------------------------
def test_scg_kafka_start_secure_prints_working_pipeline_settings(tmp_path):
    port = free_port()
    scg = [str(PROJECT_ROOT / "bin" / "scg")]
    started = subprocess.run(scg + ["kafka", "start", "--secure", "--port", str(port), "--dir", str(tmp_path)],
                             capture_output=True, text=True, timeout=300)
    try:
        assert started.returncode == 0, started.stderr
        out = started.stdout
        assert out.strip().splitlines()[-1] == f"127.0.0.1:{port}"
        sections = _commented_yaml_blocks(out.strip().splitlines()[:-1])
        assert [s["kafka"]["bootstrap_servers"] for s in sections] == [f"127.0.0.1:{port}",
                                                                      f"127.0.0.1:{port + 1}"]
        scram = sections[0]["kafka"]["security"]
        password = Path(scram["sasl_password_file"]).read_text().strip()
        assert password not in out + started.stderr
        conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL",
                "sasl.mechanism": scram["sasl_mechanism"], "sasl.username": scram["sasl_username"],
                "sasl.password": password, "ssl.ca.location": scram["ssl_ca_location"]}
        admin = AdminClient(quiet(conf))  # held: a collected client cancels its futures
        admin.create_topics([NewTopic("cli", 2, 1)])["cli"].result(timeout=WAIT_S)
        produce(conf, "cli", 2)  # --secure grants the client user every topic and group
        status = subprocess.run(scg + ["kafka", "status", "--dir", str(tmp_path)],
                                capture_output=True, text=True, timeout=60)
        assert f"127.0.0.1:{port + 1} (mutual TLS)" in status.stdout
    finally:
        stopped = subprocess.run(scg + ["kafka", "stop", "--dir", str(tmp_path)],
                                 capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0 and "stopped 1" in stopped.stdout


def _commented_yaml_blocks(lines: list[str]) -> list[dict]:
    """The YAML documents between ``# ...`` comment lines."""
    blocks: list[list[str]] = []
    for line in lines:
        if line.startswith("#"):
            blocks.append([])
        else:
            blocks[-1].append(line)
    return [yaml.safe_load("\n".join(block)) for block in blocks if block]
