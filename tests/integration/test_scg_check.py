"""``scg check``, ``scg run``'s start-up check and ``scg describe`` against a real secured broker
(the ``secure_kafka`` fixture: SASL_SSL with SCRAM-SHA-512, mutual TLS, ACLs enforced).

* ``scg check FILE``: every check passes for a principal with READ on the topic and the group;
  a wrong password fails the SASL line, a principal without topic ACLs the topics line, a
  plaintext pipeline at the TLS listener the protocol line; exit 0 / 1; no secret printed;
* ``scg run`` of a pipeline without ``security:`` at the TLS listener, of one naming a SASL
  mechanism the listener does not offer, of a ``topic_pattern`` the principal cannot see, and of
  a session timeout above the broker's maximum: exit 1, one named line, before Spark starts;
* ``scg describe GROUP --bootstrap`` at the TLS listener: one named line, no librdkafka log line.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from pipelines.local.acls import Acl, AclAdmin
from pipelines.runtime.install_paths import PROJECT_ROOT
from tests.support.kafka_data import create_topic

pytestmark = pytest.mark.integration
SCG = str(PROJECT_ROOT / "bin" / "scg")
HANG_GUARD_S = 120  # a bound on a hung process; the assertions on time are the named ones below
NAMED_WITHIN_S = 15


def _scg(*args) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([SCG, *map(str, args)], capture_output=True, text=True, timeout=HANG_GUARD_S,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return result, time.monotonic() - started


def _user(security, tmp_path: Path, name: str) -> tuple[dict, str]:
    """A SCRAM user of this test only: its pipeline ``kafka:`` section and its password."""
    password = secrets.token_urlsafe(18)
    AclAdmin(security.admin_config()).create_scram_user(name, password)
    (tmp_path / f"{name}.password").write_text(password + "\n")
    kafka = security.pipeline_kafka("sasl_ssl")
    kafka["security"].update(sasl_username=name, sasl_password_file=str(tmp_path / f"{name}.password"))
    return kafka, password


def _pipeline(tmp_path: Path, kafka: dict, name: str, **extra) -> Path:
    data = {"name": name, "kafka": kafka, "topics": [name], "group": {"id": name},
            "format": {"type": "json", "schema": "id BIGINT"},
            "sink": {"path": str(tmp_path / "table"), "dead_letter_path": str(tmp_path / "dead")},
            "checkpoint_root": str(tmp_path / "checkpoints")}
    for key, value in extra.items():
        if value is None:
            data.pop(key)
        elif isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _lines(result) -> dict[str, str]:
    """The check's lines by check name (the part before the first colon), as ``outcome detail``."""
    found = {}
    for line in result.stdout.splitlines():
        outcome, _, rest = line.partition(" ")
        name, _, detail = rest.strip().partition(": ")
        found[name.split(" ")[0] if name.startswith(("topics", "group", "table", "dead-letter")) else name] = \
            f"{outcome} {detail}"
    return found


@pytest.fixture
def topic(secure_kafka, unique_name) -> str:
    create_topic(secure_kafka.security.sasl_ssl_bootstrap, unique_name, 2, client=secure_kafka.security.admin_config())
    return unique_name


def test_every_check_passes_for_a_principal_with_read_on_the_topic_and_the_group(secure_kafka, topic, tmp_path):
    security = secure_kafka.security
    kafka, password = _user(security, tmp_path, f"{topic}-ok")
    AclAdmin(security.admin_config()).grant(f"User:{topic}-ok", [Acl.topic(topic, "READ"), Acl.group(topic, "READ")])
    result, _ = _scg("check", _pipeline(tmp_path, kafka, topic))
    lines = _lines(result)
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(lines) == {"brokers reachable", "security protocol", "TLS handshake", "SASL authentication",
                          "topics", "group", "session timeout", "table", "dead-letter"}
    assert all(v.startswith("ok ") for v in lines.values()), result.stdout
    assert password not in result.stdout + result.stderr


def test_a_wrong_password_fails_the_sasl_line(secure_kafka, topic, tmp_path):
    kafka, password = _user(secure_kafka.security, tmp_path, f"{topic}-pw")
    Path(kafka["security"]["sasl_password_file"]).write_text("not-the-password\n")
    result, took = _scg("check", _pipeline(tmp_path, kafka, topic))
    lines = _lines(result)
    assert result.returncode == 1 and took < NAMED_WITHIN_S, result.stdout + result.stderr
    assert lines["SASL authentication"].startswith("FAILED [KAFKA_AUTHENTICATION_FAILED]")
    assert lines["brokers reachable"].startswith("ok") and lines["topics"].startswith("skipped")
    assert "Traceback" not in result.stderr and password not in result.stdout


