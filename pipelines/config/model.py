"""Validated, frozen pipeline configuration: the dataclasses :func:`pipelines.config.load_pipeline`
returns.

Every field that a pipeline file sets carries a :class:`KeyDoc` in its metadata (:func:`key_doc`):
its YAML key, type as written, example, what it maps to and what it does. The configuration
reference (docs/configuration.md) is generated from them by :mod:`pipelines.config.reference`.

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

from pipelines.config.client_keys import TlsFileChanged, TlsMaterialProblem, java_client_key
from pipelines.config.secrets import MASK, Secret, mask, reveal
from pipelines.runtime.registry_client import RegistrySettings


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


DOC = "scg.doc"  # the metadata key of a field's KeyDoc

# How values are written in a pipeline file (KeyDoc.kind). ENUM: the choices are the validator's.
SECTION, STRING, ENUM, DURATION, POSITIVE_INT, BOOL = ("section", "string", "one of", "duration",
                                                       "positive integer", "true or false")
LOCATION, PEM_FILE, SECRET = "path or URI", "path of a PEM file", "secret: `${ENV}`, or `<key>_file: path`"
SETTINGS, NAMES = "mapping of setting -> value", "list of names"
SECTIONS = "list of sections"  # a list whose items are sections of one kind (``sink.tables``)


@dataclass(frozen=True)
class KeyDoc:
    """How a pipeline file sets one model field; docs/configuration.md is generated from these.

    ``key``: the YAML key inside the field's section (None: not set by a file). ``kind``: how the
    value is written. ``example``: one value as YAML. ``maps_to``: the Kafka, Spark or Delta setting
    or the behaviour it drives. ``text``: what it does, in short sentences. ``default``: what a file
    that leaves the key out gets, when the field's own default does not say it (a derived value,
    "required"). ``aliases``: other keys that set the same field (``<key>_file``, an older name).
    """

    key: str | None
    kind: str
    example: str
    maps_to: str
    text: str
    default: str | None = None
    aliases: tuple[str, ...] = ()


def key_doc(key: str | None, kind: str, example: str, maps_to: str, text: str, *,
            default: str | None = None, aliases: tuple[str, ...] = ()) -> Mapping[str, KeyDoc]:
    """A field's ``metadata`` holding its :class:`KeyDoc` under :data:`DOC`."""
    return MappingProxyType({DOC: KeyDoc(key, kind, example, maps_to, text, default, aliases)})


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

    protocol: str = field(default="PLAINTEXT", metadata=key_doc(
        "protocol", ENUM, "SASL_SSL", "`security.protocol` of every client (Spark: `kafka.security.protocol`)",
        "How clients talk to the brokers. Required when the section is given.", default="`PLAINTEXT`"))
    sasl_mechanism: str | None = field(default=None, metadata=key_doc(
        "sasl_mechanism", ENUM, "SCRAM-SHA-512", "`sasl.mechanism`",
        "Required with a `SASL_*` protocol, refused with the others."))
    sasl_username: str | None = field(default=None, metadata=key_doc(
        "sasl_username", STRING, "${KAFKA_USER}", "`sasl.username`; the JAAS `username` for Spark",
        "The SASL user. Required with a `SASL_*` protocol. `${ENV}` references are replaced."))
    sasl_password: Secret | None = field(default=None, metadata=key_doc(
        "sasl_password", SECRET, "${KAFKA_PASSWORD}", "`sasl.password`; the JAAS `password` for Spark",
        "The SASL password. Required with a `SASL_*` protocol. Never inline; masked everywhere.",
        aliases=("sasl_password_file",)))
    ssl_ca_location: str | None = field(default=None, metadata=key_doc(
        "ssl_ca_location", PEM_FILE, "/etc/kafka/ca.pem",
        "`ssl.ca.location`; Spark: an inline PEM truststore (`kafka.ssl.truststore.certificates`)",
        "The CA that signed the brokers' certificates. Read on the driver; executors get its text inline."))
    ssl_certificate_location: str | None = field(default=None, metadata=key_doc(
        "ssl_certificate_location", PEM_FILE, "/etc/kafka/client.pem",
        "`ssl.certificate.location`; Spark: `kafka.ssl.keystore.certificate.chain` (inline)",
        "The client certificate for mutual TLS. Give it with `ssl_key_location`."))
    ssl_key_location: str | None = field(default=None, metadata=key_doc(
        "ssl_key_location", PEM_FILE, "/etc/kafka/client-key.pem",
        "`ssl.key.location`; Spark: `kafka.ssl.keystore.key` (inline, decrypted, PKCS#8)",
        "The client certificate's private key (PKCS#8 or traditional PEM, RSA or EC). Give it with "
        "`ssl_certificate_location`. Validation checks that it is the certificate's key."))
    ssl_key_password: Secret | None = field(default=None, metadata=key_doc(
        "ssl_key_password", SECRET, "${KAFKA_KEY_PASSWORD}",
        "`ssl.key.password`; Spark: none (its key is decrypted on the driver)",
        "The private key's password. Needs `ssl_key_location`; required for an encrypted key, "
        "refused for an unencrypted one.",
        aliases=("ssl_key_password_file",)))

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


