"""Validated, frozen pipeline configuration: the dataclasses :func:`pipelines.config.load_pipeline`
returns.

Durations are held as integer milliseconds. Secrets are :class:`Secret` values: no
``repr`` shows them, ``describe()`` masks them as ``"***"``, and only the client-option
helpers (:meth:`KafkaConfig.confluent_config` etc.) reveal them, because clients need them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from pipelines.config.secrets import MASK, Secret, mask, reveal


EMPTY: Mapping[str, Any] = MappingProxyType({})
KAFKA_COORDINATE_COLUMNS = ("topic", "partition")
# client_config keys only the Java client understands: given to Spark, never to librdkafka.
JAVA_ONLY_CLIENT_PREFIXES = ("ssl.truststore.", "ssl.keystore.", "sasl.jaas.config", "sasl.login.",
                       "sasl.client.callback.handler.class", "ssl.engine.factory.class")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def is_java_only_client_setting(key: str) -> bool:
    """A client_config key only Java clients understand: given to Spark's source, not to librdkafka."""
    return key.startswith(JAVA_ONLY_CLIENT_PREFIXES)


def _jaas_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _kafka_python_value(text: str) -> Any:
    """A dotted-config string as kafka-python wants it: ints and booleans converted."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text


class _PicklableMappings:
    """Mixin: MappingProxyType fields cannot be pickled, so pickle them as dicts and re-wrap."""

    def __reduce__(self) -> tuple[Any, ...]:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        plain = {k: dict(v) if isinstance(v, MappingProxyType) else v for k, v in values.items()}
        return (_rebuild, (type(self), plain))


def _rebuild(cls: type, values: dict[str, Any]) -> Any:
    return cls(**{k: MappingProxyType(v) if isinstance(v, dict) else v for k, v in values.items()})


@dataclass(frozen=True)
class SecurityConfig:
    """How every Kafka client authenticates; ``protocol`` is PLAINTEXT when the section is absent."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: Secret | None = None

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


