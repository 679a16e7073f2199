"""Pipelines against a secured broker: SASL_SSL with SCRAM-SHA-512 and mutual TLS,
KRaft's StandardAuthorizer with ACLs (the ``secure_kafka`` fixture).

* two ``scg run`` members share a topic on each listener, exactly once (checked through
  delta-spark), with only READ on the topic and READ on the group (no cluster ACL at all: the
  member needs none); ``scg validate`` and ``scg describe`` work with the same file;
* the password or the private key never shows: member output, the Spark event log, ``describe
  --json``, ``explain`` and ``lastProgress`` of a query with the same options, ``repr`` of the
  config and runtime objects;
* a wrong password, an unknown user, an untrusted broker certificate, a missing or untrusted
  client certificate, no READ on the topic, no READ on the group: ``scg run`` ends with exit 1 and
  one named condition before Spark starts (a TLS file that is not there: exit 2 at load).
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from pipelines.config import load_pipeline
from pipelines.local.acls import Acl, AclAdmin
from pipelines.local.certificates import ensure_certificates, issue_client_certificate
from pipelines.runtime.assigned_source import SOURCE_NAME, AssignedKafkaSource, assigned_source_options
from pipelines.runtime.install_paths import PROJECT_ROOT
from pipelines.runtime.kafka_access import check_kafka_access
from pipelines.runtime.pipeline_tables import open_tables
from pipelines.runtime.membership import member_config_for
from pipelines.runtime.spark_session import prepare_session
from tests.e2e.harness import MemberProcess
from tests.support.kafka_data import create_topic, delta_coordinates, json_events, log_end_offsets, produce, table_reached
from tests.support.member_group import owned_once_by_all, stop_all
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
SCG = str(PROJECT_ROOT / "bin" / "scg")
PARTITIONS = 4
HANG_GUARD_S = 300  # a bound on a hung process, not a timing assertion: failures end before Spark starts


def _canaries(security, listener: str) -> list[str]:
    """Secrets that must never show: the SCRAM password, or a line of the client's private key."""
    if listener == "sasl_ssl":
        return [Path(security.client_password_file).read_text().strip()]
    key_lines = Path(security.client_key_file).read_text().splitlines()
    return [line for line in key_lines if line and not line.startswith("-----")][:2]