@dataclass(frozen=True)
class KafkaConfig(_PicklableMappings):
    """Brokers, security and extra client settings, mapped for each client library."""

    bootstrap_servers: tuple[str, ...] = field(metadata=key_doc(
        "bootstrap_servers", "host:port, comma-separated or a list", "broker1:9092,broker2:9092",
        "`bootstrap.servers` of every client (Spark: `kafka.bootstrap.servers`)",
        "The brokers to start from. `${ENV}` references are replaced.", default="required"))
    security: SecurityConfig = field(default=SecurityConfig(), metadata=key_doc(
        "security", SECTION, "{protocol: SASL_SSL, ...}", "every Kafka client the member runs",
        "How every client authenticates: the group member, confluent-kafka and Spark's source.",
        default="`protocol: PLAINTEXT`"))
    client_config: Mapping[str, str | Secret] = field(default_factory=lambda: EMPTY, metadata=key_doc(
        "client_config", SETTINGS, "{request.timeout.ms: 30000}",
        "every client: librdkafka as given (not the Java-only keys), Spark as `kafka.<key>`, "
        "kafka-python where its connection layer has the setting",
        "Extra dotted Kafka client settings. Keys a field sets (`group.id`, `bootstrap.servers`, ...) "
        "are refused. An entry librdkafka refuses fails validation (`UNKNOWN_CLIENT_SETTING`).",
        default="none"))

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
        here, on the driver, so executors need not have them; the key decrypted, as unencrypted
        PKCS#8: :func:`~pipelines.config.client_keys.java_client_key`). Every client_config entry is passed
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
        """The TLS files as inline PEM options;
        :class:`~pipelines.config.client_keys.TlsFileChanged` when one no longer reads as it did
        when the pipeline was validated."""
        sec = self.security
        locations = {"ssl_ca_location": sec.ssl_ca_location, "ssl_certificate_location": sec.ssl_certificate_location,
                     "ssl_key_location": sec.ssl_key_location}
        try:
            return self._read_spark_ssl_options()
        except TlsMaterialProblem as problem:
            where = locations.get(problem.field) or f"ssl_key_location: {sec.ssl_key_location}"
            raise TlsFileChanged.of("kafka.security", problem.field, problem.condition.value,
                                    f"{where}: {problem.detail}") from None
        except OSError as exc:
            field = next((key for key, location in locations.items()
                          if location is not None and exc.filename == location), "ssl_key_location")
            raise TlsFileChanged.of("kafka.security", field, "FILE_NOT_READABLE",
                                    f"{exc.filename}: {exc.strerror}") from None

    def _read_spark_ssl_options(self) -> dict[str, str]:
        sec = self.security
        opts: dict[str, str] = {}
        if sec.ssl_ca_location:
            opts["kafka.ssl.truststore.type"] = "PEM"
            opts["kafka.ssl.truststore.certificates"] = Path(sec.ssl_ca_location).read_text()
        if sec.ssl_certificate_location and sec.ssl_key_location:
            opts["kafka.ssl.keystore.type"] = "PEM"
            opts["kafka.ssl.keystore.certificate.chain"] = Path(sec.ssl_certificate_location).read_text()
            # unencrypted PKCS#8, the one form Kafka's Java client reads on any JVM (no key password)
            opts["kafka.ssl.keystore.key"] = java_client_key(
                Path(sec.ssl_key_location).read_bytes(), sec.ssl_key_password and sec.ssl_key_password.reveal())
        return opts