@dataclass(frozen=True)
class KafkaConfig(_PicklableMappings):
    """Brokers, security and extra client settings, mapped for each client library."""

    bootstrap_servers: tuple[str, ...]
    security: SecurityConfig = SecurityConfig()
    client_config: Mapping[str, str | Secret] = field(default_factory=lambda: EMPTY)

    @property
    def bootstrap_string(self) -> str:
        return ",".join(self.bootstrap_servers)

    def confluent_config(self) -> dict[str, str]:
        """librdkafka settings (confluent-kafka); secrets revealed. Java-only client_config keys dropped."""
        sec = self.security
        conf = _drop_none({
            "bootstrap.servers": self.bootstrap_string,
            "security.protocol": sec.protocol,
            "sasl.mechanism": sec.sasl_mechanism,
            "sasl.username": sec.sasl_username,
            "sasl.password": sec.sasl_password and sec.sasl_password.reveal(),
            "ssl.ca.location": sec.ssl_ca_location,
            "ssl.certificate.location": sec.ssl_certificate_location,
            "ssl.key.location": sec.ssl_key_location,
            "ssl.key.password": sec.ssl_key_password and sec.ssl_key_password.reveal(),
        })
        conf.update({k: reveal(v) for k, v in self.client_config.items() if not is_java_only_client_setting(k)})
        return conf

    def kafka_python_kwargs(self, accepted: Iterable[str] | None = None) -> dict[str, Any]:
        """kafka-python keyword arguments; secrets revealed.

        ``client_config`` entries are added (dots -> underscores, ints/bools converted) only
        when ``accepted`` (e.g. ``KafkaConsumer.DEFAULT_CONFIG``) is given and names them.
        """
        sec = self.security
        kwargs = _drop_none({
            "bootstrap_servers": list(self.bootstrap_servers),
            "security_protocol": sec.protocol,
            "sasl_mechanism": sec.sasl_mechanism,
            "sasl_plain_username": sec.sasl_username,
            "sasl_plain_password": sec.sasl_password and sec.sasl_password.reveal(),
            "ssl_cafile": sec.ssl_ca_location,
            "ssl_certfile": sec.ssl_certificate_location,
            "ssl_keyfile": sec.ssl_key_location,
            "ssl_password": sec.ssl_key_password and sec.ssl_key_password.reveal(),
        })
        names = set(accepted or ())
        for key, value in self.client_config.items():
            name = key.replace(".", "_")
            if name in names and name not in kwargs:
                kwargs[name] = _kafka_python_value(reveal(value))
        return kwargs

    def spark_kafka_options(self) -> dict[str, str]:
        """Options for Spark's Kafka source (``kafka.``-prefixed Java client settings); secrets revealed.

        SASL PLAIN/SCRAM becomes ``kafka.sasl.jaas.config``; ``ssl_ca_location`` becomes an inline
        PEM truststore and a client certificate/key pair an inline PEM keystore (the files are read
        here, on the driver, so executors need not have them). Every client_config entry is passed
        through. Spark redacts these options in plans and event logs by the pattern
        :data:`pipelines.runtime.spark_session.OPTION_REDACTION` the runner adds to the session.
        """
        sec = self.security
        opts = {"kafka.bootstrap.servers": self.bootstrap_string, "kafka.security.protocol": sec.protocol}
        opts.update(self._spark_sasl_options())
        opts.update(self._spark_ssl_options())
        opts.update({f"kafka.{k}": reveal(v) for k, v in self.client_config.items()})
        return opts

    def _spark_sasl_options(self) -> dict[str, str]:
        sec = self.security
        if not sec.uses_sasl or sec.sasl_mechanism is None:
            return {}
        password = sec.sasl_password.reveal() if sec.sasl_password else ""
        jaas = (f"{_LOGIN_MODULES[sec.sasl_mechanism]} required username={_jaas_quote(sec.sasl_username or '')}"
                f" password={_jaas_quote(password)};")
        return {"kafka.sasl.mechanism": sec.sasl_mechanism, "kafka.sasl.jaas.config": jaas}

    def _spark_ssl_options(self) -> dict[str, str]:
        sec = self.security
        opts: dict[str, str] = {}
        if sec.ssl_ca_location:
            opts["kafka.ssl.truststore.type"] = "PEM"
            opts["kafka.ssl.truststore.certificates"] = Path(sec.ssl_ca_location).read_text()
        if sec.ssl_certificate_location and sec.ssl_key_location:
            opts["kafka.ssl.keystore.type"] = "PEM"
            opts["kafka.ssl.keystore.certificate.chain"] = Path(sec.ssl_certificate_location).read_text()
            opts["kafka.ssl.keystore.key"] = Path(sec.ssl_key_location).read_text()
            if sec.ssl_key_password:
                opts["kafka.ssl.key.password"] = sec.ssl_key_password.reveal()
        return opts


@dataclass(frozen=True)
class GroupConfig:
    """The Kafka consumer group every member of this pipeline joins."""

    id: str
    assignors: tuple[str, ...] = ("range",)  # preference order; names or "pkg.module:Class"
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    rebalance_timeout_ms: int = 300_000  # also the longest a batch may run (Kafka's max.poll.interval.ms default)
    metadata_max_age_ms: int = 30_000  # how often topic_pattern is re-matched and partition counts re-read
    # When the broker runs the group with its own assignor (a KIP-848 consumer joined): "warn" says
    # so in the progress lines and describe; "fail" ends the member (GROUP_RUN_BY_BROKER).
    on_server_assignment: str = "warn"


# Records per micro-batch when source.max_offsets_per_trigger is not set. Without a bound the first
# batch over a backlog is the whole backlog. Executors stream each task's records to Parquet, so the
# bound is about batch duration and retry cost more than memory: 500,000 records of 1 KB is ~500 MB
# per batch, split across the batch's Kafka partitions (one Spark task each).
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 500_000
# A fresh driver's batches take 20-60 s of batches to come down to a warm one's (JIT compilation,
# measured on 2 cores with three drivers); a member that joins a group others read spends that
# before it joins rather than in the first batches of the partitions it takes over.
DEFAULT_WARM_UP_LIMIT_MS = 60_000