def _pipeline(path: Path, kafka: dict, topic: str, name: str, extra: dict | None = None) -> Path:
    data = {
        "name": name, "kafka": kafka, "topics": [topic],
        "group": {"id": name, "session_timeout": "6s", "heartbeat_interval": "500ms"},
        "source": {"starting_offsets": "earliest"},
        "format": {"type": "json", "schema": "id BIGINT, name STRING"},
        "sink": {"path": str(path.parent / "table"), "dead_letter_path": str(path.parent / "dead")},
        "trigger": {"processing_time": "500ms"},
        "checkpoint_root": str(path.parent / "checkpoints"),
        **(extra or {}),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _grant_member_acls(secure_kafka, topic: str, group: str, topic_ops=("READ",), group_ops=("READ",)) -> None:
    acls = [Acl.topic(topic, op) for op in topic_ops] + [Acl.group(group, op) for op in group_ops]
    AclAdmin(secure_kafka.security.admin_config()).grant(secure_kafka.security.client_principal, acls)


def _scg(*args, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess:
    return subprocess.run([SCG, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _own_principal(security, listener: str, tmp_path: Path, name: str) -> tuple[dict, str, list[str]]:
    """A principal of this test only (the session broker's ``scg-client`` collects other tests'
    ACLs): a new SCRAM user, or a new client certificate of the broker's CA. Returns the pipeline's
    ``kafka:`` section, the principal and its secrets (canaries)."""
    kafka = security.pipeline_kafka(listener)
    if listener == "sasl_ssl":
        password = secrets.token_urlsafe(24)
        AclAdmin(security.admin_config()).create_scram_user(name, password)
        password_file = tmp_path / f"{name}.password"
        password_file.write_text(password + "\n")
        kafka["security"].update(sasl_username=name, sasl_password_file=str(password_file))
        return kafka, f"User:{name}", [password]
    certificate = issue_client_certificate(Path(security.ca_file).parent, name)
    kafka["security"].update(ssl_certificate_location=str(certificate.cert_file),
                             ssl_key_location=str(certificate.key_file))
    key_lines = certificate.key_file.read_text().splitlines()
    return kafka, certificate.principal, [line for line in key_lines if line and not line.startswith("-----")][:2]


@pytest.mark.parametrize("listener, reader", [("sasl_ssl", "spark-kafka"), ("mtls", "scg-kafka")])
def test_two_members_share_a_topic_exactly_once_over_a_secured_listener(listener, reader, secure_kafka, spark,
                                                                      tmp_path, unique_name):
    """Each reader over one listener: Spark's Kafka source (JAAS options) and scg-kafka (librdkafka
    on the executors, the client key passed inline)."""
    security = secure_kafka.security
    admin = security.admin_config()
    topic = group = unique_name
    create_topic(security.sasl_ssl_bootstrap, topic, PARTITIONS, client=admin)
    kafka, principal, canaries = _own_principal(security, listener, tmp_path, f"member-{uuid.uuid4().hex[:10]}")
    # READ on the topic and on the group, nothing else: no cluster ACL is needed
    AclAdmin(admin).grant(principal, [Acl.topic(topic, "READ"), Acl.group(group, "READ")])
    assert {acl.resource_type for acl in AclAdmin(admin).acls(principal)} == {"TOPIC", "GROUP"}
    produced = produce(security.sasl_ssl_bootstrap, topic, json_events(400), client=admin)
    events = tmp_path / "events"
    events.mkdir()
    path = _pipeline(tmp_path / "pipeline.yaml", kafka, topic, group,
                     {"spark": {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
                                "spark.eventLog.compress": "false"},
                      "source": {"starting_offsets": "earliest", "reader": reader,
                                 # the second member may find the first in the group: a short warm-up
                                 **({"warm_up_limit": "5s"} if reader == "scg-kafka" else {})}})
    config = load_pipeline(path)

    validated = _scg("validate", path)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    members = [MemberProcess(n, path, tmp_path) for n in ("a", "b")]
    try:
        wait_until(lambda: owned_once_by_all(members, PARTITIONS), 600, "two members sharing the partitions")
        produced |= produce(security.sasl_ssl_bootstrap, topic, json_events(400, start=400), client=admin)
        ends = log_end_offsets(produced)
        wait_until(lambda: owned_once_by_all(members, PARTITIONS)
                   and table_reached(config.sink.path, config.name, ends), 600,
                   "the table to hold every produced record")
        described = _scg("describe", "--pipeline", path, "--json")
    finally:
        codes = stop_all(members)
    assert codes == [0, 0], "\n".join(member.tail() for member in members)
    assert described.returncode == 0, described.stdout + described.stderr
    assert json.loads(described.stdout)  # the committed offsets, read with the same settings

    rows = delta_coordinates(spark, config.sink.path)
    assert len(rows) == len(set(rows)) == len(produced) and set(rows) == produced

    outputs = {f"{m.name} output": m.log_path.read_text() for m in members}
    outputs.update({f"event log {p.name}": p.read_text(errors="replace") for p in events.rglob("*") if p.is_file()})
    outputs["describe --json"] = described.stdout + described.stderr
    outputs["validate"] = validated.stdout + validated.stderr
    assert any("SQLExecutionStart" in text for name, text in outputs.items() if name.startswith("event log"))
    for canary in canaries:
        leaks = [name for name, text in outputs.items() if canary in text]
        assert not leaks, f"a secret shows in {leaks}"


def test_no_secret_in_plans_progress_or_repr(secure_kafka, spark, tmp_path, unique_name, capsys):
    """The options the member gives Spark's Kafka source (SCRAM over TLS, and the inline client
    key of the mutual-TLS listener) are redacted in ``explain`` and ``lastProgress``, so are the
    scg-kafka reader's; no config or runtime object's ``repr`` shows them."""
    security = secure_kafka.security
    topic = group = unique_name
    create_topic(security.sasl_ssl_bootstrap, topic, 1, client=security.admin_config())
    _grant_member_acls(secure_kafka, topic, group)
    produce(security.sasl_ssl_bootstrap, topic, json_events(10), client=security.admin_config())
    canaries = _canaries(security, "sasl_ssl") + _canaries(security, "mtls")
    prepare_session(spark)
    shown = []
    for listener in ("sasl_ssl", "mtls"):
        config = load_pipeline(_pipeline(tmp_path / listener / "pipeline.yaml",
                                         security.pipeline_kafka(listener), topic, group))
        stream = (spark.readStream.format("kafka").options(**config.kafka.spark_kafka_options())
                  .option("subscribe", topic).option("startingOffsets", "earliest").load())
        stream.explain(True)
        query = stream.writeStream.format("noop").trigger(availableNow=True).start()
        try:
            assert query.awaitTermination(300), "the availableNow query did not finish"
            assert query.lastProgress and query.lastProgress["numInputRows"] >= 0
            shown.append(json.dumps(query.recentProgress, default=str))
            query.explain(True)
        finally:
            query.stop()
        tables = open_tables(config, spark)
        shown += [repr(config), str(config.describe()), repr(config.kafka), repr(member_config_for(config)),
                  repr(tables), repr(tables.table)]
        spark.dataSource.register(AssignedKafkaSource)  # the scg-kafka reader's options (inline key included)
        follow = spark.readStream.format(SOURCE_NAME).options(
            **assigned_source_options(config.kafka.confluent_config(), tmp_path / "assignment.json", config.source)).load()
        follow.explain(True)
    shown.append(capsys.readouterr().out)
    assert "*********(redacted)" in shown[-1] or "(redacted)" in shown[-1], "explain printed no redacted option"
    for canary in canaries:
        assert not [text for text in shown if canary in text], "a secret shows"


def _unknown_user(security, tmp_path):
    return {**security.pipeline_kafka("sasl_ssl"), "security": {**security.pipeline_kafka("sasl_ssl")["security"],
                                                                "sasl_username": "nobody-here"}}


def _wrong_password(security, tmp_path):
    (tmp_path / "wrong.password").write_text("not-the-password\n")
    kafka = security.pipeline_kafka("sasl_ssl")
    return {**kafka, "security": {**kafka["security"], "sasl_password_file": str(tmp_path / "wrong.password")}}


def _untrusted_broker(security, tmp_path):
    other = ensure_certificates(tmp_path / "other-ca")
    kafka = security.pipeline_kafka("sasl_ssl")
    return {**kafka, "security": {**kafka["security"], "ssl_ca_location": str(other.ca_file)}}


def _no_client_certificate(security, tmp_path):
    kafka = security.pipeline_kafka("mtls")
    return {**kafka, "security": {"protocol": "SSL", "ssl_ca_location": security.ca_file}}


def _untrusted_client_certificate(security, tmp_path):
    stranger = issue_client_certificate(tmp_path / "other-ca", "stranger")
    kafka = security.pipeline_kafka("mtls")
    return {**kafka, "security": {**kafka["security"], "ssl_certificate_location": str(stranger.cert_file),
                                  "ssl_key_location": str(stranger.key_file)}}


@pytest.mark.parametrize("fault, condition, names", [
    (_wrong_password, "KAFKA_AUTHENTICATION_FAILED", ["scg-client"]),
    (_unknown_user, "KAFKA_AUTHENTICATION_FAILED", ["nobody-here"]),
    (_untrusted_broker, "KAFKA_TLS_FAILED", ["broker's certificate", "other-ca"]),
    (_no_client_certificate, "KAFKA_TLS_FAILED", ["requires a client certificate"]),
    (_untrusted_client_certificate, "KAFKA_TLS_FAILED", ["refused client certificate", "stranger"]),
], ids=lambda v: getattr(v, "__name__", None) if callable(v) else None)
def test_bad_credentials_end_the_run_with_a_named_condition(fault, condition, names, secure_kafka, tmp_path,
                                                            unique_name):
    security = secure_kafka.security
    topic = group = unique_name
    create_topic(security.sasl_ssl_bootstrap, topic, 1, client=security.admin_config())
    _grant_member_acls(secure_kafka, topic, group)
    _assert_run_fails(_pipeline(tmp_path / "pipeline.yaml", fault(security, tmp_path), topic, group),
                      condition, names, security)


@pytest.mark.parametrize("topic_ops, group_ops, lacking", [
    (("DESCRIBE",), ("READ",), "READ on topic"),
    ((), ("READ",), "DESCRIBE on topic"),
    (("READ",), ("DESCRIBE",), "READ on group"),
    (("READ",), (), "READ on group"),
])
def test_a_missing_acl_names_the_principal_and_what_it_lacks(topic_ops, group_ops, lacking, secure_kafka,
                                                             tmp_path, unique_name):
    security = secure_kafka.security
    topic = group = unique_name
    create_topic(security.sasl_ssl_bootstrap, topic, 1, client=security.admin_config())
    _grant_member_acls(secure_kafka, topic, group, topic_ops, group_ops)
    for listener in ("sasl_ssl", "mtls"):
        path = _pipeline(tmp_path / listener / "pipeline.yaml", security.pipeline_kafka(listener), topic, group)
        principal = "User:scg-client" if listener == "sasl_ssl" else "client certificate"
        _assert_run_fails(path, "KAFKA_NOT_AUTHORIZED", [principal, f"{lacking} {unique_name}"], security)


def _assert_run_fails(path: Path, condition: str, names: list[str], security) -> None:
    result = _scg("run", path)
    output = result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("scg: error:")]
    assert result.returncode == 1, output[-3000:]
    assert len(errors) == 1 and f"[{condition}]" in errors[0], output[-3000:]
    for name in names:
        assert name in errors[0], errors[0]
    assert "Traceback" not in output and "joining consumer group" not in output
    for canary in _canaries(security, "sasl_ssl") + _canaries(security, "mtls"):
        assert canary not in output


def test_a_tls_file_that_is_not_there_is_a_config_error(secure_kafka, tmp_path, unique_name):
    kafka = secure_kafka.security.pipeline_kafka("mtls")
    kafka["security"]["ssl_key_location"] = str(tmp_path / "missing-key.pem")
    path = _pipeline(tmp_path / "pipeline.yaml", kafka, unique_name, unique_name)
    for command in ("validate", "run"):
        result = _scg(command, path)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "kafka.security.ssl_key_location" in result.stderr and "[FILE_NOT_FOUND]" in result.stderr


def test_the_access_check_reports_an_unreachable_cluster_as_not_checked(tmp_path, unique_name):
    """No broker answering is transient: the check says nothing was concluded, the member retries."""
    config = load_pipeline(_pipeline(tmp_path / "pipeline.yaml", {"bootstrap_servers": "127.0.0.1:9"},
                                     unique_name, unique_name))
    assert check_kafka_access(config.kafka, config.topics, config.group.id, timeout_s=3) is False


@pytest.mark.parametrize("listener", ["sasl_ssl", "mtls"])
def test_describe_reaches_a_secured_cluster_through_a_pipeline_files_kafka_section(listener, secure_kafka, tmp_path,
                                                                                   unique_name, capsys):
    """``scg describe GROUP --config FILE`` connects as the file says (SCRAM over TLS, mutual TLS);
    the group need not be the file's."""
    from types import SimpleNamespace

    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import ConsumerGroupTopicPartitions

    from pipelines.cli.describe_pipeline import describe_command

    security = secure_kafka.security
    topic, group = unique_name, f"{unique_name}-other"
    create_topic(security.sasl_ssl_bootstrap, topic, 2, client=security.admin_config())
    _grant_member_acls(secure_kafka, topic, group, topic_ops=("READ", "DESCRIBE"), group_ops=("READ", "DESCRIBE"))
    admin = AdminClient(security.admin_config())

    def committed() -> bool:  # a topic just created may not be known to the coordinator yet
        done = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [KafkaTopicPartition(topic, 1, 5)])])[group].result(timeout=30)
        return all(tp.error is None for tp in done.topic_partitions)

    wait_until(committed, 60, "the group's offset committed")
    path = _pipeline(tmp_path / "pipeline.yaml", security.pipeline_kafka(listener), topic, unique_name)
    args = SimpleNamespace(pipeline=None, group=group, config=str(path), bootstrap="127.0.0.1:9", json=True)
    answers = []

    def described() -> bool:  # the brokers apply new ACLs within moments: until then the fetch is empty
        assert describe_command(args) == 0
        answers.append(json.loads(capsys.readouterr().out))
        return bool(answers[-1]["partitions"])

    wait_until(described, 60, lambda: f"the group's committed offset described (last: {answers[-1:]})")
    assert answers[-1]["group_id"] == group
    assert [(p["topic"], p["partition"], p["committed"]) for p in answers[-1]["partitions"]] == [(topic, 1, 5)]