@dataclass(frozen=True)
class GroupConfig:
    """The Kafka consumer group every member of this pipeline joins."""

    id: str = field(metadata=key_doc(
        "id", STRING, "orders-to-delta", "`group.id`",
        "The consumer group every member of the pipeline joins.", default="required"))
    assignors: tuple[str, ...] = field(default=("range",), metadata=key_doc(  # preference order
        "assignor", "a name or a list of names", "[cooperative-sticky, range]",
        "`partition.assignment.strategy`: the protocols offered in JoinGroup, first preferred",
        "`range`, `roundrobin`, `sticky`, `cooperative-sticky`, an entry point of `groupmgr.assignors`, "
        "or `package.module:Class`. The group is cooperative only when every listed one supports it."))
    instance_id: str | None = field(default=None, metadata=key_doc(
        "instance_id", STRING, "${SCG_INSTANCE_ID}", "`group.instance.id` (static membership)",
        "One per member. A member restarted within the session timeout keeps its place in the "
        "group: its partitions wait for it."))
    session_timeout_ms: int = field(default=10_000, metadata=key_doc(
        "session_timeout", DURATION, "45s", "`session.timeout.ms`",
        "How long the coordinator waits for a heartbeat before it removes the member."))
    heartbeat_interval_ms: int = field(default=1_000, metadata=key_doc(
        "heartbeat_interval", DURATION, "3s", "`heartbeat.interval.ms`",
        "Time between heartbeats. Must be below `session_timeout`; Kafka advises at most a third of it."))
    rebalance_timeout_ms: int = field(default=300_000, metadata=key_doc(
        "rebalance_timeout", DURATION, "5m", "`max.poll.interval.ms` (the JoinGroup rebalance timeout)",
        "Also the longest a micro-batch may run. A longer batch makes the member leave the group "
        "(`POLL_TIMEOUT_EXPIRED`); it rejoins once its query has stopped."))
    metadata_max_age_ms: int = field(default=30_000, metadata=key_doc(
        "metadata_max_age", DURATION, "30s", "`metadata.max.age.ms`",
        "How often `topic_pattern` is matched again and partition counts are read again. "
        "A change triggers a rebalance."))
    on_server_assignment: str = field(default="warn", metadata=key_doc(
        "on_server_assignment", ENUM, "fail", "behaviour",
        "When the broker runs the group with its own assignor (a member joined with Kafka's new "
        "consumer protocol): `warn` prints `[GROUP_RUN_BY_BROKER]` and goes on; `fail` ends the member."))


# Records per micro-batch when source.max_offsets_per_trigger is not set. Without a bound the first
# batch over a backlog is the whole backlog. Executors stream each task's records to Parquet, so the
# bound is about batch duration and retry cost more than memory: 500,000 records of 1 KB is ~500 MB
# per batch, split across the batch's Kafka partitions (one Spark task each).
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 500_000
# 0: a member that joins a group others read rehearses one batch. On the Arrow path the batches
# rehearsed up to a minute until they stop getting faster save the partitions it takes over a
# fraction of a second of their first batch, and delay its join by that minute
# (docs/performance.md, "Rebalance hand-off").
DEFAULT_WARM_UP_LIMIT_MS = 0


@dataclass(frozen=True)
class SourceConfig:
    """Where to start without stored offsets, and Spark's admission control."""

    starting_offsets: str = field(default="earliest", metadata=key_doc(
        "starting_offsets", ENUM, "error", "Kafka's `auto.offset.reset`",
        "Where a partition starts when neither the table nor the group has an offset for it. "
        "`error` stops that partition (`NO_STARTING_OFFSET`)."))
    max_offsets_per_trigger: int = field(default=DEFAULT_MAX_OFFSETS_PER_TRIGGER, metadata=key_doc(
        "max_offsets_per_trigger", POSITIVE_INT, "200000", "Spark `maxOffsetsPerTrigger`",
        "The most records one micro-batch reads, shared out by backlog. Raised to "
        "`min_offsets_per_trigger` when that is larger."))
    min_offsets_per_trigger: int | None = field(default=None, metadata=key_doc(
        "min_offsets_per_trigger", POSITIVE_INT, "1000", "Spark `minOffsetsPerTrigger`",
        "A batch waits for this many records, or for `max_trigger_delay`."))
    max_trigger_delay_ms: int | None = field(default=None, metadata=key_doc(
        "max_trigger_delay", DURATION, "1m", "Spark `maxTriggerDelay`",
        "The longest a batch waits for `min_offsets_per_trigger`. Only with that key.",
        default="`15m` with `min_offsets_per_trigger`, else not set"))
    on_data_loss: str = field(default="fail", metadata=key_doc(
        "on_data_loss", ENUM, "skip", "behaviour (Spark's `failOnDataLoss` is always true)",
        "Records deleted before they were read: `fail` stops the partition (`KAFKA_DATA_LOSS`); `skip` "
        "moves on and writes one `data_loss` row to the dead-letter table. The older "
        "`fail_on_data_loss: true|false` means `fail|skip`.", aliases=("fail_on_data_loss",)))
    reader: str = field(default="scg-kafka", metadata=key_doc(
        "reader", ENUM, "spark-kafka", "Spark's Kafka source, or this project's Spark source",
        "`scg-kafka` runs one query for the member's life and follows the assignment at each batch "
        "(Spark 4.2 or later); without a `transform` its batches are read, decoded and written in one "
        "Arrow pass on the executors. `spark-kafka` (Spark's Kafka source) starts a new query when "
        "the member's partitions change."))
    include_headers: bool = field(default=False, metadata=key_doc(
        "include_headers", BOOL, "true", "Spark `includeHeaders`",
        "Both tables get a column `headers` (`array<struct<key: string, value: binary>>`)."))
    warm_up_limit_ms: int = field(default=DEFAULT_WARM_UP_LIMIT_MS, metadata=key_doc(
        "warm_up_limit", DURATION + " (0s allowed)", "30s", "behaviour",
        "`scg-kafka` only. The longest a member rehearses batches, until they stop getting faster, before "
        "it joins a group that others read (a member whose partitions nobody else reads joins at once). "
        "`0s`: one batch."))

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
class SchemaRegistryConfig:
    """A Confluent-compatible schema registry (Confluent, Apicurio's `ccompat` API, Karapace,
    Redpanda): where it is and how to sign in. Secrets are :class:`Secret` s."""

    url: str = field(metadata=key_doc(
        "url", "http(s)://host[:port][/path]", "https://registry:8081",
        "confluent-kafka `SchemaRegistryClient` `url`, on the driver and every executor",
        "The registry's Confluent-compatible base URL (Apicurio: `.../apis/ccompat/v7`).", default="required"))
    username: str | None = field(default=None, metadata=key_doc(
        "username", STRING, "${REGISTRY_USER}", "`basic.auth.user.info` (user part)",
        "HTTP basic auth user. Give it with `password`. `${ENV}` references are replaced."))
    password: Secret | None = field(default=None, metadata=key_doc(
        "password", SECRET, "${REGISTRY_PASSWORD}", "`basic.auth.user.info` (password part)",
        "HTTP basic auth password. Needs `username`. Never inline; masked everywhere.",
        aliases=("password_file",)))
    bearer_token: Secret | None = field(default=None, metadata=key_doc(
        "bearer_token", SECRET, "${REGISTRY_TOKEN}", "`Authorization: Bearer` (a static token)",
        "Instead of basic auth. Never inline; masked everywhere.", aliases=("bearer_token_file",)))
    ca_file: str | None = field(default=None, metadata=key_doc(
        "ca_file", PEM_FILE, "/etc/registry/ca.pem", "`ssl.ca.location`",
        "The CA that signed an `https://` registry's certificate (default: the system's)."))