@dataclass(frozen=True)
class SourceConfig:
    """Where to start without stored offsets, and Spark's admission control."""

    starting_offsets: str = "earliest"  # earliest | latest | error
    max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int | None = None  # set (default 15m) only with min_offsets_per_trigger
    on_data_loss: str = "fail"  # fail | skip: records deleted (retention) before they were read
    reader: str = "spark-kafka"  # spark-kafka (one query per assignment) | scg-kafka (follows it, no restart)
    include_headers: bool = False  # records' headers land in column `headers` of both tables
    # scg-kafka: how long a member joining a group that others already read rehearses batches at
    # most before it joins (runner warm-up; pipelines.runtime.warm_up_rounds); 0: one batch
    warm_up_limit_ms: int = DEFAULT_WARM_UP_LIMIT_MS

    def spark_options(self) -> dict[str, str]:
        """Rate-limit and header options for Spark's Kafka source (not startingOffsets: the
        runner computes those). ``failOnDataLoss`` is always true: Spark stops the query at a gap
        and the runner applies ``on_data_loss`` to the partition (a marker row or a stopped
        partition, never a silent skip)."""
        opts = {"failOnDataLoss": "true", "includeHeaders": str(self.include_headers).lower()}
        opts["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        if self.min_offsets_per_trigger is not None:
            opts["minOffsetsPerTrigger"] = str(self.min_offsets_per_trigger)
        if self.max_trigger_delay_ms is not None:
            opts["maxTriggerDelay"] = f"{self.max_trigger_delay_ms}ms"
        return opts


@dataclass(frozen=True)
class SchemaField:
    """One JSON field: ``type`` is a normalised Spark SQL type ("bigint", "decimal(10,2)", ...)."""

    name: str
    type: str


@dataclass(frozen=True)
class FormatConfig:
    """How record values are decoded: ``json`` with a schema, or ``raw`` bytes."""

    type: str = "json"
    schema: tuple[SchemaField, ...] = ()
    max_value_bytes: int = 1024 * 1024  # longer values go to the dead-letter table (value_too_large)

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.schema)

    def schema_ddl(self) -> str | None:
        """The schema as a Spark DDL string (for ``from_json``), or None for raw."""
        if not self.schema:
            return None
        return ", ".join(f"`{f.name.replace('`', '``')}` {f.type.upper()}" for f in self.schema)


