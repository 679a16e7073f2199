"""The storage section: one place for object-store settings, mapped to deltalake and to Spark's
s3a; secrets masked; settings that would break put-if-absent commits refused by name."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pipelines.config import Condition, ConfigError, load_pipeline

SECRET = "s3cr3t-canary-9f2e"
TOKEN = "t0ken-canary-41aa"
ENV = {"AK": "AKIAEXAMPLE", "SK": SECRET, "TK": TOKEN}


def write(tmp_path: Path, storage: str, spark: str = "") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent("""\
        name: s
        kafka: {bootstrap_servers: "127.0.0.1:9092"}
        topics: [t]
        group: {id: g}
        format: {type: raw}
        sink: {path: "s3a://lake/t"}
        """) + storage + spark)
    return path


def load(tmp_path, storage, spark=""):
    return load_pipeline(write(tmp_path, storage, spark), env=ENV)


def error(tmp_path, storage, spark="") -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, storage, spark)
    return raised.value


FULL = """storage:
  endpoint: http://127.0.0.1:9000
  region: eu-west-1
  access_key_id: ${AK}
  secret_access_key: ${SK}
  session_token: ${TK}
"""


def test_one_section_maps_to_deltalake_and_spark(tmp_path):
    config = load(tmp_path, FULL)
    assert config.storage.delta_storage_options() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN,
        "AWS_ALLOW_HTTP": "true", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false"}
    spark = config.spark_conf()
    assert spark["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert spark["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert spark["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert spark["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert spark["spark.hadoop.fs.s3a.secret.key"] == SECRET
    assert spark["spark.hadoop.fs.s3a.session.token"] == TOKEN
    assert spark["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert spark["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"


def test_aws_defaults_without_an_endpoint(tmp_path):
    config = load(tmp_path, "storage: {region: us-east-1}\n")
    assert config.storage.delta_storage_options() == {"AWS_REGION": "us-east-1"}
    assert config.storage.hadoop_settings()["fs.s3a.path.style.access"] == "false"
    assert "fs.s3a.aws.credentials.provider" not in config.storage.hadoop_settings()


def test_no_storage_section_sets_nothing(tmp_path):
    config = load(tmp_path, "")
    assert config.storage.delta_storage_options() == {} and config.storage.hadoop_settings() == {}
    assert not any(key.startswith("spark.hadoop.") for key in config.spark_conf())


def test_secrets_never_shown(tmp_path):
    config = load(tmp_path, FULL)
    texts = [repr(config), str(config), repr(config.storage), json.dumps(config.describe()), config.summary()]
    assert not any(SECRET in text or TOKEN in text for text in texts)
    assert config.describe()["storage"]["secret_access_key"] == "***"


def test_inline_secret_refused(tmp_path):
    e = error(tmp_path, "storage: {access_key_id: a, secret_access_key: plain-text}\n")
    assert (e.condition, e.field_path) == (Condition.INLINE_SECRET, "storage.secret_access_key")


@pytest.mark.parametrize("storage, field", [
    ("storage: {access_key_id: a}\n", "storage.secret_access_key"),
    ("storage: {secret_access_key: \"${SK}\"}\n", "storage.secret_access_key"),
    ("storage: {session_token: \"${TK}\"}\n", "storage.session_token"),
])
def test_credentials_come_in_pairs(tmp_path, storage, field):
    e = error(tmp_path, storage)
    assert e.field_path == field and e.condition in (Condition.MISSING_FIELD, Condition.CONFLICTING_FIELDS)


def test_bad_endpoint(tmp_path):
    e = error(tmp_path, "storage: {endpoint: 127.0.0.1:9000}\n")
    assert (e.condition, e.field_path) == (Condition.BAD_VALUE, "storage.endpoint")


@pytest.mark.parametrize("option", ["aws_conditional_put: disabled", "AWS_S3_ALLOW_UNSAFE_RENAME: 'true'",
                                    "AWS_S3_LOCKING_PROVIDER: dynamodb"])
def test_options_that_break_put_if_absent_are_refused(tmp_path, option):
    e = error(tmp_path, f"storage:\n  options: {{{option}}}\n")
    assert e.condition == Condition.UNSAFE_STORAGE_OPTION
    assert e.field_path.startswith("storage.options") and "put-if-absent" in e.detail


def test_safe_extra_options_pass_through(tmp_path):
    config = load(tmp_path, "storage:\n  options: {aws_conditional_put: etag, timeout: 30s}\n")
    assert config.storage.delta_storage_options() == {"aws_conditional_put": "etag", "timeout": "30s"}


def test_s3a_settings_live_only_in_the_storage_section(tmp_path):
    e = error(tmp_path, FULL, "spark: {spark.hadoop.fs.s3a.endpoint: http://elsewhere:9000}\n")
    assert (e.condition, e.field_path) == (Condition.CONFLICTING_FIELDS, 'spark["spark.hadoop.fs.s3a.endpoint"]')


def test_scheme_qualified_paths_keep_their_scheme(tmp_path):
    config = load(tmp_path, "")
    assert config.sink.path == "s3a://lake/t"
    assert config.checkpoint_root == "s3a://lake/t_checkpoints"
