"""Spark's option redaction pattern covers every secret Kafka source option the framework sets
(pure: the pattern is checked with Python's re, which reads it as Java does for these keys)."""
from __future__ import annotations

import re
from pathlib import Path

from pipelines.config import load_pipeline
from pipelines.runtime.spark_session import OPTION_REDACTION, option_redaction_regex
from tests.support.tls_material import write_client_files

PASSWORD = "pw-canary-1"


def _spark_options(tmp_path: Path) -> dict[str, str]:
    write_client_files(tmp_path, name="client", password=PASSWORD)  # ca.pem, client.pem, client-key.pem
    (tmp_path / "p.yaml").write_text(f"""
name: r
kafka:
  bootstrap_servers: 127.0.0.1:9093
  security:
    protocol: SASL_SSL
    sasl_mechanism: SCRAM-SHA-512
    sasl_username: u
    sasl_password: ${{PW}}
    ssl_ca_location: ca.pem
    ssl_certificate_location: client.pem
    ssl_key_location: client-key.pem
    ssl_key_password: ${{PW}}
topics: [t]
group: {{id: g}}
format: {{schema: "id BIGINT"}}
sink: {{path: out}}
""")
    return load_pipeline(tmp_path / "p.yaml", env={"PW": PASSWORD}).kafka.spark_kafka_options()


def test_every_option_holding_a_secret_is_redacted(tmp_path: Path):
    pattern = re.compile(OPTION_REDACTION)
    options = _spark_options(tmp_path)
    secret_options = {k for k, v in options.items() if PASSWORD in v or "PRIVATE KEY" in v}
    assert secret_options == {"kafka.sasl.jaas.config", "kafka.ssl.keystore.key"}  # the key decrypted, no password
    for key in secret_options:  # Spark redacts an option when its key or its value matches
        assert pattern.search(key) or pattern.search(options[key]), key
    for key in ("kafka.bootstrap.servers", "kafka.ssl.truststore.certificates", "kafka.ssl.keystore.certificate.chain"):
        assert not pattern.search(key)


def test_the_sessions_own_pattern_is_kept_and_adding_is_idempotent():
    assert option_redaction_regex(None) == OPTION_REDACTION
    combined = option_redaction_regex("(?i)url")
    assert combined == f"(?:(?i)url)|(?:{OPTION_REDACTION})"
    assert option_redaction_regex(combined) == combined
    assert option_redaction_regex(OPTION_REDACTION) == OPTION_REDACTION


CLIENT_SECRETS = ["ssl.keystore.key", "ssl.keystore.password", "ssl.truststore.password", "ssl.key.pem",
                  "sasl.oauthbearer.client.secret", "sasl.oauthbearer.assertion.private.key.pem",
                  "sasl.oauthbearer.assertion.private.key.passphrase"]


def test_secret_client_settings_are_redacted_in_both_readers_options(tmp_path: Path):
    """A secret a pipeline gives in ``kafka.client_config`` (a Secret in the config: masked in its
    repr and describe()) reaches Spark's Kafka source and the scg-kafka source as ``kafka.<key>``
    options, which Spark redacts by the pattern the runner adds."""
    from pipelines.config import Secret
    from pipelines.runtime.assigned_offsets import RateLimits
    from pipelines.runtime.assigned_source import source_options

    settings = "\n".join(f"    {key}: ${{S{i}}}" for i, key in enumerate(CLIENT_SECRETS))
    (tmp_path / "p.yaml").write_text(f"""
name: r
kafka:
  bootstrap_servers: 127.0.0.1:9093
  client_config:
{settings}
topics: [t]
group: {{id: g}}
format: {{schema: "id BIGINT"}}
sink: {{path: out}}
""")
    env = {f"S{i}": f"{PASSWORD}-{i}" for i in range(len(CLIENT_SECRETS))}
    kafka = load_pipeline(tmp_path / "p.yaml", env=env).kafka
    assert all(isinstance(kafka.client_config[key], Secret) for key in CLIENT_SECRETS)
    pattern = re.compile(OPTION_REDACTION)
    librdkafka = [key for key in CLIENT_SECRETS if not key.startswith(("ssl.keystore.", "ssl.truststore."))]
    for options, keys in ((kafka.spark_kafka_options(), CLIENT_SECRETS),  # Java client: every entry
                          (source_options(kafka.confluent_config(), tmp_path / "a", RateLimits()), librdkafka)):
        holding = {key for key, value in options.items() if PASSWORD in value}
        assert holding == {f"kafka.{key}" for key in keys}
        for key in holding:  # Spark redacts an option when its key or its value matches
            assert pattern.search(key) or pattern.search(options[key]), key