@dataclass(frozen=True)
class SinkConfig:
    """The Delta table and its dead-letter table (absolute paths or URIs)."""

    path: str
    dead_letter_path: str
    partition_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class TriggerConfig:
    """Exactly one of a processing-time trigger or available-now."""

    processing_time_ms: int | None = 2_000
    available_now: bool = False

    def spark_trigger_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``DataStreamWriter.trigger``."""
        if self.available_now:
            return {"availableNow": True}
        return {"processingTime": f"{self.processing_time_ms} milliseconds"}


# Storage options that would let two writers overwrite each other's Delta commit on S3. deltalake
# 1.6 commits with put-if-absent (If-None-Match); these switch it off or ask for what it no longer has.
UNSAFE_STORAGE_OPTIONS = {
    "aws_conditional_put": ("disabled",),
    "conditional_put": ("disabled",),
    "aws_s3_allow_unsafe_rename": ("true",),
    "aws_s3_locking_provider": None,  # any value: DynamoDB locking is gone from deltalake 1.x
}


@dataclass(frozen=True)
class StorageConfig(_PicklableMappings):
    """Object-store access, configured once for every client of the tables and checkpoints:
    Spark's Hadoop ``fs.s3a.*`` settings and deltalake's storage options are both derived from it.
    ``options`` are extra deltalake storage options (e.g. ``azure_*``, ``google_*``). Secrets are
    :class:`Secret` s; only the two mapping methods reveal them."""

    endpoint: str | None = None          # an S3-compatible endpoint URL; None for AWS S3
    region: str | None = None
    access_key_id: str | None = None     # None: the default AWS credential chain
    secret_access_key: Secret | None = None
    session_token: Secret | None = None
    path_style: bool = False
    options: Mapping[str, str | Secret] = field(default_factory=lambda: EMPTY)

    @property
    def configured(self) -> bool:
        return any((self.endpoint, self.region, self.access_key_id, self.options))

    def delta_storage_options(self) -> dict[str, str]:
        """deltalake (object_store) options; secrets revealed. Commits stay put-if-absent."""
        opts = _drop_none({
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": reveal(self.secret_access_key) if self.secret_access_key else None,
            "AWS_SESSION_TOKEN": reveal(self.session_token) if self.session_token else None,
        })
        if self.endpoint:
            opts["AWS_ALLOW_HTTP"] = str(self.endpoint.startswith("http://")).lower()
            opts["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not self.path_style).lower()
        opts.update({key: reveal(value) for key, value in self.options.items()})
        return opts

    def hadoop_settings(self) -> dict[str, str]:
        """Hadoop settings for Spark's s3a (``s3://`` mapped to it as deltalake does); secrets revealed."""
        if not (self.endpoint or self.region or self.access_key_id):
            return {}
        conf = _drop_none({
            "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": self.region,
            "fs.s3a.path.style.access": str(self.path_style).lower(),
            "fs.s3a.access.key": self.access_key_id,
            "fs.s3a.secret.key": reveal(self.secret_access_key) if self.secret_access_key else None,
            "fs.s3a.session.token": reveal(self.session_token) if self.session_token else None,
        })
        if self.endpoint:
            conf["fs.s3a.connection.ssl.enabled"] = str(self.endpoint.startswith("https://")).lower()
        if self.access_key_id:
            conf["fs.s3a.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider" if self.session_token
                else "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
        return conf


@dataclass(frozen=True)
class PipelineConfig(_PicklableMappings):
    """One validated pipeline spec. ``spark`` values that are secrets are :class:`Secret` s."""

    name: str
    kafka: KafkaConfig
    topics: tuple[str, ...]
    topic_pattern: str | None
    group: GroupConfig
    source: SourceConfig
    format: FormatConfig
    transform: str | None
    sink: SinkConfig
    trigger: TriggerConfig
    checkpoint_root: str
    spark: Mapping[str, str | Secret] = field(default_factory=lambda: EMPTY)
    storage: StorageConfig = StorageConfig()
    source_file: Path = Path(".")

    def spark_conf(self) -> dict[str, str]:
        """The ``spark`` settings plus the storage section's Hadoop settings (``spark.hadoop.*``),
        secrets revealed (to configure the session)."""
        hadoop = {f"spark.hadoop.{key}": value for key, value in self.storage.hadoop_settings().items()}
        return {**hadoop, **{key: reveal(value) for key, value in self.spark.items()}}

    def describe(self) -> dict[str, Any]:
        """The whole config as plain data (JSON-able), every secret replaced by ``"***"``."""
        return _display(self)

    def summary(self) -> str:
        """One line for ``scg validate``: name, topics, group, security, sink (no secrets)."""
        subscription = ",".join(self.topics) if self.topics else f"/{self.topic_pattern}/"
        sec = self.kafka.security
        auth = sec.protocol + (f"/{sec.sasl_mechanism} user={sec.sasl_username}" if sec.uses_sasl else "")
        trigger = "available_now" if self.trigger.available_now else f"every {self.trigger.processing_time_ms}ms"
        return (f"{self.name}: topics={subscription} group={self.group.id} "
                f"assignors={','.join(self.group.assignors)} reader={self.source.reader} "
                f"kafka={self.kafka.bootstrap_string} ({auth}) "
                f"format={self.format.type}{'+headers' if self.source.include_headers else ''} "
                f"sink={self.sink.path} trigger={trigger}")


def _display(value: Any) -> Any:
    if isinstance(value, Secret):
        return MASK
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _display(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {key: _display(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_display(item) for item in value]
    return mask(value)
