"""A librdkafka client that cannot be made is one named condition, exit 1, no secret in its line
(real TLS files; the client is never connected: librdkafka loads the files when it is made)."""
from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from groupmgr.core import ExitCategory
from pipelines.config import load_pipeline
from pipelines.runtime.client_creation import KafkaClientRefused, make_client, masked
from pipelines.runtime.kafka_access import check_kafka_access
from tests.support.tls_material import key_pem, new_key, write_client_files

PASSWORD = "key-password-canary-3"


def _config(tmp_path: Path, password: str | None = None):
    files = write_client_files(tmp_path / "tls", password=password)
    if password is not None:
        (tmp_path / "key.password").write_text(password)
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
name: created
kafka:
  bootstrap_servers: 127.0.0.1:9
  security: {{protocol: SSL, ssl_ca_location: {files.ca_file}, ssl_certificate_location: {files.cert_file},
             ssl_key_location: {files.key_file}{", ssl_key_password_file: key.password" if password else ""}}}
topics: [t]
group: {{id: g}}
format: {{schema: "id BIGINT"}}
sink: {{path: out}}
""")
    return path, files


def test_a_key_file_replaced_after_loading_is_a_named_runtime_refusal(tmp_path: Path):
    path, files = _config(tmp_path, PASSWORD)
    config = load_pipeline(path, env={})
    files.key_file.write_bytes(key_pem(new_key(), "pkcs8", PASSWORD))  # another pair's key
    with pytest.raises(KafkaClientRefused) as info:
        make_client(AdminClient, {**config.kafka.confluent_config(), "log_level": 0})
    assert info.value.exit_category == ExitCategory.RUNTIME
    assert "ssl.key.location" in str(info.value) and "\n" not in str(info.value)
    assert PASSWORD not in str(info.value)


def test_a_good_config_makes_the_client(tmp_path: Path):
    path, _ = _config(tmp_path)
    assert make_client(AdminClient, load_pipeline(path, env={}).kafka.confluent_config()) is not None


def test_secret_values_are_masked_in_a_reason():
    config = {"ssl.key.password": "pw-1", "sasl.password": "pw-2", "ssl.key.pem": "KEYTEXT",
              "bootstrap.servers": "host:1"}
    assert masked("pw-1 pw-2 KEYTEXT host:1", config) == "*** *** *** host:1"


def test_the_access_check_of_scg_run_names_the_refusal(tmp_path: Path):
    """``scg run``'s first client is the access check's: it ends the run with exit 1 and one line."""
    path, files = _config(tmp_path)
    config = load_pipeline(path, env={})
    files.key_file.write_bytes(b"replaced by something that is no key")
    with pytest.raises(KafkaClientRefused):
        check_kafka_access(config.kafka, config.topics, config.group.id, timeout_s=3)
