"""Secret values (pipelines.config.secrets): which free-form settings hold one, how a secret is
resolved from ``${ENV}`` or a file, and that no repr, str, describe() or error shows it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from groupmgr.core import ExitCategory
from pipelines.config import ConfigError, Secret, load_pipeline
from pipelines.config.secrets import (MASK, BadEnvReferenceError, EnvVarNotSetError, InlineSecretError, SecretError,
                                      SecretFileNotFoundError, SecretFileUnreadableError, env_secret, file_secret,
                                      interpolate, is_secret_key, mask, reveal)

CANARY = "canary-Secret-value-42"

SECRET_KEYS = [
    # Kafka clients (Java and librdkafka)
    "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password", "sasl.password",
    "sasl.oauthbearer.client.secret", "ssl.keystore.key", "ssl.key.pem", "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    # schema registry style, Spark and Hadoop settings
    "basic.auth.user.info", "schema.registry.basic.auth.user.info", "spark.authenticate.secret",
    "spark.ssl.keyPassword", "spark.kubernetes.authenticate.oauthToken", "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.session.token", "spark.hadoop.fs.s3a.access.key", "spark.hadoop.fs.s3a.encryption.key",
    "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", "spark.hadoop.fs.azure.sas.fixed.token",
    "spark.hadoop.google.cloud.auth.service.account.private.key",
    # deltalake storage options
    "aws_secret_access_key", "aws_session_token", "azure_storage_account_key", "azure_storage_access_key",
    "azure_storage_sas_key", "azure_storage_token", "azure_client_secret", "google_service_account_key",
    "bearer_token", "SASL.JAAS.CONFIG", "Ssl.Key.Password",
]
PLAIN_KEYS = [
    "request.timeout.ms", "ssl.key.location", "ssl.keystore.location", "ssl.keystore.type", "ssl.truststore.location",
    "ssl.truststore.certificates", "ssl.keystore.certificate.chain", "ssl.certificate.pem", "ssl.ca.pem",
    "key.deserializer", "ssl.keymanager.algorithm", "sasl.kerberos.keytab", "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.assertion.private.key.file", "sasl.mechanism", "sasl.username", "client.id",
    "spark.sql.shuffle.partitions", "aws_access_key_id", "azure_federated_token_file", "google_service_account",
    "aws_region", "keystore", "monkey", "turkey.count", "key.pem.location", "tokens.enabled",
]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_a_setting_naming_a_secret_is_a_secret_key(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_a_setting_naming_a_location_type_or_plain_value_is_not_a_secret_key(key):
    """A key file's path, a store's type, a serializer, a token endpoint's URL are no secrets (and
    may stay inline in the file)."""
    assert not is_secret_key(key)


# -- Secret ------------------------------------------------------------------------------------

def test_a_secret_never_shows_its_value():
    secret = Secret(CANARY, source="env:X")
    assert repr(secret) == str(secret) == f"{secret}" == f"{secret:>40}" == "%s" % secret == f"Secret({MASK})"
    assert CANARY not in repr([secret, {"k": secret}, (secret,)])
    assert (secret.reveal(), secret.source) == (CANARY, "env:X")
    assert not hasattr(secret, "__dict__")  # nothing else holds the value


def test_secrets_compare_by_value_and_only_with_secrets():
    assert Secret("a", "env:A") == Secret("a", "file:/b") and hash(Secret("a")) == hash(Secret("a"))
    assert Secret("a") != Secret("b") and Secret("a") != Secret("ab")
    assert Secret("a") != "a" and "a" != Secret("a")
    assert Secret("a").__eq__("a") is NotImplemented
    assert hash(Secret("a")) != hash("a") and len({Secret("a"), Secret("a"), Secret("b")}) == 2


def test_a_secret_holds_a_string():
    with pytest.raises(TypeError):
        Secret(b"bytes")  # type: ignore[arg-type]
    assert Secret("").reveal() == "" and Secret("x").source == ""


# -- resolution --------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["${KAFKA_PW}", "  ${KAFKA_PW}\n"])
def test_an_env_reference_resolves_to_a_secret_naming_its_source(text):
    secret = env_secret(text, {"KAFKA_PW": CANARY}, "sasl_password")
    assert (secret.reveal(), secret.source) == (CANARY, "env:KAFKA_PW")


@pytest.mark.parametrize("text", [CANARY, "$KAFKA_PW", "${KAFKA_PW}x", "x${KAFKA_PW}", "${KAFKA_PW}${KAFKA_PW}",
                                  "${1PW}", ""])
def test_anything_but_one_env_reference_is_an_inline_secret_never_echoed(text):
    with pytest.raises(InlineSecretError) as err:
        env_secret(text, {"KAFKA_PW": CANARY}, "sasl_password")
    assert (err.value.condition, err.value.params, err.value.exit_category) == (
        "INLINE_SECRET", {"field": "sasl_password"}, ExitCategory.CONFIG)
    assert CANARY not in str(err.value) and "sasl_password" in str(err.value)


def test_an_inline_secret_suggests_a_file_only_where_one_may_be_given():
    with pytest.raises(InlineSecretError) as with_file:
        env_secret("inline", {}, "sasl_password")
    with pytest.raises(InlineSecretError) as without_file:
        env_secret("inline", {}, "ssl.key.pem", file_option=False)
    assert "sasl_password_file" in str(with_file.value) and "_file" not in str(without_file.value)


def test_an_unset_variable_is_named():
    with pytest.raises(EnvVarNotSetError) as err:
        env_secret("${MISSING_PW}", {"OTHER": CANARY}, "sasl_password")
    assert (err.value.condition, err.value.params) == ("ENV_VAR_NOT_SET", {"var": "MISSING_PW"})
    assert isinstance(err.value, SecretError) and err.value.detail == str(err.value)


def test_interpolate_replaces_every_reference_and_refuses_malformed_ones():
    env = {"HOST": "b1", "PORT": "9092"}
    assert interpolate("${HOST}:${PORT}/${HOST}", env) == "b1:9092/b1"
    assert interpolate("no references $HOST {PORT}", env) == "no references $HOST {PORT}"
    for bad in ("${}", "${1X}", "${A-B}", "x ${HOST} ${ bad}"):
        with pytest.raises(BadEnvReferenceError) as err:
            interpolate(bad, env)
        assert err.value.condition == "BAD_VALUE" and err.value.params["reference"].startswith("${")
    with pytest.raises(EnvVarNotSetError):
        interpolate("${HOST}:${NOPE}", env)


def test_a_secret_file_is_read_without_its_trailing_newlines(tmp_path: Path):
    path = tmp_path / "pw"
    path.write_bytes(b" pass word \r\n\n")
    secret = file_secret(path)
    assert (secret.reveal(), secret.source) == (" pass word ", f"file:{path}")
    path.write_bytes(b"XpassX\n")  # only line ends are stripped
    assert file_secret(path).reveal() == "XpassX"


def test_a_secret_file_is_read_as_utf8_whatever_the_locale(tmp_path: Path):
    """A secret file written in UTF-8 reads the same on a machine whose locale is not UTF-8."""
    import locale
    import sys

    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode reads every file as UTF-8")
    path = tmp_path / "pw"
    path.write_bytes("pässwörd-€".encode())
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")  # an ASCII locale
    try:
        assert file_secret(path).reveal() == "pässwörd-€"
    finally:
        locale.setlocale(locale.LC_CTYPE, before)


def test_a_missing_or_unreadable_secret_file_is_named_never_its_contents(tmp_path: Path):
    with pytest.raises(SecretFileNotFoundError) as missing:
        file_secret(tmp_path / "nope")
    assert (missing.value.condition, missing.value.params) == ("SECRET_FILE_NOT_FOUND",
                                                               {"secret_file": str(tmp_path / "nope")})
    (tmp_path / "binary").write_bytes(b"\xff\xfe" + CANARY.encode())
    for path in (tmp_path, tmp_path / "binary"):  # a directory, bytes that are not UTF-8
        with pytest.raises(SecretFileUnreadableError) as err:
            file_secret(path)
        assert (err.value.condition, err.value.params) == ("SECRET_FILE_UNREADABLE", {"secret_file": str(path)})
        assert CANARY not in str(err.value)


# -- masking -----------------------------------------------------------------------------------

def test_mask_replaces_every_secret_in_nested_data():
    value = {"a": Secret(CANARY), "b": [1, Secret(CANARY), ("x", Secret(CANARY))], "c": {"d": Secret("y")}, "e": "z"}
    assert mask(value) == {"a": MASK, "b": [1, MASK, ["x", MASK]], "c": {"d": MASK}, "e": "z"}
    assert mask(Secret(CANARY)) == "***" and mask("plain") == "plain" and mask(None) is None


def test_reveal_gives_the_plain_string_of_a_setting():
    assert reveal(Secret(CANARY)) == CANARY and reveal("plain") == "plain"


def _load(tmp_path: Path, env: dict[str, str], kafka_settings=None, spark=None, storage_options=None):
    spec = {"name": "p", "kafka": {"bootstrap_servers": "127.0.0.1:9092", "client_config": kafka_settings or {}},
            "topics": ["t"], "group": {"id": "g"}, "format": {"schema": "id BIGINT"}, "sink": {"path": "out"},
            "spark": spark or {}, **({"storage": {"options": storage_options}} if storage_options else {})}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(spec))
    return load_pipeline(tmp_path / "p.yaml", env=env)


CLIENT_SECRETS = ["ssl.keystore.key", "ssl.keystore.password", "ssl.truststore.password", "ssl.key.pem",
                  "sasl.oauthbearer.client.secret", "sasl.oauthbearer.assertion.private.key.pem",
                  "sasl.oauthbearer.assertion.private.key.passphrase"]
SPARK_SECRETS = ["spark.hadoop.fs.s3a.session.token", "spark.hadoop.fs.azure.account.key.a.dfs.core.windows.net",
                 "spark.schema.registry.basic.auth.user.info", "spark.ssl.keyPassword"]
STORAGE_SECRETS = ["aws_session_token", "azure_storage_account_key", "azure_client_secret", "google_service_account_key"]


def test_secret_settings_in_every_free_form_map_are_masked_in_repr_str_and_describe(tmp_path: Path):
    env = {f"S{i}": f"{CANARY}-{i}" for i in range(20)}
    refs = iter(f"${{S{i}}}" for i in range(20))
    config = _load(tmp_path, env, {key: next(refs) for key in CLIENT_SECRETS} | {"request.timeout.ms": 1000},
                   {key: next(refs) for key in SPARK_SECRETS} | {"spark.sql.shuffle.partitions": 2},
                   {key: next(refs) for key in STORAGE_SECRETS} | {"aws_region": "eu-west-1"})
    maps = {"client_config": (config.kafka.client_config, CLIENT_SECRETS),
            "spark": (config.spark, SPARK_SECRETS), "options": (config.storage.options, STORAGE_SECRETS)}
    for name, (settings, keys) in maps.items():
        assert all(isinstance(settings[key], Secret) for key in keys), name
    described = config.describe()
    assert {k: described["kafka"]["client_config"][k] for k in CLIENT_SECRETS} == dict.fromkeys(CLIENT_SECRETS, MASK)
    assert {k: described["spark"][k] for k in SPARK_SECRETS} == dict.fromkeys(SPARK_SECRETS, MASK)
    assert {k: described["storage"]["options"][k] for k in STORAGE_SECRETS} == dict.fromkeys(STORAGE_SECRETS, MASK)
    assert (described["kafka"]["client_config"]["request.timeout.ms"], described["spark"]["spark.sql.shuffle.partitions"],
            described["storage"]["options"]["aws_region"]) == ("1000", "2", "eu-west-1")
    for text in (repr(config), str(config), json.dumps(described), config.summary(), repr(config.kafka),
                 repr(config.spark), repr(config.storage)):
        assert CANARY not in text
    assert config.kafka.confluent_config()["ssl.key.pem"].startswith(CANARY)  # clients get the value


@pytest.mark.parametrize("section, key", [("client_config", "ssl.key.pem"), ("client_config", "ssl.keystore.key"),
                                          ("spark", "spark.schema.registry.basic.auth.user.info"),
                                          ("options", "aws_session_token")])
def test_a_secret_setting_written_inline_is_refused_without_echoing_it(tmp_path: Path, section, key):
    settings = {key: CANARY}
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, {}, **{{"client_config": "kafka_settings", "spark": "spark",
                                "options": "storage_options"}[section]: settings})
    assert err.value.condition == "INLINE_SECRET" and CANARY not in str(err.value)


def test_a_secret_file_that_never_ends_or_is_too_large_is_unreadable(tmp_path):
    from pipelines.config.secrets import MAX_SECRET_FILE_BYTES, SecretFileUnreadableError, file_secret

    big = tmp_path / "big"
    big.write_bytes(b"x" * (MAX_SECRET_FILE_BYTES + 1))
    for path in (Path("/dev/zero"), big, tmp_path):
        with pytest.raises(SecretFileUnreadableError):
            file_secret(path)
    exact = tmp_path / "exact"
    exact.write_bytes(b"y" * (MAX_SECRET_FILE_BYTES - 1) + b"\n")
    assert file_secret(exact).reveal() == "y" * (MAX_SECRET_FILE_BYTES - 1)