@dataclass(frozen=True)
class KeyFormatConfig:
    """How record keys are decoded: as text, or as Avro or Protobuf in the Confluent wire format
    (through the value's registry)."""

    type: str = field(default="string", metadata=key_doc(
        "type", ENUM, "avro", "the output's `key` column",
        "`string`: the key's bytes as UTF-8 text (null when they are not). `avro`, `protobuf`: the key "
        "read into its reader schema, a STRUCT; a key that does not decode makes the record a dead "
        "letter (`key_undecodable`, `key_unknown_schema_id`, ...).", default="`string`"))
    subject: str | None = field(default=None, metadata=key_doc(
        "subject", STRING, "orders-key", "the registry subject of the key's reader schema",
        "Needed with several topics or a `topic_pattern` and `reader_schema: latest`.", default="`<topic>-key`"))
    reader_schema: str = field(default="latest", metadata=key_doc(
        "reader_schema", "`latest`, a version number, or an `.avsc` / `.proto` file", "schemas/order_key.avsc",
        "the key's reader schema", "As the value's `reader_schema`.", default="`latest`"))
    message: str | None = field(default=None, metadata=key_doc(
        "message", STRING, "shop.OrderKey", "the Protobuf message of the key's `reader_schema`",
        "Protobuf only.", default="the file's first message"))

    def registry_subject(self, topic: str) -> str:
        """The subject of the key's reader schema for ``topic``."""
        return self.subject if self.subject is not None else f"{topic}-key"


