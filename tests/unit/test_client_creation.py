"""A librdkafka client that cannot be made is one named condition, exit 1, no secret in its line
(real TLS files; the client is never connected: librdkafka loads the files when it is made)."""
from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from groupmgr.core import ExitCategory
from pipelines.config import load_pipeline
from pipelines.config import secrets
from pipelines.runtime.client_creation import KafkaClientRefused, librdkafka_refusal, make_client, masked
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
              "bootstrap.servers": "host:1", "ssl.keystore.key": "KS", "basic.auth.user.info": "u:p"}
    assert masked("pw-1 pw-2 KEYTEXT host:1 KS u:p", config) == "*** *** *** host:1 *** ***"


def test_the_runtime_masks_by_the_config_layers_rule():
    """One rule: every key the secrets module calls secret is masked here, with its mask."""
    assert secrets.MASK == "***"
    for key in ("my.passphrase", "fs.azure.account.key.acct", "sasl.oauthbearer.client.secret", "x.token"):
        assert secrets.is_secret_key(key)
        assert masked("value-1", {key: "value-1"}) == secrets.MASK
    assert masked("/etc/key.pem", {"ssl.key.location": "/etc/key.pem"}) == "/etc/key.pem"


def test_librdkafka_refusal_names_a_bad_setting_and_masks_secrets():
    assert librdkafka_refusal({"request.timeout.ms": "30000"}) is None
    assert "no.such.setting" in librdkafka_refusal({"no.such.setting": "1"})
    reason = librdkafka_refusal({"security.protocol": "SSL", "ssl.key.location": "/nonexistent/key.pem",
                                 "ssl.key.password": "pw-canary-9"})
    assert reason is not None and "pw-canary-9" not in reason


def test_the_access_check_of_scg_run_names_the_refusal(tmp_path: Path):
    """``scg run``'s first client is the access check's: it ends the run with exit 1 and one line."""
    path, files = _config(tmp_path)
    config = load_pipeline(path, env={})
    files.key_file.write_bytes(b"replaced by something that is no key")
    with pytest.raises(KafkaClientRefused):
        check_kafka_access(config.kafka, config.topics, config.group.id, timeout_s=3)
