"""An encrypted client key with its password works end to end over mutual TLS, with both readers.

The key is encrypted by the ``openssl`` command line as users do: ``openssl pkey -aes256`` (PKCS#8
with PBES2, which Java 17's Kafka client cannot decrypt) and ``openssl ec -aes256`` (traditional
``EC PRIVATE KEY`` with ``Proc-Type: 4,ENCRYPTED``, which it cannot read at all). ``scg run``
(available-now) reads every record into Delta through Spark's Kafka source (the Java client on the
executors) and through scg-kafka (librdkafka on the executors), against the secured local Kafka,
as a principal with only READ on the topic and the group. Neither the password nor any line of the
decrypted key shows in the member's output or the Spark event log.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from pipelines.config.client_keys import java_client_key
from pipelines.local.acls import Acl, AclAdmin
from pipelines.local.certificates import issue_client_certificate
from pipelines.runtime.install_paths import PROJECT_ROOT
from tests.support.kafka_data import create_topic, delta_coordinates, json_events, produce

pytestmark = pytest.mark.integration
SCG = str(PROJECT_ROOT / "bin" / "scg")
HANG_GUARD_S = 600  # a bound on a hung run, not a timing assertion
ENCRYPT = {  # how users encrypt an existing key (OpenSSL 3)
    "pkcs8-pbes2": (["pkey"], "-----BEGIN ENCRYPTED PRIVATE KEY-----"),
    "traditional": (["ec"], "-----BEGIN EC PRIVATE KEY-----"),
}


def _encrypted_key(plain: Path, form: str, tmp_path: Path) -> tuple[Path, Path, str]:
    """``plain`` encrypted with AES-256 by ``openssl``; returns the key file, the password file and
    the password."""
    password = secrets.token_urlsafe(18)
    password_file = tmp_path / "key.password"
    password_file.write_text(password + "\n")
    encrypted = tmp_path / f"client-key-{form}.pem"
    command, first_line = ENCRYPT[form]
    subprocess.run(["openssl", *command, "-in", str(plain), "-aes256", "-passout", f"file:{password_file}",
                    "-out", str(encrypted)], check=True, capture_output=True)
    assert encrypted.read_text().startswith(first_line)
    if form == "pkcs8-pbes2":
        parsed = subprocess.run(["openssl", "asn1parse", "-in", str(encrypted)], check=True, capture_output=True,
                                text=True).stdout
        assert ":PBES2" in parsed
    return encrypted, password_file, password


@pytest.mark.parametrize("reader, form", [("spark-kafka", "pkcs8-pbes2"), ("scg-kafka", "pkcs8-pbes2"),
                                          ("spark-kafka", "traditional")])
def test_an_encrypted_client_key_reads_every_record_into_delta(reader, form, secure_kafka, spark, tmp_path,
                                                               unique_name):
    security = secure_kafka.security
    admin = security.admin_config()
    topic = group = unique_name
    name = f"enc-{uuid.uuid4().hex[:10]}"
    certificate = issue_client_certificate(Path(security.ca_file).parent, name)
    key_file, password_file, password = _encrypted_key(certificate.key_file, form, tmp_path)
    AclAdmin(admin).grant(certificate.principal, [Acl.topic(topic, "READ"), Acl.group(group, "READ")])
    create_topic(security.sasl_ssl_bootstrap, topic, 2, client=admin)
    produced = produce(security.sasl_ssl_bootstrap, topic, json_events(300), client=admin)

    kafka = security.pipeline_kafka("mtls")
    kafka["security"].update(ssl_certificate_location=str(certificate.cert_file), ssl_key_location=str(key_file),
                             ssl_key_password_file=str(password_file))
    events = tmp_path / "events"
    events.mkdir()
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({
        "name": group, "kafka": kafka, "topics": [topic],
        "group": {"id": group, "session_timeout": "6s", "heartbeat_interval": "500ms"},
        "source": {"starting_offsets": "earliest", "reader": reader},
        "format": {"type": "json", "schema": "id BIGINT, name STRING"},
        "sink": {"path": str(tmp_path / "table"), "dead_letter_path": str(tmp_path / "dead")},
        "trigger": {"available_now": True},
        "checkpoint_root": str(tmp_path / "checkpoints"),
        "spark": {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
                  "spark.eventLog.compress": "false"},
    }, sort_keys=False))

    run = subprocess.run([SCG, "run", str(path)], capture_output=True, text=True, timeout=HANG_GUARD_S,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    rows = delta_coordinates(spark, tmp_path / "table")
    assert len(rows) == len(set(rows)) == len(produced) and set(rows) == produced
    assert not delta_coordinates(spark, tmp_path / "dead") if (tmp_path / "dead" / "_delta_log").exists() else True

    decrypted = java_client_key(key_file.read_bytes(), password).splitlines()
    canaries = [password] + [line for line in decrypted if line and not line.startswith("-----")][:2]
    logs = {p.name: p.read_text(errors="replace") for p in events.rglob("*") if p.is_file()}
    assert any("SQLExecutionStart" in text for text in logs.values())
    for canary in canaries:
        assert canary not in output
        assert not [log for log, text in logs.items() if canary in text], "a secret shows in the event log"