@dataclass(frozen=True)
class FormatConfig:
    """How record values are decoded: ``json`` with a schema, ``raw`` bytes, or ``avro`` or
    ``protobuf`` in the Confluent wire format with a schema registry."""

    type: str = field(default="json", metadata=key_doc(
        "type", ENUM, "avro", "Spark `from_json` with `schema` (json); the value's bytes (raw); Avro or "
        "Protobuf read with its writer schema from the registry (avro, protobuf)",
        "`json` parses each value into the schema's columns. `raw` keeps it as column `value` (binary). "
        "`avro` and `protobuf` read Confluent-framed values (magic byte, schema id) into the reader "
        "schema's columns."))
    schema: tuple[SchemaField, ...] = field(default=(), metadata=key_doc(
        "schema", "Spark DDL string, or a mapping field -> type", "\"order_id BIGINT, total DECIMAL(12,2)\"",
        "the output table's columns (the `from_json` schema)",
        "Required for `json`, refused for the others. Types: string, bigint, int, double, float, boolean, "
        "timestamp, date, binary, decimal(p,s), and nested `array<T>`, `map<string,T>`, "
        "`struct<name: T, ...>`. A name of an output column already there is refused.",
        default="required for json"))
    max_value_bytes: int = field(default=1024 * 1024, metadata=key_doc(
        "max_value_bytes", POSITIVE_INT, "65536", "behaviour",
        "A longer value goes to the dead-letter table with reason `value_too_large`."))
    schema_registry: SchemaRegistryConfig | None = field(default=None, metadata=key_doc(
        "schema_registry", SECTION, "{url: \"https://registry:8081\"}",
        "where `avro` and `protobuf` writer schemas come from",
        "Required for `avro` and `protobuf`, refused for the others.", default="none"))
    reader_schema: str = field(default="latest", metadata=key_doc(
        "reader_schema", "`latest`, a version number, or an `.avsc` / `.proto` file", "schemas/order.avsc",
        "the output table's columns (avro, protobuf)",
        "The schema every record is read into: the subject's latest version when the member starts, a "
        "pinned version, or a local file. Records written with other versions are resolved into it.",
        default="`latest`"))
    subject: str | None = field(default=None, metadata=key_doc(
        "subject", STRING, "orders-value", "the registry subject of `reader_schema`",
        "Overrides `subject_naming`. Needed with several topics or a `topic_pattern` (topic naming).",
        default="by `subject_naming`"))
    subject_naming: str = field(default="topic", metadata=key_doc(
        "subject_naming", ENUM, "topic_record", "Confluent's subject name strategies",
        "`topic`: `<topic>-value`; `record`: `<record_name>`; `topic_record`: `<topic>-<record_name>`.",
        default="`topic`"))
    record_name: str | None = field(default=None, metadata=key_doc(
        "record_name", STRING, "shop.Order", "the fully qualified record name of `record` naming",
        "Required for `record` and `topic_record` naming."))
    message: str | None = field(default=None, metadata=key_doc(
        "message", STRING, "shop.Order", "the Protobuf message of `reader_schema` whose fields are the columns",
        "Fully qualified, or relative to the file's package (protobuf only).", default="the file's first message"))

    key: KeyFormatConfig = field(default=KeyFormatConfig(), metadata=key_doc(
        "key", SECTION, "{type: avro}", "the output's `key` column",
        "How record keys are decoded (avro and protobuf values only).", default="keys as text"))
    envelope: str | None = field(default=None, metadata=key_doc(
        "envelope", ENUM, "debezium", "what a record is (upsert)",
        "`debezium`: a change event with `before`, `after`, `op` and `source`, or a record whose `payload` "
        "is one (json: give that whole shape as `schema`); its row is `after`, or `before` for `op: d`, "
        "which deletes the key. "
        "Needs `sink.mode: upsert`.", default="none: a record is its row"))

    def registry_settings(self) -> RegistrySettings | None:
        """The registry as the decoders take it (secrets revealed; never shown), or None."""
        registry = self.schema_registry
        if registry is None:
            return None
        return RegistrySettings(registry.url, registry.username,
                                reveal(registry.password) if registry.password else None,
                                reveal(registry.bearer_token) if registry.bearer_token else None,
                                registry.ca_file)

    def registry_subject(self, topic: str) -> str:
        """The subject of the reader schema for ``topic``."""
        if self.subject is not None:
            return self.subject
        return {"topic": f"{topic}-value", "record": f"{self.record_name}",
                "topic_record": f"{topic}-{self.record_name}"}[self.subject_naming]

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.schema)

    def schema_ddl(self) -> str | None:
        """The schema as a Spark DDL string (for ``from_json``), or None for raw."""
        if not self.schema:
            return None
        return ", ".join(f"`{f.name.replace('`', '``')}` {f.type if '<' in f.type else f.type.upper()}"
                         for f in self.schema)


