"""Valid pipeline specs: defaults, durations, paths, secrets, masking and client option mapping."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pipelines.config import (Condition, ConfigError, PipelineConfig, SchemaField, Secret, load_pipeline,
                              main_validate)
from pipelines.config.yaml_nodes import parse_yaml
from pipelines.config.secrets import file_secret
from tests.support.tls_material import write_client_files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "pipelines" / "resources" / "pipelines"  # package data; conf/pipelines links here
PASSWORD = "s3cr3t-Pa55word-value"
CA_FILE = ROOT / "tests" / "unit" / "config_cases" / "ca.pem"  # a real CA certificate (its key was discarded)
ENV = {"KAFKA_USER": "alice", "KAFKA_PASSWORD": PASSWORD, "KAFKA_BOOTSTRAP": "b1:9093,b2:9093",
       "SCG_INSTANCE_ID": "orders-0", "OAUTH_SECRET": "oauth-secret-value", "KAFKA_CA_FILE": str(CA_FILE)}
BASE: dict[str, Any] = {
    "name": "demo",
    "kafka": {"bootstrap_servers": "127.0.0.1:9092"},
    "topics": ["events"],
    "group": {"id": "demo-group"},
    "format": {"schema": "id BIGINT, name STRING"},
    "sink": {"path": "out/table"},
}
SASL = {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "${KAFKA_USER}", "sasl_password": "${KAFKA_PASSWORD}"}


def load(tmp_path: Path, env: dict[str, str] | None = None, **overrides: Any) -> PipelineConfig:
    """Write BASE with top-level ``overrides`` (None removes a key) and load it."""
    spec = {**BASE, **overrides}
    spec = {key: value for key, value in spec.items() if value is not None}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_pipeline(path, env=ENV if env is None else env)


def load_error(tmp_path: Path, **overrides: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, **overrides)
    return info.value


def write_pem(path: Path, label: str) -> str:
    text = f"-----BEGIN {label}-----\nTUlJQw==\n-----END {label}-----\n"
    path.write_text(text)
    return text


def kafka_with(**security: Any) -> dict[str, Any]:
    return {"bootstrap_servers": "127.0.0.1:9092", "security": security}


# ---------------------------------------------------------------- defaults and basic fields

def test_minimal_config_gets_documented_defaults(tmp_path: Path):
    config = load(tmp_path)
    assert config.name == "demo"
    assert config.topics == ("events",) and config.topic_pattern is None
    assert config.group.assignors == ("range",) and config.group.instance_id is None
    assert (config.group.session_timeout_ms, config.group.heartbeat_interval_ms,
            config.group.rebalance_timeout_ms) == (10_000, 1_000, 300_000)
    assert config.source == type(config.source)(starting_offsets="earliest", on_data_loss="fail",
                                                max_offsets_per_trigger=500_000)
    assert config.source.spark_options()["maxOffsetsPerTrigger"] == "500000"
    assert config.trigger.processing_time_ms == 2_000 and not config.trigger.available_now
    assert config.kafka.security.protocol == "PLAINTEXT"
    assert config.format.type == "json"
    assert config.transform is None and dict(config.spark) == {}
    assert config.source_file == (tmp_path / "pipeline.yaml").resolve()


def test_a_minimum_batch_above_the_default_bound_raises_the_bound(tmp_path: Path):
    config = load(tmp_path, source={"min_offsets_per_trigger": 800_000})
    assert config.source.max_offsets_per_trigger == 800_000


def test_the_reader_is_scg_kafka_unless_spark_s_kafka_source_is_chosen(tmp_path: Path):
    assert load(tmp_path).source.reader == "scg-kafka"
    assert "reader=scg-kafka" in load(tmp_path).summary()
    config = load(tmp_path, source={"reader": "spark-kafka", "max_offsets_per_trigger": 1000})
    assert (config.source.reader, config.source.max_offsets_per_trigger) == ("spark-kafka", 1000)


def test_either_reader_takes_an_available_now_trigger(tmp_path: Path):
    for reader in ("scg-kafka", "spark-kafka"):
        config = load(tmp_path, source={"reader": reader}, trigger={"available_now": True})
        assert config.trigger.available_now and config.source.reader == reader


def test_relative_paths_resolve_against_the_yaml_directory(tmp_path: Path):
    config = load(tmp_path)
    table = str(tmp_path.resolve() / "out" / "table")
    assert config.sink.path == table
    assert config.sink.dead_letter_path == table + "_dead_letters"
    assert config.checkpoint_root == table + "_checkpoints"


def test_explicit_paths_and_uris_are_kept(tmp_path: Path):
    config = load(tmp_path, sink={"path": "s3a://bucket/tables/demo/", "dead_letter_path": "/dl/demo"},
                  checkpoint_root="../ckpt")
    assert config.sink.path == "s3a://bucket/tables/demo"
    assert config.sink.dead_letter_path == "/dl/demo"
    assert config.checkpoint_root == str(tmp_path.resolve().parent / "ckpt")


@pytest.mark.parametrize("text, ms", [("500ms", 500), ("10s", 10_000), ("5m", 300_000),
                                      ("1h", 3_600_000), ("2d", 172_800_000)])
def test_durations(tmp_path: Path, text: str, ms: int):
    config = load(tmp_path, group={"id": "g", "rebalance_timeout": text}, trigger={"processing_time": text})
    assert config.group.rebalance_timeout_ms == ms
    assert config.trigger.processing_time_ms == ms


@pytest.mark.parametrize("text", ["10", "1.5s", "-1s", "1m30s", "ten seconds", "5 min", "0ms", "", "s"])
def test_bad_durations(tmp_path: Path, text: str):
    error = load_error(tmp_path, group={"id": "g", "session_timeout": text})
    assert (error.condition, error.field_path) == (Condition.BAD_DURATION, "group.session_timeout")


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from([("ms", 1), ("s", 1000), ("m", 60_000)]))
def test_duration_property(number: int, unit: tuple[str, int]):
    from pipelines.config.fields import Ctx, as_duration_ms

    node = parse_yaml(f"d: {number}{unit[0]}").value["d"]
    assert as_duration_ms(Ctx("f", Path("."), {}), node, "d") == number * unit[1]


def test_group_settings(tmp_path: Path):
    config = load(tmp_path, group={"id": "g", "assignor": ["roundrobin", "range"],
                                   "instance_id": "member-${SCG_INSTANCE_ID}", "session_timeout": "30s",
                                   "heartbeat_interval": "3s", "rebalance_timeout": "2m",
                                   "metadata_max_age": "5s"})
    group = config.group
    assert group.assignors == ("roundrobin", "range")
    assert group.instance_id == "member-orders-0"
    assert (group.session_timeout_ms, group.heartbeat_interval_ms, group.rebalance_timeout_ms,
            group.metadata_max_age_ms) == (30_000, 3_000, 120_000, 5_000)


def test_on_server_assignment_policy(tmp_path: Path):
    assert load(tmp_path).group.on_server_assignment == "warn"
    assert load(tmp_path, group={"id": "g", "on_server_assignment": "FAIL"}).group.on_server_assignment == "fail"
    error = load_error(tmp_path, group={"id": "g", "on_server_assignment": "ignore"})
    assert (error.condition, error.field_path) == (Condition.BAD_ENUM, "group.on_server_assignment")


def test_assignor_by_module_class_spec(tmp_path: Path):
    spec = "groupmgr.assignors.roundrobin:RoundRobinAssignor"
    assert load(tmp_path, group={"id": "g", "assignor": spec}).group.assignors == (spec,)


def test_two_assignors_with_the_same_protocol_name_are_rejected(tmp_path: Path):
    error = load_error(tmp_path, group={"id": "g", "assignor": [
        "range", "groupmgr.assignors.range:RangeAssignor"]})
    assert (error.condition, error.field_path) == (Condition.BAD_VALUE, "group.assignor[1]")


def test_topic_pattern(tmp_path: Path):
    config = load(tmp_path, topics=None, topic_pattern="events-.*")
    assert config.topics == () and config.topic_pattern == "events-.*"


@pytest.mark.parametrize("servers, expected", [
    ("a:9092, b:9093", ("a:9092", "b:9093")),
    (["a:9092", "b:9093"], ("a:9092", "b:9093")),
    ("[::1]:9092", ("[::1]:9092",)),
    ("${KAFKA_BOOTSTRAP}", ("b1:9093", "b2:9093")),
])
def test_bootstrap_servers(tmp_path: Path, servers: Any, expected: tuple[str, ...]):
    assert load(tmp_path, kafka={"bootstrap_servers": servers}).kafka.bootstrap_servers == expected


def test_enums_are_case_insensitive_and_canonicalised(tmp_path: Path):
    config = load(tmp_path, kafka=kafka_with(**{**SASL, "protocol": "sasl_ssl", "sasl_mechanism": "plain"}),
                  source={"starting_offsets": "LATEST"})
    assert config.kafka.security.protocol == "SASL_SSL"
    assert config.kafka.security.sasl_mechanism == "PLAIN"
    assert config.source.starting_offsets == "latest"


def test_source_warm_up_limit(tmp_path: Path):
    assert load(tmp_path).source.warm_up_limit_ms == 0  # one rehearsed batch
    assert load(tmp_path, source={"reader": "scg-kafka", "warm_up_limit": "15s"}).source.warm_up_limit_ms == 15_000
    assert load(tmp_path, source={"reader": "scg-kafka", "warm_up_limit": "0s"}).source.warm_up_limit_ms == 0


def test_source_limits_and_spark_options(tmp_path: Path):
    config = load(tmp_path, source={"max_offsets_per_trigger": 5000, "min_offsets_per_trigger": 100,
                                    "fail_on_data_loss": False, "starting_offsets": "error"})
    assert config.source.max_trigger_delay_ms == 15 * 60_000  # Spark's default, made explicit
    assert config.source.on_data_loss == "skip"  # the older boolean, false: skip with a marker row
    assert config.source.spark_options() == {
        "failOnDataLoss": "true", "includeHeaders": "false", "maxOffsetsPerTrigger": "5000",
        "minOffsetsPerTrigger": "100", "maxTriggerDelay": "900000ms"}


def test_include_headers(tmp_path: Path):
    assert load(tmp_path).source.include_headers is False
    config = load(tmp_path, source={"include_headers": True})
    assert config.source.include_headers is True
    assert config.source.spark_options()["includeHeaders"] == "true"
    assert "format=json+headers " in config.summary()
    error = load_error(tmp_path, source={"include_headers": "sometimes"})
    assert error.field_path == "source.include_headers"


def test_on_data_loss_values(tmp_path: Path):
    assert load(tmp_path, source={"on_data_loss": "skip"}).source.on_data_loss == "skip"
    assert load(tmp_path, source={"fail_on_data_loss": True}).source.on_data_loss == "fail"
    error = load_error(tmp_path, source={"on_data_loss": "ignore"})
    assert (error.condition, error.field_path) == (Condition.BAD_ENUM, "source.on_data_loss")
    error = load_error(tmp_path, source={"on_data_loss": "skip", "fail_on_data_loss": True})
    assert (error.condition, error.field_path) == (Condition.CONFLICTING_FIELDS, "source.fail_on_data_loss")


def test_min_above_max_offsets_conflicts(tmp_path: Path):
    error = load_error(tmp_path, source={"max_offsets_per_trigger": 10, "min_offsets_per_trigger": 100})
    assert (error.condition, error.field_path) == (Condition.CONFLICTING_FIELDS, "source.min_offsets_per_trigger")


def test_available_now_trigger(tmp_path: Path):
    config = load(tmp_path, trigger={"available_now": True})
    assert config.trigger.available_now and config.trigger.processing_time_ms is None
    assert config.trigger.spark_trigger_kwargs() == {"availableNow": True}
    assert load(tmp_path, trigger={"processing_time": "5s", "available_now": False}
                ).trigger.spark_trigger_kwargs() == {"processingTime": "5000 milliseconds"}


# ---------------------------------------------------------------- format, schema, partitions, transform

def test_schema_as_mapping_with_aliases_and_decimals(tmp_path: Path):
    config = load(tmp_path, format={"type": "json", "schema": {
        "id": "long", "n": "Integer", "price": "decimal(12, 2)", "d": "decimal", "ok": "BOOLEAN"}})
    assert config.format.schema == (SchemaField("id", "bigint"), SchemaField("n", "int"),
                                    SchemaField("price", "decimal(12,2)"), SchemaField("d", "decimal(10,0)"),
                                    SchemaField("ok", "boolean"))
    assert config.format.schema_ddl() == "`id` BIGINT, `n` INT, `price` DECIMAL(12,2), `d` DECIMAL(10,0), `ok` BOOLEAN"


def test_ddl_schema_with_backquoted_names(tmp_path: Path):
    config = load(tmp_path, format={"schema": "`order id` STRING, ts timestamp, raw BINARY, day DATE"})
    assert config.format.field_names == ("order id", "ts", "raw", "day")
    assert config.format.schema_ddl() == "`order id` STRING, `ts` TIMESTAMP, `raw` BINARY, `day` DATE"


def test_nested_types_are_read_into_spark_normal_form(tmp_path: Path):
    config = load(tmp_path, format={"schema": "tags ARRAY<STRING>, attrs map<string, array<int>>, "
                                              "address STRUCT<City: string, `zip code` INT, at: array<decimal(9, 2)>>"})
    assert config.format.field_names == ("tags", "attrs", "address")
    assert config.format.schema_ddl() == ("`tags` array<string>, `attrs` map<string,array<int>>, "
                                          "`address` struct<`City`:string,`zip code`:int,`at`:array<decimal(9,2)>>")


@pytest.mark.parametrize("schema", ["id BIGINT,", "id", "id BIGINT NOT NULL", "id decimal(10,2",
                                    "id array<int", "id array<foo>", "id map<int, string>", "id struct<>",
                                    "id struct<a int,>", "id array<int> x", "", {}])
def test_bad_schemas(tmp_path: Path, schema: Any):
    assert load_error(tmp_path, format={"schema": schema}).condition == Condition.BAD_SCHEMA


def test_raw_format_partitions_by_kafka_coordinates(tmp_path: Path):
    config = load(tmp_path, format={"type": "raw"}, sink={"path": "t", "partition_by": ["topic", "partition"]})
    assert config.format.type == "raw" and config.format.schema == () and config.format.schema_ddl() is None
    assert config.sink.partition_by == ("topic", "partition")


def test_a_json_pipeline_may_add_columns_with_or_without_a_transform(tmp_path: Path):
    assert load(tmp_path, sink={"path": "t", "schema_evolution": "add_columns"}).sink.schema_evolution == "add_columns"
    config = load(tmp_path, transform="SELECT * FROM `input`", sink={"path": "t", "schema_evolution": "add_columns"})
    assert config.sink.schema_evolution == "add_columns"


def test_several_tables_with_routes(tmp_path: Path):
    config = load(tmp_path, topics=["orders", "refunds"], sink={
        "dead_letter_path": "out/dead", "route": "ALL",
        "tables": [{"name": "orders", "path": "out/orders", "partition_by": ["kind"], "route": {"topics": "orders"}},
                   {"name": "big", "path": "out/big", "transform": "SELECT id FROM input",
                    "route": {"where": "id > 100"}},
                   {"name": "kinds", "path": "out/kinds", "route": {"field": "kind", "values": ["a", 1, True]}}]},
        format={"schema": "id BIGINT, kind STRING"})
    sink = config.sink
    assert sink.route == "all" and sink.path == str(tmp_path / "out" / "orders")
    assert [t.name for t in sink.output_tables(config.transform)] == ["orders", "big", "kinds"]
    orders, big, kinds = sink.tables
    assert orders.partition_by == ("kind",) and big.transform == "SELECT id FROM input"
    assert [t.route.condition() for t in sink.tables] == [
        "`topic` IN ('orders')", "(id > 100)", "CAST(`kind` AS STRING) IN ('a', '1', 'true')"]
    assert config.checkpoint_root == f"{orders.path}_checkpoints"


def test_one_table_takes_every_record_with_the_top_level_transform(tmp_path: Path):
    config = load(tmp_path, transform="SELECT * FROM input")
    (only,) = config.sink.output_tables(config.transform)
    assert (only.path, only.route, only.transform) == (config.sink.path, None, "SELECT * FROM input")


def test_partition_by_schema_field(tmp_path: Path):
    assert load(tmp_path, sink={"path": "t", "partition_by": ["name"]}).sink.partition_by == ("name",)


def test_transform_may_partition_by_derived_columns(tmp_path: Path):
    config = load(tmp_path, transform="SELECT *, to_date(now()) AS day FROM `input`",
                  sink={"path": "t", "partition_by": ["day"]})
    assert config.transform.endswith("FROM `input`")
    assert config.sink.partition_by == ("day",)


# ---------------------------------------------------------------- secrets and masking

def test_env_secrets(tmp_path: Path):
    security = load(tmp_path, kafka=kafka_with(**SASL)).kafka.security
    assert security.sasl_username == "alice"
    assert isinstance(security.sasl_password, Secret)
    assert security.sasl_password.reveal() == PASSWORD
    assert security.sasl_password.source == "env:KAFKA_PASSWORD"


def test_file_secrets_resolve_relative_to_yaml_and_strip_newline(tmp_path: Path):
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "kafka").write_text(PASSWORD + "\n")
    (tmp_path / "keypass").write_text("key-pass-value\r\n")
    sasl = {**SASL, "sasl_password": None, "sasl_password_file": "secrets/kafka"}
    write_client_files(tmp_path, name="c", password="key-pass-value")
    ssl = {"ssl_certificate_location": "c.pem", "ssl_key_location": "c-key.pem", "ssl_key_password_file": "keypass"}
    security = load(tmp_path, kafka=kafka_with(**{k: v for k, v in {**sasl, **ssl}.items() if v})).kafka.security
    assert security.sasl_password.reveal() == PASSWORD
    assert security.ssl_key_password.reveal() == "key-pass-value"
    assert security.ssl_certificate_location == str(tmp_path.resolve() / "c.pem")


def test_secret_given_twice_conflicts(tmp_path: Path):
    error = load_error(tmp_path, kafka=kafka_with(**SASL, sasl_password_file="x"))
    assert (error.condition, error.field_path) == (Condition.CONFLICTING_FIELDS,
                                                   "kafka.security.sasl_password_file")


def test_secret_value_class():
    secret = Secret("value-123", source="env:X")
    assert repr(secret) == str(secret) == f"{secret}" == f"{secret:>20}" == "Secret(***)"
    assert secret.reveal() == "value-123"
    assert secret == Secret("value-123") and secret != Secret("other") and hash(secret) == hash(Secret("value-123"))
    assert not hasattr(secret, "__dict__")


def test_file_secret_helper(tmp_path: Path):
    path = tmp_path / "s"
    path.write_text("abc\n\n")
    assert file_secret(path).reveal() == "abc"


def _secure(tmp_path: Path) -> PipelineConfig:
    return load(tmp_path, kafka={**kafka_with(**SASL, ssl_ca_location="${KAFKA_CA_FILE}"),
                                 "client_config": {"sasl.oauthbearer.client.secret": "${OAUTH_SECRET}",
                                                   "request.timeout.ms": 20000}},
                spark={"spark.sql.shuffle.partitions": 4, "spark.hadoop.fs.s3a.secret.key": "${OAUTH_SECRET}",
                       "spark.sql.ansi.enabled": True})


def test_secrets_never_appear_in_repr_str_or_describe(tmp_path: Path):
    config = _secure(tmp_path)
    texts = [repr(config), str(config), repr(config.kafka), repr(config.kafka.security),
             json.dumps(config.describe()), config.summary(), repr(config.spark)]
    for text in texts:
        assert PASSWORD not in text and "oauth-secret-value" not in text
    described = config.describe()
    assert described["kafka"]["security"]["sasl_password"] == "***"
    assert described["kafka"]["client_config"]["sasl.oauthbearer.client.secret"] == "***"
    assert described["spark"]["spark.hadoop.fs.s3a.secret.key"] == "***"
    assert "Secret(***)" in repr(config)


def test_settings_maps_are_strings_and_secrets_reveal_for_clients(tmp_path: Path):
    config = _secure(tmp_path)
    assert config.spark_conf() == {"spark.sql.shuffle.partitions": "4", "spark.sql.ansi.enabled": "true",
                                   "spark.hadoop.fs.s3a.secret.key": "oauth-secret-value"}
    assert config.kafka.confluent_config()["sasl.oauthbearer.client.secret"] == "oauth-secret-value"


def test_main_validate_ok_line_masks_secrets(tmp_path: Path, capsys, monkeypatch):
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({**BASE, "kafka": kafka_with(**SASL)}))
    assert main_validate(path, show=True) == 0
    out, err = capsys.readouterr()
    assert out.startswith("OK demo: ") and err == ""
    assert PASSWORD not in out and '"sasl_password": "***"' in out


# ---------------------------------------------------------------- client option mapping

def test_plaintext_client_options(tmp_path: Path):
    kafka = load(tmp_path, kafka={"bootstrap_servers": ["a:1", "b:2"]}).kafka
    assert kafka.confluent_config() == {"bootstrap.servers": "a:1,b:2", "security.protocol": "PLAINTEXT"}
    assert kafka.kafka_python_kwargs() == {"bootstrap_servers": ["a:1", "b:2"], "security_protocol": "PLAINTEXT"}
    assert kafka.spark_kafka_options() == {"kafka.bootstrap.servers": "a:1,b:2",
                                           "kafka.security.protocol": "PLAINTEXT"}


def test_sasl_ssl_client_options(tmp_path: Path):
    kafka = _secure(tmp_path).kafka
    assert kafka.confluent_config() == {
        "bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORD,
        "ssl.ca.location": str(CA_FILE), "sasl.oauthbearer.client.secret": "oauth-secret-value",
        "request.timeout.ms": "20000"}
    assert kafka.kafka_python_kwargs(accepted={"request_timeout_ms", "client_id"}) == {
        "bootstrap_servers": ["127.0.0.1:9092"], "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD,
        "ssl_cafile": str(CA_FILE), "request_timeout_ms": 20000}
    spark = kafka.spark_kafka_options()
    assert spark["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert spark["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required '
        f'username="alice" password="{PASSWORD}";')
    assert spark["kafka.ssl.truststore.type"] == "PEM"
    assert spark["kafka.ssl.truststore.certificates"] == CA_FILE.read_text()  # inline: executors have no file
    assert "kafka.ssl.truststore.location" not in spark
    assert spark["kafka.request.timeout.ms"] == "20000"


def test_client_config_reaches_the_group_member(tmp_path: Path):
    from pipelines.runtime.membership import member_config_for

    member = member_config_for(_secure(tmp_path))
    assert member.client_kwargs["request_timeout_ms"] == 20000
    assert member.client_kwargs["sasl_plain_password"] == PASSWORD


@pytest.mark.parametrize("key, value", [("fetch.max.bytez", 1), ("request.timeout.ms", "soon")])
def test_a_client_setting_librdkafka_refuses_is_a_config_error(tmp_path: Path, key: str, value: Any):
    error = load_error(tmp_path, kafka={"bootstrap_servers": "a:1", "client_config": {key: value}})
    assert (error.condition, error.field_path, error.line) == (
        Condition.UNKNOWN_CLIENT_SETTING, f'kafka.client_config["{key}"]', 5)


def test_java_only_and_consumer_settings_are_accepted(tmp_path: Path):
    config = load(tmp_path, kafka={"bootstrap_servers": "a:1", "client_config": {
        "ssl.truststore.location": "/ts.jks", "fetch.max.bytes": 1048576, "client.dns.lookup": "use_all_dns_ips"}})
    assert set(config.kafka.client_config) == {"ssl.truststore.location", "fetch.max.bytes", "client.dns.lookup"}


def test_plain_jaas_quotes_special_characters(tmp_path: Path):
    env = {**ENV, "KAFKA_PASSWORD": 'p"a\\ss'}
    kafka = load(tmp_path, env=env, kafka=kafka_with(**{**SASL, "protocol": "SASL_PLAINTEXT",
                                                        "sasl_mechanism": "PLAIN"})).kafka
    assert kafka.spark_kafka_options()["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="alice" password="p\\"a\\\\ss";')
    assert "kafka.ssl.truststore.location" not in kafka.spark_kafka_options()


def test_java_only_client_settings_go_to_spark_only(tmp_path: Path):
    kafka = load(tmp_path, kafka={"bootstrap_servers": "a:1", "security": {"protocol": "SSL"},
                                  "client_config": {"ssl.truststore.location": "/ts.jks",
                                                    "ssl.truststore.password": "${KAFKA_PASSWORD}"}}).kafka
    assert kafka.spark_kafka_options()["kafka.ssl.truststore.location"] == "/ts.jks"
    assert kafka.spark_kafka_options()["kafka.ssl.truststore.password"] == PASSWORD
    assert "ssl.truststore.location" not in kafka.confluent_config()


def test_client_certificate_becomes_inline_pem_keystore_for_spark(tmp_path: Path):
    """The key reaches Spark decrypted (tests/unit/test_validate_client_keys.py: every form)."""
    files = write_client_files(tmp_path, name="c", form="traditional")
    kafka = load(tmp_path, kafka=kafka_with(protocol="SSL", ssl_certificate_location="c.pem",
                                            ssl_key_location="c-key.pem")).kafka
    spark = kafka.spark_kafka_options()
    assert (spark["kafka.ssl.keystore.type"], spark["kafka.ssl.keystore.certificate.chain"]) == (
        "PEM", files.cert_file.read_text())
    assert spark["kafka.ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")
    assert "kafka.ssl.key.password" not in spark
    assert kafka.confluent_config()["ssl.key.location"] == str(tmp_path.resolve() / "c-key.pem")
    assert "ssl_password" not in kafka.kafka_python_kwargs()


def test_certificate_without_key_conflicts(tmp_path: Path):
    write_pem(tmp_path / "c.pem", "CERTIFICATE")
    error = load_error(tmp_path, kafka=kafka_with(protocol="SSL", ssl_certificate_location="c.pem"))
    assert (error.condition, error.field_path) == (Condition.CONFLICTING_FIELDS,
                                                   "kafka.security.ssl_certificate_location")


@pytest.mark.parametrize("content, condition", [
    (None, Condition.FILE_NOT_FOUND), ("not a certificate", Condition.BAD_VALUE)])
def test_tls_files_must_be_readable_pem_when_loaded(tmp_path: Path, content: str | None, condition: Condition):
    if content is not None:
        (tmp_path / "ca.pem").write_text(content)
    error = load_error(tmp_path, kafka=kafka_with(protocol="SSL", ssl_ca_location="ca.pem"))
    assert (error.condition, error.field_path) == (condition, "kafka.security.ssl_ca_location")


# ---------------------------------------------------------------- immutability, loader, examples

def test_config_is_frozen(tmp_path: Path):
    config = load(tmp_path, spark={"spark.x": "1"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.spark["spark.x"] = "2"  # type: ignore[index]
    assert isinstance(config.topics, tuple) and isinstance(config.group.assignors, tuple)


def test_loader_keeps_key_lines_and_key_text():
    root = parse_yaml("a:\n  b:\n    - x\n    - y\non: 1\n")
    assert root.line == 1
    assert root.value["a"].line == 1 and root.value["a"].value["b"].line == 2
    assert [item.line for item in root.value["a"].value["b"].value] == [3, 4]
    assert "on" in root.value and root.value["on"].value == 1


def test_yaml_anchors_and_merge_keys(tmp_path: Path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(BASE, sort_keys=False) + (
        "trigger: &t\n  processing_time: 7s\n"
        "spark:\n  <<: {spark.a: '1', spark.b: '2'}\n  spark.b: '3'\n"))
    config = load_pipeline(path, env=ENV)
    assert config.trigger.processing_time_ms == 7000
    assert dict(config.spark) == {"spark.a": "1", "spark.b": "3"}


def test_demo_example_validates():
    config = load_pipeline(EXAMPLES / "demo.yaml", env={})
    assert config.name == "demo" and config.topics == ("events",)
    assert config.sink.path == "/tmp/scg/demo/table"


def test_secure_example_validates_with_env_set():
    config = load_pipeline(EXAMPLES / "example-secure.yaml", env=ENV)
    security = config.kafka.security
    assert (security.protocol, security.sasl_mechanism, security.sasl_username) == (
        "SASL_SSL", "SCRAM-SHA-512", "alice")
    assert security.sasl_password.reveal() == PASSWORD
    assert PASSWORD not in repr(config) and PASSWORD not in json.dumps(config.describe())
    assert config.group.instance_id == "orders-0"


def test_secure_example_fails_without_env():
    with pytest.raises(ConfigError) as info:
        load_pipeline(EXAMPLES / "example-secure.yaml", env={})
    assert info.value.condition == Condition.ENV_VAR_NOT_SET


def test_load_pipeline_uses_process_environment_by_default(monkeypatch):
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    assert load_pipeline(EXAMPLES / "example-secure.yaml").kafka.security.sasl_username == os.environ["KAFKA_USER"]


def test_config_survives_pickling_with_secrets(tmp_path: Path):
    import pickle

    config = _secure(tmp_path)
    copy = pickle.loads(pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL))
    assert copy.kafka.security.sasl_password.reveal() == PASSWORD
    assert copy.describe() == config.describe()


def test_metrics_are_on_by_default_on_a_free_port_and_can_be_set_or_turned_off(tmp_path):
    from pipelines.config.model import MetricsConfig

    assert load(tmp_path).metrics == MetricsConfig(enabled=True, port=0, host="0.0.0.0")
    assert load(tmp_path, metrics={"port": 9464, "host": "127.0.0.1"}).metrics.port == 9464
    assert not load(tmp_path, metrics={"enabled": False}).metrics.enabled


@pytest.mark.parametrize("metrics, condition", [
    ({"port": 65536}, Condition.BAD_VALUE), ({"port": -1}, Condition.BAD_VALUE),
    ({"port": "http"}, Condition.WRONG_TYPE), ({"enabled": "yes"}, Condition.WRONG_TYPE),
    ({"prot": 1}, Condition.UNKNOWN_KEY),
])
def test_a_bad_metrics_section_names_its_field(tmp_path, metrics, condition):
    error = load_error(tmp_path, metrics=metrics)
    assert error.condition == condition and error.field_path.startswith("metrics.")