@pytest.mark.parametrize("pattern", [False, True])
def test_a_principal_without_topic_acls_fails_the_topics_line(secure_kafka, topic, tmp_path, pattern):
    kafka, _ = _user(secure_kafka.security, tmp_path, f"{topic}-noacl")
    AclAdmin(secure_kafka.security.admin_config()).grant(f"User:{topic}-noacl", [Acl.group(topic, "READ")])
    extra = {"topics": None, "topic_pattern": f"{topic}.*"} if pattern else {}
    result, _ = _scg("check", _pipeline(tmp_path, kafka, topic, **extra))
    lines = _lines(result)
    assert result.returncode == 1, result.stdout + result.stderr
    condition = "KAFKA_NO_VISIBLE_TOPIC" if pattern else "KAFKA_NOT_AUTHORIZED"
    assert lines["topics"].startswith(f"FAILED [{condition}]"), result.stdout
    assert lines["group"].startswith("ok") and lines["SASL authentication"].startswith("ok")


def _run_fails_named(path: Path, condition: str) -> str:
    result, took = _scg("run", path)
    output = result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("scg: error:")]
    assert result.returncode == 1, output[-3000:]
    assert len(errors) == 1 and f"[{condition}]" in errors[0], output[-3000:]
    assert took < NAMED_WITHIN_S, f"named after {took:.1f} s"
    assert "Traceback" not in output and "joining consumer group" not in output and "query started" not in output
    return errors[0]


def test_run_without_security_at_a_tls_listener_is_a_protocol_mismatch(secure_kafka, topic, tmp_path):
    kafka = {"bootstrap_servers": secure_kafka.security.sasl_ssl_bootstrap}
    line = _run_fails_named(_pipeline(tmp_path, kafka, topic), "KAFKA_PROTOCOL_MISMATCH")
    assert "the pipeline has no security" in line


def test_run_with_a_mechanism_the_listener_does_not_offer_says_so(secure_kafka, topic, tmp_path):
    kafka = secure_kafka.security.pipeline_kafka("sasl_ssl")
    kafka["security"]["sasl_mechanism"] = "SCRAM-SHA-256"
    line = _run_fails_named(_pipeline(tmp_path, kafka, topic), "KAFKA_SASL_MECHANISM_REFUSED")
    assert "SCRAM-SHA-512" in line


def test_run_with_a_pattern_the_principal_cannot_see_is_refused(secure_kafka, topic, tmp_path):
    kafka, _ = _user(secure_kafka.security, tmp_path, f"{topic}-blind")
    AclAdmin(secure_kafka.security.admin_config()).grant(f"User:{topic}-blind", [Acl.group(topic, "READ")])
    _run_fails_named(_pipeline(tmp_path, kafka, topic, topics=None, topic_pattern=f"{topic}.*"),
                     "KAFKA_NO_VISIBLE_TOPIC")


def test_run_with_a_session_timeout_above_the_brokers_maximum_is_refused_before_spark(secure_kafka, topic,
                                                                                      tmp_path):
    kafka = secure_kafka.security.pipeline_kafka("sasl_ssl")
    AclAdmin(secure_kafka.security.admin_config()).grant(
        secure_kafka.security.client_principal, [Acl.topic(topic, "READ"), Acl.group(topic, "READ")])
    line = _run_fails_named(_pipeline(tmp_path, kafka, topic, group={"session_timeout": "2h"}),
                            "INVALID_SESSION_TIMEOUT")
    assert "7200000 ms" in line


def test_describe_at_a_tls_listener_without_security_is_one_named_line(secure_kafka, unique_name):
    result, took = _scg("describe", unique_name, "--bootstrap", secure_kafka.security.sasl_ssl_bootstrap)
    output = result.stdout + result.stderr
    assert result.returncode == 1 and took < NAMED_WITHIN_S, output
    assert output.strip().splitlines() == [line for line in output.strip().splitlines() if line.startswith("scg: error:")]
    assert "[KAFKA_PROTOCOL_MISMATCH]" in output and "--config FILE" in output and "rdkafka" not in output