def _sql_text(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class RouteConfig:
    """Which records one of several output tables takes (exactly one of the three ways)."""

    topics: tuple[str, ...] = field(default=(), metadata=key_doc(
        "topics", NAMES, "[orders]", "a condition on the record's topic",
        "The records of these topics.", default="not set"))
    column: str | None = field(default=None, metadata=key_doc(
        "field", STRING, "kind", "a condition on one column of the output row",
        "With `values`: the records whose column holds one of them, compared as text "
        "(`CAST(field AS STRING) IN (...)`).", default="not set"))
    values: tuple[str, ...] = field(default=(), metadata=key_doc(
        "values", "list of values", "[order, sale]", "the values of `field` the table takes",
        "Strings, numbers or booleans, each compared as its text.", default="not set"))
    where: str | None = field(default=None, metadata=key_doc(
        "where", "Spark SQL condition", "kind = 'refund' AND total > 0", "a Spark SQL condition over the output row",
        "The records it is true for (null counts as false). It reads the output row's columns: `topic`, "
        "`partition`, `offset`, `timestamp`, `key`, the format's fields.", default="not set"))

    def condition(self) -> str:
        """The route as one Spark SQL condition over the output row."""
        if self.topics:
            return f"`topic` IN ({', '.join(_sql_text(t) for t in self.topics)})"
        if self.column is not None:
            name = "`" + self.column.replace("`", "``") + "`"
            return f"CAST({name} AS STRING) IN ({', '.join(_sql_text(v) for v in self.values)})"
        return f"({self.where})"


@dataclass(frozen=True)
class TableConfig:
    """One of several output tables: where it is, what it takes, and how its rows are shaped."""

    name: str = field(metadata=key_doc(
        "name", STRING, "refunds", "progress lines and errors",
        "Letters, digits, `_`, `.`, `-`; unique among the tables.", default="required"))
    path: str = field(metadata=key_doc(
        "path", LOCATION, "s3a://lake/refunds", "the table (written with deltalake)",
        "As `sink.path`; outside the other tables.", default="required"))
    partition_by: tuple[str, ...] = field(default=(), metadata=key_doc(
        "partition_by", NAMES, "[topic]", "the table's Delta partition columns",
        "As `sink.partition_by`, for this table's rows.", default="none"))
    transform: str | None = field(default=None, metadata=key_doc(
        "transform", "Spark SQL", "SELECT id, total FROM input", "a Spark SQL query per batch, for this table",
        "As the top-level `transform`, over the rows this table's route takes.", default="not set"))
    route: RouteConfig | None = field(default=None, metadata=key_doc(
        "route", SECTION, "{topics: [refunds]}", "which records the table takes",
        "`topics`, `field` with `values`, or `where`. Required unless there is one table.",
        default="every record"))


@dataclass(frozen=True)
class SinkConfig:
    """The Delta table (or several, with routes) and the dead-letter table (absolute paths or URIs)."""

    path: str = field(metadata=key_doc(
        "path", LOCATION, "s3a://lake/orders", "the output Delta table (written with deltalake)",
        "A local path (relative to the pipeline file) or a URI: `file://`, `hdfs://`, `s3a://`, `s3://`, "
        "`abfss://`, `gs://`. With `tables`, not given (it is then the first table's).",
        default="required unless `tables`"))
    dead_letter_path: str = field(metadata=key_doc(
        "dead_letter_path", LOCATION, "s3a://lake/orders_dead_letters", "the dead-letter Delta table",
        "Where records that cannot be used land, once each. Must be outside `path`.",
        default="`<sink.path>_dead_letters`"))
    partition_by: tuple[str, ...] = field(default=(), metadata=key_doc(
        "partition_by", NAMES, "[topic]", "the output table's Delta partition columns",
        "Schema fields, `topic`, `partition`, or columns a transform makes.", default="none"))
    schema_evolution: str = field(default="fail", metadata=key_doc(
        "schema_evolution", ENUM, "add_columns", "Delta schema evolution",
        "What the output table does when a batch has columns it lacks: the subject's latest version "
        "gained fields (`format.type` avro or protobuf, `reader_schema: latest`), or `format.schema` or "
        "the transform gained columns since the table was written (json). `fail` stops the stream "
        "(`SCHEMA_INCOMPATIBLE`, retried until the schema or this setting changes); `add_columns` "
        "adds them as nullable columns in the commit of the first batch that has them. "
        "A changed column type stops the stream either way."))
    tables: tuple[TableConfig, ...] = field(default=(), metadata=key_doc(
        "tables", SECTIONS, "[{name: refunds, path: s3a://lake/refunds, route: {topics: [refunds]}}]",
        "several output tables, each committed exactly once per batch",
        "Route each record to the tables whose `route` takes it (docs/pipelines.md). Instead of `path`, "
        "`partition_by` and the top-level `transform`. A record no route takes is a dead letter `unrouted`.",
        default="none: one table, `path`"))
    route: str = field(default="one", metadata=key_doc(
        "route", ENUM, "all", "how many of `tables` a record may land in",
        "`one`: exactly one; a record that several routes take is a dead letter `ambiguous_route` (routes "
        "by topic, or by one field's values, that overlap are refused). `all`: every table whose route "
        "takes it."))
    mode: str = field(default="append", metadata=key_doc(
        "mode", ENUM, "upsert", "how records change the output table",
        "`append`: every record is a row. `upsert`: the table holds one row per `key`; each batch's last "
        "change per key is merged into it (insert, update, or delete) in the commit that records the "
        "batch's offsets (docs/pipelines.md, \"Upserts and deletes\"). One table, no transform.",
        default="`append`"))
    key: tuple[str, ...] = field(default=(), metadata=key_doc(
        "key", NAMES, "[order_id]", "the upsert table's key columns",
        "Columns of the output row (with `format.envelope: debezium`, of the row image). A record "
        "whose key columns are not all set is a dead letter `missing_key`.", default="required for upsert"))
    order_by: str | None = field(default=None, metadata=key_doc(
        "order_by", STRING, "source.lsn", "which of a key's changes in a batch is the last",
        "A field of the record, dotted for a nested one (Debezium: `source.lsn`), or `timestamp`; the "
        "highest wins, ties go to the higher offset. Batches are applied in offset order.",
        default="`offset`"))
    delete_on_tombstone: bool = field(default=False, metadata=key_doc(
        "delete_on_tombstone", BOOL, "true", "behaviour (upsert)",
        "A record without a value deletes its key, read from the record's Kafka key. Otherwise "
        "it is a dead letter `null_value`.", default="false"))

    def output_tables(self, transform: str | None) -> tuple[TableConfig, ...]:
        """The output tables in route order: ``tables``, or the one table ``path`` (with the
        pipeline's top-level ``transform``) taking every record."""
        return self.tables or (TableConfig(name="output", path=self.path, partition_by=self.partition_by,
                                           transform=transform),)


@dataclass(frozen=True)
class TriggerConfig:
    """Exactly one of a processing-time trigger or available-now."""

    processing_time_ms: int | None = field(default=2_000, metadata=key_doc(
        "processing_time", DURATION, "10s", "Spark `trigger(processingTime=...)`",
        "How often a micro-batch starts."))
    available_now: bool = field(default=False, metadata=key_doc(
        "available_now", BOOL, "true", "Spark `trigger(availableNow=True)`",
        "Read what is there, then end: the member ends once each partition it owns is read to the "
        "log end it had when the member took it. Not with `processing_time`."))

    def spark_trigger_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``DataStreamWriter.trigger``."""
        if self.available_now:
            return {"availableNow": True}
        return {"processingTime": f"{self.processing_time_ms} milliseconds"}


@dataclass(frozen=True)
class MetricsConfig:
    """Where the member serves its Prometheus metrics and health probes."""

    enabled: bool = field(default=True, metadata=key_doc(
        "enabled", BOOL, "false", "an HTTP server in the member (`/metrics`, `/healthz`, `/readyz`)",
        "Serve the metrics and probes."))
    port: int = field(default=0, metadata=key_doc(
        "port", "port number (0-65535)", "9464", "the server's TCP port",
        "0 takes a free port and prints it at start, so members on one host never collide. Give a "
        "fixed port where Prometheus or Kubernetes probes scrape the member, one per pod."))
    host: str = field(default="0.0.0.0", metadata=key_doc(
        "host", STRING, "127.0.0.1", "the server's listen address", "Where the server listens."))


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

    endpoint: str | None = field(default=None, metadata=key_doc(
        "endpoint", "http(s)://host[:port]", "http://127.0.0.1:9000",
        "deltalake `AWS_ENDPOINT_URL` (`AWS_ALLOW_HTTP` for http); Hadoop `fs.s3a.endpoint`, "
        "`fs.s3a.connection.ssl.enabled`", "An S3-compatible server. Leave it out for AWS S3."))
    region: str | None = field(default=None, metadata=key_doc(
        "region", STRING, "eu-west-1", "deltalake `AWS_REGION`; Hadoop `fs.s3a.endpoint.region`",
        "The bucket's region."))
    access_key_id: str | None = field(default=None, metadata=key_doc(
        "access_key_id", STRING, "${AWS_ACCESS_KEY_ID}",
        "deltalake `AWS_ACCESS_KEY_ID`; Hadoop `fs.s3a.access.key` with `SimpleAWSCredentialsProvider`",
        "Leave it and the secret out to use the AWS default credential chain."))
    secret_access_key: Secret | None = field(default=None, metadata=key_doc(
        "secret_access_key", SECRET, "${AWS_SECRET_ACCESS_KEY}",
        "deltalake `AWS_SECRET_ACCESS_KEY`; Hadoop `fs.s3a.secret.key`",
        "Required with `access_key_id`. Never inline; masked everywhere.",
        aliases=("secret_access_key_file",)))
    session_token: Secret | None = field(default=None, metadata=key_doc(
        "session_token", SECRET, "${AWS_SESSION_TOKEN}",
        "deltalake `AWS_SESSION_TOKEN`; Hadoop `fs.s3a.session.token` with "
        "`TemporaryAWSCredentialsProvider`", "Temporary credentials. Needs `access_key_id`.",
        aliases=("session_token_file",)))
    path_style: bool = field(default=False, metadata=key_doc(
        "path_style", BOOL, "true",
        "deltalake `AWS_VIRTUAL_HOSTED_STYLE_REQUEST` (the inverse); Hadoop `fs.s3a.path.style.access`",
        "Address buckets as `endpoint/bucket` rather than `bucket.endpoint`.",
        default="`true` with an `endpoint`, else `false`"))
    options: Mapping[str, str | Secret] = field(default_factory=lambda: EMPTY, metadata=key_doc(
        "options", SETTINGS, "{azure_storage_account_name: lake}", "deltalake storage options, as given",
        "For other stores (`azure_*`, `google_*`, ...). An option that would turn off put-if-absent "
        "commits is refused (`UNSAFE_STORAGE_OPTION`). Secret-looking keys need `${ENV}`.",
        default="none"))

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

    name: str = field(metadata=key_doc(
        "name", STRING, "orders", "the Delta `txn` app ids (`<name>:offset:<topic>:<partition>`, ...)",
        "Letters, digits, `_`, `.`, `-`. The tables record their offsets under it: keep it for the "
        "tables' life.", default="required"))
    kafka: KafkaConfig = field(metadata=key_doc(
        "kafka", SECTION, "{bootstrap_servers: broker1:9092}", "every Kafka client the member runs",
        "The brokers and how to reach them.", default="required"))
    topics: tuple[str, ...] = field(metadata=key_doc(
        "topics", NAMES, "[orders]", "the group subscription (JoinGroup)",
        "The topics to read. Give `topics` or `topic_pattern`, not both.",
        default="required unless `topic_pattern`"))
    topic_pattern: str | None = field(metadata=key_doc(
        "topic_pattern", "regular expression", "\"orders-.*\"", "a pattern subscription",
        "Every non-internal topic whose whole name matches. Matched again every "
        "`group.metadata_max_age`; a new or deleted topic triggers a rebalance.", default="not set"))
    group: GroupConfig = field(metadata=key_doc(
        "group", SECTION, "{id: orders-to-delta}", "the Kafka consumer group",
        "The group every member joins, and its timing.", default="required"))
    source: SourceConfig = field(metadata=key_doc(
        "source", SECTION, "{starting_offsets: earliest}", "the Spark query's Kafka reader",
        "Where to start, batch size, data loss, which reader.", default="every key's default"))
    format: FormatConfig = field(metadata=key_doc(
        "format", SECTION, "{type: json, schema: \"id BIGINT\"}", "how record values are decoded",
        "JSON with a schema, raw bytes, or Avro or Protobuf with a schema registry.", default="required"))
    transform: str | None = field(metadata=key_doc(
        "transform", "Spark SQL", "SELECT * FROM input WHERE total > 0", "a Spark SQL query per batch",
        "Reads the parsed rows from the view `input`. Must keep `topic`, `partition`, `offset`. "
        "`scg validate` analyses it with a local Spark session.", default="not set"))
    sink: SinkConfig = field(metadata=key_doc(
        "sink", SECTION, "{path: s3a://lake/orders}", "the output and dead-letter Delta tables",
        "Where the rows go.", default="required"))
    trigger: TriggerConfig = field(metadata=key_doc(
        "trigger", SECTION, "{processing_time: 5s}", "the Spark query's trigger",
        "`processing_time` or `available_now`, not both.", default="`processing_time: 2s`"))
    checkpoint_root: str = field(metadata=key_doc(
        "checkpoint_root", LOCATION, "s3a://lake/orders_checkpoints",
        "Spark's `checkpointLocation` (a fresh directory per query below it)",
        "Where the queries keep their checkpoints. The tables, not the checkpoints, hold the offsets. "
        "Must be outside both tables.", default="`<sink.path>_checkpoints`"))
    spark: Mapping[str, str | Secret] = field(default_factory=lambda: EMPTY, metadata=key_doc(
        "spark", SETTINGS, "{spark.sql.shuffle.partitions: 4}", "Spark session settings",
        "Applied when the member builds its session. `spark.driver.extraJavaOptions` goes on the "
        "driver JVM's command line after the member's own options (C1 only for a member whose "
        "batches take the Arrow path), so its flags win. Under spark-submit the master, jars and JVM "
        "options are spark-submit's. Settings the `storage` section makes are refused here.",
        default="none"))
    metrics: MetricsConfig = field(default=MetricsConfig(), metadata=key_doc(
        "metrics", SECTION, "{port: 9464}", "Prometheus metrics and health probes",
        "What the member serves for monitoring (docs/operations.md).",
        default="on, a free port"))
    storage: StorageConfig = field(default=StorageConfig(), metadata=key_doc(
        "storage", SECTION, "{region: eu-west-1}", "deltalake storage options and Hadoop `fs.s3a.*`",
        "Object-store access, written once for the tables and the checkpoints.",
        default="none: local files, or the store's default credentials"))
    source_file: Path = field(default=Path("."), metadata=key_doc(
        None, "path", "conf/pipelines/orders.yaml", "error messages; relative paths",
        "The pipeline file the config was read from."))

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
