"""Validator: line-numbered YAML nodes -> frozen :class:`~pipelines.config.model.PipelineConfig`.

Pure apart from what it is given or looks up on purpose:

- ``${NAME}`` references, from the ``env`` mapping passed in;
- ``*_file`` secrets, read from disk;
- the TLS CA, certificate and key files: read (checked to be readable PEM, since the driver
  hands their text to executors inline), their client certificate and key parsed with
  ``cryptography``, and all of them loaded, without connecting, by a librdkafka client that has
  no brokers and by Python's ``ssl`` (:mod:`pipelines.config.tls_file_checks`);
- ``kafka.client_config`` entries, offered to a librdkafka client that has no brokers, which
  refuses unknown names and bad values;
- assignor names (``groupmgr.assignors.get_assignor``, which may import a plug-in module).

Rules: every mapping reports its unknown keys first (with a did-you-mean suggestion), then
fields are read in document order of the schema. A problem is recorded and validation goes on:
every section is checked, and within one every field that does not depend on another (a
field's own checks stop at its first problem). At the end every problem is raised at once, in
file order, as one :class:`~pipelines.config.yaml_nodes.ConfigError` (a
:class:`~pipelines.config.yaml_nodes.ConfigErrors` when there are several). A check that
combines fields (``sink`` with ``format``, a section's cross-field rules, the checks across
sections) runs only when those fields are good, and a required key misspelt is reported as the
unknown key only, so one cause is reported once. A missing field reports the line of its
parent mapping (the line of the key that opens it, e.g. ``group:``; the first key's line
for the top level), anything else the line of the offending key or list item. Explicit
``null`` means "not given".

The shared primitives (context, sections, scalar parsers, secrets) live in
:mod:`pipelines.config.fields`; the JSON schema DDL parser in :mod:`pipelines.config.schema`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from groupmgr.assignors.assignor_errors import AssignorError, UnknownAssignorError
from pipelines.config.model import (DEFAULT_MAX_OFFSETS_PER_TRIGGER, DEFAULT_WARM_UP_LIMIT_MS,
                                    JAVA_ONLY_CLIENT_PREFIXES, KAFKA_COORDINATE_COLUMNS, FormatConfig,
                                    GroupConfig, KafkaConfig, MetricsConfig, PipelineConfig, SchemaField,
                                    SecurityConfig, SinkConfig, SourceConfig, StorageConfig, TriggerConfig,
                                    UNSAFE_STORAGE_OPTIONS, is_java_only_client_setting)
from pipelines.config.secrets import reveal
from pipelines.config.fields import (AssignorLookup, Ctx, Section, as_bool, as_duration_ms, as_enum,
                                     as_env_str, as_list, as_location, as_positive_int, as_str,
                                     default_assignor_lookup, read_secret, required, resolve_location,
                                     settings_map, suggest, unique, wrong_type)
from pipelines.config.yaml_nodes import Condition as C
from pipelines.config.yaml_nodes import Node, child_path
from pipelines.config.format_section import (ENVELOPES, FORMAT_KEYS, FORMAT_TYPES, KEY_KEYS, KEY_TYPES,
                                             REGISTRY_KEYS, SUBJECT_NAMING, framed_field_names, parse_format)
from pipelines.config.sink_section import (ROUTE_KEYS, ROUTE_MODES, SCHEMA_EVOLUTION, SINK_KEYS, SINK_MODES,
                                           TABLE_KEYS, parse_sink, parse_transform, same_or_inside)
from pipelines.config.tls_file_checks import check_tls_files, check_tls_loading
from pipelines.runtime.client_creation import librdkafka_refusal

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")

TOP_KEYS = ("name", "kafka", "topics", "topic_pattern", "group", "source", "format", "transform",
            "sink", "trigger", "checkpoint_root", "spark", "storage", "metrics")
KAFKA_KEYS = ("bootstrap_servers", "security", "client_config")
SECURITY_KEYS = ("protocol", "sasl_mechanism", "sasl_username", "sasl_password", "sasl_password_file",
                 "ssl_ca_location", "ssl_certificate_location", "ssl_key_location",
                 "ssl_key_password", "ssl_key_password_file")
GROUP_KEYS = ("id", "assignor", "instance_id", "session_timeout", "heartbeat_interval",
              "rebalance_timeout", "metadata_max_age", "on_server_assignment")
ON_SERVER_ASSIGNMENT = ("warn", "fail")
SOURCE_KEYS = ("starting_offsets", "max_offsets_per_trigger", "min_offsets_per_trigger",
               "max_trigger_delay", "on_data_loss", "fail_on_data_loss", "reader", "include_headers",
               "warm_up_limit")
READERS = ("spark-kafka", "scg-kafka")
ZERO_DURATION = re.compile(r"0+\s*(ms|s|m|h|d)?")
ON_DATA_LOSS = ("fail", "skip")
TRIGGER_KEYS = ("processing_time", "available_now")
METRICS_KEYS = ("enabled", "port", "host")
STORAGE_KEYS = ("endpoint", "region", "access_key_id", "secret_access_key", "secret_access_key_file",
                "session_token", "session_token_file", "path_style", "options")
_ENDPOINT = re.compile(r"https?://[^/\s:]+(:\d{1,5})?/?")

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
STARTING_OFFSETS = ("earliest", "latest", "error")
# client_config keys that a first-class field (or the framework itself) sets.
RESERVED_CLIENT_KEYS = {
    "bootstrap.servers": "kafka.bootstrap_servers", "metadata.broker.list": "kafka.bootstrap_servers",
    "security.protocol": "kafka.security.protocol", "sasl.mechanism": "kafka.security.sasl_mechanism",
    "sasl.mechanisms": "kafka.security.sasl_mechanism", "sasl.username": "kafka.security.sasl_username",
    "sasl.password": "kafka.security.sasl_password", "ssl.ca.location": "kafka.security.ssl_ca_location",
    "ssl.certificate.location": "kafka.security.ssl_certificate_location",
    "ssl.key.location": "kafka.security.ssl_key_location",
    "ssl.key.password": "kafka.security.ssl_key_password",
    "group.id": "group.id", "group.instance.id": "group.instance_id",
    "session.timeout.ms": "group.session_timeout", "heartbeat.interval.ms": "group.heartbeat_interval",
    "max.poll.interval.ms": "group.rebalance_timeout", "partition.assignment.strategy": "group.assignor",
    "auto.offset.reset": "source.starting_offsets", "enable.auto.commit": "the framework",
    "key.deserializer": "the framework", "value.deserializer": "the framework",
}


# ---------------------------------------------------------------- sections

def validate_pipeline(root: Node | None, file: str, source_file: Path, env: Mapping[str, str],
                      assignor_lookup: AssignorLookup = default_assignor_lookup) -> PipelineConfig:
    """Validate a loaded document; ``file`` names it in errors, relative paths resolve next to it.

    Raises one ConfigError holding every problem found (see the module's rules); returns a config
    only when there is none, so no part of it is a placeholder for a bad section."""
    ctx = Ctx(file, source_file.parent, env, assignor_lookup)
    if root is None:
        ctx.fail(1, "", C.WRONG_TYPE, "file is empty; expected a mapping (name, kafka, topics, group, format, sink)")
    top = Section(ctx, root, "", TOP_KEYS)
    attempt = ctx.attempt  # each section on its own: None when it is bad (its problems recorded)
    name = attempt(_name, top)
    kafka = attempt(_kafka, top)
    subscription = attempt(_subscription, top)
    group = attempt(_group, top)
    source = attempt(_source, top)
    fmt = attempt(parse_format, top)
    transform = attempt(parse_transform, top.get("transform"), "transform")
    sink = attempt(parse_sink, top, _known_columns(top, fmt), subscription[0] if subscription else None)
    trigger = attempt(_trigger, top)
    if source is not None:
        attempt(_check_reader_warm_up, top, source)
    if fmt is not None:
        attempt(_check_field_names, top, source, fmt)
    if fmt is not None and sink is not None:
        attempt(_check_schema_evolution, top, sink, fmt)
        attempt(_check_envelope, top, sink, fmt)
    checkpoint_root = attempt(_checkpoint_root, top, sink)
    spark = attempt(settings_map, top.get("spark"), "spark")
    storage = attempt(_storage, top)
    if storage is not None:
        attempt(_check_storage_not_in_spark, top, storage)
    metrics = attempt(_metrics, top)
    ctx.raise_problems()
    topics, pattern = subscription
    return PipelineConfig(name=name, kafka=kafka, topics=topics, topic_pattern=pattern, group=group,
                          source=source, format=fmt, transform=transform, sink=sink, trigger=trigger,
                          checkpoint_root=checkpoint_root, spark=spark, storage=storage, metrics=metrics,
                          source_file=source_file)


def _storage(ctx: Ctx, top: Section) -> StorageConfig:
    sec = top.section("storage", STORAGE_KEYS)
    get, attempt = sec.get, ctx.attempt
    with ctx.independent():
        endpoint = attempt(_endpoint, get("endpoint"), sec.sub("endpoint")) if get("endpoint") else None
        region = attempt(_env_text, get("region"), sec.sub("region")) if get("region") else None
        key_id = attempt(_env_text, get("access_key_id"), sec.sub("access_key_id")) if get("access_key_id") else None
        secret = attempt(read_secret, sec, "secret_access_key", required=get("access_key_id") is not None)
        token = attempt(read_secret, sec, "session_token", required=False)
        path_style = attempt(as_bool, get("path_style"), sec.sub("path_style")) \
            if get("path_style") is not None else get("endpoint") is not None
        options = attempt(_storage_options, sec)
    if secret is not None and key_id is None:
        ctx.fail(*sec.line_of("secret_access_key", "secret_access_key_file"), C.CONFLICTING_FIELDS,
                 "secret_access_key needs access_key_id", fields=("secret_access_key", "access_key_id"))
    if token is not None and key_id is None:
        ctx.fail(*sec.line_of("session_token", "session_token_file"), C.CONFLICTING_FIELDS,
                 "session_token needs access_key_id", fields=("session_token", "access_key_id"))
    return StorageConfig(endpoint=endpoint, region=region, access_key_id=key_id, secret_access_key=secret,
                         session_token=token, path_style=path_style, options=options)


def _env_text(ctx: Ctx, node: Node, path: str) -> str:
    return as_env_str(ctx, node, path).strip()


def _endpoint(ctx: Ctx, node: Node, path: str) -> str:
    endpoint = _env_text(ctx, node, path)
    if not _ENDPOINT.fullmatch(endpoint):
        ctx.fail(node.line, path, C.BAD_VALUE, f"{endpoint!r} is not an http(s)://host[:port] URL", value=endpoint)
    return endpoint


def _storage_options(ctx: Ctx, sec: Section) -> Mapping[str, Any]:
    options = settings_map(ctx, sec.get("options"), sec.sub("options"))
    for key, node in (sec.get("options").items() if sec.get("options") is not None else ()):
        refused = UNSAFE_STORAGE_OPTIONS.get(key.lower(), ())
        value = options[key] if isinstance(options[key], str) else ""
        if key.lower() in UNSAFE_STORAGE_OPTIONS and (refused is None or value.lower() in refused):
            ctx.report(node.line, child_path(sec.sub("options"), key), C.UNSAFE_STORAGE_OPTION,
                       f"{key}: {value or '...'} would let two members' Delta commits overwrite each "
                       "other; remove it: deltalake commits to S3 with put-if-absent (If-None-Match), "
                       "which AWS S3, MinIO and other S3-compatible stores support", option=key)
    return options


def _check_storage_not_in_spark(ctx: Ctx, top: Section, storage: StorageConfig) -> None:
    """Object-store settings live in one place: with a storage section, spark.hadoop.fs.s3a.* is refused."""
    derived = {f"spark.hadoop.{key}" for key in storage.hadoop_settings()}
    node = top.get("spark")
    for key, child in (node.items() if node is not None else ()):
        if key in derived:
            ctx.report(child.line, child_path("spark", key), C.CONFLICTING_FIELDS,
                       f"{key} is derived from the storage section; set it there", fields=(key, "storage"))


def _name(ctx: Ctx, top: Section) -> str:
    node = top.need("name")
    name = as_str(ctx, node, "name")
    if not _NAME.fullmatch(name):
        ctx.fail(node.line, "name", C.BAD_VALUE, f"name {name!r} may only use letters, digits, '_', '.', '-'",
                 value=name)
    return name


def _kafka(ctx: Ctx, top: Section) -> KafkaConfig:
    top.need("kafka")
    sec = top.section("kafka", KAFKA_KEYS)
    with ctx.independent():
        servers = ctx.attempt(required, sec, "bootstrap_servers", _bootstrap)
        security = ctx.attempt(_security, sec) if sec.get("security") else SecurityConfig()
        # a bad security section hides only the sasl.jaas.config check, never adds an error
        client_config = ctx.attempt(_client_config, sec, security or SecurityConfig())
    if security.protocol.endswith("SSL"):
        _check_tls_loading(ctx, sec, security, client_config)
    return KafkaConfig(bootstrap_servers=servers, security=security, client_config=client_config)


def _check_tls_loading(ctx: Ctx, kafka: Section, security: SecurityConfig, client_config: Mapping[str, Any]) -> None:
    """The TLS files loaded as the clients load them, with the ``ssl.*`` settings of client_config
    librdkafka gets (``ssl.providers``, ``ssl.engine.*``...): runs once the security section and
    client_config are good (so the section reopened here reports nothing again)."""
    ssl_settings = {key: reveal(value) for key, value in client_config.items()
                    if key.startswith("ssl.") and not is_java_only_client_setting(key)}
    locations = {key: getattr(security, key)
                 for key in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")}
    check_tls_loading(ctx, kafka.section("security", SECURITY_KEYS), locations, security.ssl_key_password,
                      ssl_settings)


def _client_config(ctx: Ctx, sec: Section, security: SecurityConfig) -> Mapping[str, Any]:
    """Every entry reserved for another field, bad or refused by librdkafka is reported (a
    reserved one is not offered to librdkafka too)."""
    node, path = sec.get("client_config"), sec.sub("client_config")
    reserved = _check_client_config(ctx, node, path, security)
    settings = settings_map(ctx, node, path)
    _check_librdkafka_accepts(ctx, node, path, {key: value for key, value in settings.items() if key not in reserved})
    return settings


def _bootstrap(ctx: Ctx, node: Node, path: str) -> tuple[str, ...]:
    if node.kind == "seq":
        items = [(item, child_path(path, i), as_env_str(ctx, item, child_path(path, i)).strip())
                 for i, item in enumerate(node.value)]
    else:
        items = [(node, path, part.strip()) for part in as_env_str(ctx, node, path).split(",")]
    if not items:
        ctx.fail(node.line, path, C.BAD_VALUE, "needs at least one host:port")
    for item, item_path, server in items:
        match = _HOST_PORT.fullmatch(server)
        if match is None or not 0 < int(match.group(2)) < 65536:
            ctx.fail(item.line, item_path, C.BAD_VALUE, f"{server!r} is not host:port", value=server)
    return tuple(server for _, _, server in items)


def _security(ctx: Ctx, kafka: Section) -> SecurityConfig:
    """The protocol decides which other keys apply: when it is bad, they are not checked."""
    sec = kafka.section("security", SECURITY_KEYS)
    protocol = as_enum(ctx, sec.need("protocol"), sec.sub("protocol"), PROTOCOLS)
    with ctx.independent():
        sasl = ctx.attempt(_sasl, sec) if protocol.startswith("SASL_") else ctx.attempt(_forbid, sec, "sasl_", protocol)
        ssl = ctx.attempt(_ssl, sec) if protocol.endswith("SSL") else ctx.attempt(_forbid, sec, "ssl_", protocol)
    return SecurityConfig(protocol=protocol, **sasl, **ssl)


def _forbid(ctx: Ctx, sec: Section, prefix: str, protocol: str) -> dict[str, Any]:
    for key, node in sec.node.items():
        if key.startswith(prefix) and not node.is_null:
            ctx.report(node.line, sec.sub(key), C.CONFLICTING_FIELDS,
                       f"{key} has no effect with protocol {protocol}", fields=(key, "protocol"))
    return {}


def _sasl(ctx: Ctx, sec: Section) -> dict[str, Any]:
    with ctx.independent():
        mechanism = ctx.attempt(required, sec, "sasl_mechanism", as_enum, SASL_MECHANISMS)
        username = ctx.attempt(required, sec, "sasl_username", as_env_str)
        password = ctx.attempt(read_secret, sec, "sasl_password", required=True)
    return {"sasl_mechanism": mechanism, "sasl_username": username, "sasl_password": password}


def _ssl(ctx: Ctx, sec: Section) -> dict[str, Any]:
    with ctx.independent():
        paths = {key: ctx.attempt(_pem_file, sec.get(key), sec.sub(key)) if sec.get(key) else None
                 for key in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")}
        key_password = ctx.attempt(read_secret, sec, "ssl_key_password", required=False)
    if (paths["ssl_certificate_location"] is None) != (paths["ssl_key_location"] is None):
        line, path = sec.line_of("ssl_certificate_location", "ssl_key_location")
        ctx.fail(line, path, C.CONFLICTING_FIELDS,
                 "ssl_certificate_location and ssl_key_location must be given together",
                 fields=("ssl_certificate_location", "ssl_key_location"))
    if key_password is not None and paths["ssl_key_location"] is None:
        line, path = sec.line_of("ssl_key_password", "ssl_key_password_file")
        ctx.fail(line, path, C.CONFLICTING_FIELDS, "ssl_key_password needs ssl_key_location",
                 fields=("ssl_key_password", "ssl_key_location"))
    check_tls_files(ctx, sec, paths, key_password)
    return {**paths, "ssl_key_password": key_password}


def _pem_file(ctx: Ctx, node: Node, path: str) -> str:
    """A local PEM file (CA, certificate or key) that exists and is readable now: every client
    reads it on the driver (Spark's executors get its text inline), so a wrong path is a config
    error, not a TLS failure later."""
    location = resolve_location(ctx.base_dir, as_env_str(ctx, node, path).strip())
    file = Path(location)
    if not file.is_file():
        ctx.fail(node.line, path, C.FILE_NOT_FOUND,
                 f"{location} is not a file (a PEM file on the machine that runs the member is needed)")
    try:
        text = file.read_text(errors="replace")
    except OSError as exc:
        ctx.fail(node.line, path, C.FILE_NOT_READABLE, f"{location}: {exc.strerror}")
    if "-----BEGIN " not in text:
        ctx.fail(node.line, path, C.BAD_VALUE, f"{location} is not a PEM file (no -----BEGIN line)")
    return location


def _check_client_config(ctx: Ctx, node: Node | None, path: str, security: SecurityConfig) -> set[str]:
    """Reports every key a first-class field (or the framework) sets; returns them."""
    reserved = set()
    for key, value in node.items() if node is not None else ():
        owner = RESERVED_CLIENT_KEYS.get(key)
        if owner is None and key == "sasl.jaas.config" and security.uses_sasl:
            owner = "kafka.security (the JAAS config is built from it)"
        if owner is not None:
            ctx.report(value.line, child_path(path, key), C.CONFLICTING_FIELDS,
                       f"{key!r} is set by {owner}; remove it from client_config", key=key, owner=owner)
            reserved.add(key)
    return reserved


def _check_librdkafka_accepts(ctx: Ctx, node: Node | None, path: str, settings: Mapping[str, Any]) -> None:
    """Every client_config entry reaches Spark's Kafka source and confluent-kafka (librdkafka),
    except the Java-only ones, which go to Spark only; one librdkafka refuses (an unknown name or
    a bad value) is a config error here rather than a crash when the first client is made. The
    group member takes the entries kafka-python's connection layer has; the others are consumer
    or producer settings that do not apply to group coordination."""
    for key, value in settings.items():
        if is_java_only_client_setting(key):
            continue
        refusal = librdkafka_refusal({key: reveal(value)})
        if refusal is not None:
            ctx.report(dict(node.items())[key].line if node is not None else 0, child_path(path, key),
                       C.UNKNOWN_CLIENT_SETTING,
                       f"confluent-kafka (librdkafka) refuses {key!r}: {refusal}; client_config settings go to "
                       "every client (Java-client-only ones, which go to Spark only: "
                       f"{', '.join(JAVA_ONLY_CLIENT_PREFIXES)})", key=key)


def _subscription(ctx: Ctx, top: Section) -> tuple[tuple[str, ...], str | None]:
    topics_node, pattern_node = top.get("topics"), top.get("topic_pattern")
    if topics_node is not None and pattern_node is not None:
        ctx.fail(pattern_node.line, "topic_pattern", C.CONFLICTING_FIELDS,
                 "give either topics or topic_pattern, not both", fields=("topics", "topic_pattern"))
    if pattern_node is not None:
        return (), _pattern(ctx, pattern_node)
    if topics_node is None:
        top.need("topics", hint=" (give topics: [name, ...] or topic_pattern: regex)")
    return _topics(ctx, topics_node), None


def _topics(ctx: Ctx, node: Node) -> tuple[str, ...]:
    items = as_list(ctx, node, "topics", "topic names")
    if not items:
        ctx.fail(node.line, "topics", C.BAD_VALUE, "needs at least one topic")
    names = [(item, as_str(ctx, item, f"topics[{i}]")) for i, item in enumerate(items)]
    for i, (item, name) in enumerate(names):
        if not _TOPIC.fullmatch(name) or name in (".", ".."):
            ctx.fail(item.line, f"topics[{i}]", C.BAD_VALUE,
                     f"{name!r} is not a legal Kafka topic name ([A-Za-z0-9._-], at most 249)", value=name)
    unique(ctx, names, "topics", "topic")
    return tuple(name for _, name in names)


def _pattern(ctx: Ctx, node: Node) -> str:
    pattern = as_str(ctx, node, "topic_pattern")
    try:
        re.compile(pattern)
    except re.error as exc:
        ctx.fail(node.line, "topic_pattern", C.BAD_REGEX, f"bad regex {pattern!r}: {exc}", value=pattern)
    return pattern


def _group(ctx: Ctx, top: Section) -> GroupConfig:
    top.need("group")
    sec = top.section("group", GROUP_KEYS)
    get, attempt = sec.get, ctx.attempt
    with ctx.independent():
        group_id = attempt(required, sec, "id", as_str)
        assignors = attempt(_assignors, get("assignor"), sec.sub("assignor"))
        timing = {f"{key}_ms": attempt(as_duration_ms, get(key), sec.sub(key))
                  for key in ("session_timeout", "heartbeat_interval", "rebalance_timeout", "metadata_max_age")
                  if get(key)}
        instance = attempt(as_env_str, get("instance_id"), sec.sub("instance_id")) if get("instance_id") else None
        policy = attempt(as_enum, get("on_server_assignment"), sec.sub("on_server_assignment"),
                         ON_SERVER_ASSIGNMENT) if get("on_server_assignment") else "warn"
    config = GroupConfig(id=group_id, assignors=assignors, **timing, instance_id=instance,
                         on_server_assignment=policy)
    if config.heartbeat_interval_ms >= config.session_timeout_ms:
        line, path = sec.line_of("heartbeat_interval", "session_timeout")
        ctx.fail(line, path, C.CONFLICTING_FIELDS,
                 f"heartbeat_interval ({config.heartbeat_interval_ms}ms) must be below session_timeout "
                 f"({config.session_timeout_ms}ms); Kafka advises at most a third",
                 fields=("heartbeat_interval", "session_timeout"))
    return config


def _assignors(ctx: Ctx, node: Node | None, path: str) -> tuple[str, ...]:
    if node is None:
        return GroupConfig.assignors
    items = [(node, path)] if node.kind == "scalar" else [
        (item, child_path(path, i)) for i, item in enumerate(as_list(ctx, node, path, "assignor names"))]
    if not items:
        ctx.fail(node.line, path, C.BAD_VALUE, "needs at least one assignor")
    names = [(item, as_str(ctx, item, item_path).strip()) for item, item_path in items]
    protocols = [(item, _lookup_assignor(ctx, name, item.line, item_path))
                 for (item, name), (_, item_path) in zip(names, items)]
    if node.kind == "seq":
        unique(ctx, protocols, path, "assignor protocol name")
    return tuple(name for _, name in names)


def _lookup_assignor(ctx: Ctx, name: str, line: int, path: str) -> str:
    try:
        return ctx.assignor_lookup(name)
    except UnknownAssignorError as exc:
        hint = suggest(name, exc.available)
        ctx.fail(line, path, C.UNKNOWN_ASSIGNOR,
                 f"unknown assignor {name!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                 + f"; available: {', '.join(exc.available)} or 'package.module:Class'",
                 name=name, available=exc.available, suggestion=hint)
    except AssignorError as exc:
        ctx.fail(line, path, C.ASSIGNOR_IMPORT_FAILED, str(exc).split("] ", 1)[-1], name=name)


def _source(ctx: Ctx, top: Section) -> SourceConfig:
    sec = top.section("source", SOURCE_KEYS)
    get, attempt = sec.get, ctx.attempt
    with ctx.independent():
        starting = attempt(as_enum, get("starting_offsets"), sec.sub("starting_offsets"), STARTING_OFFSETS) \
            if get("starting_offsets") else "earliest"
        limits = {key: attempt(as_positive_int, get(key), sec.sub(key)) if get(key) else None
                  for key in ("max_offsets_per_trigger", "min_offsets_per_trigger")}
        delay = attempt(as_duration_ms, get("max_trigger_delay"), sec.sub("max_trigger_delay")) \
            if get("max_trigger_delay") else None
        on_data_loss = attempt(_on_data_loss, sec)
        reader = attempt(as_enum, get("reader"), sec.sub("reader"), READERS) if get("reader") else SourceConfig.reader
        headers = attempt(as_bool, get("include_headers"), sec.sub("include_headers")) \
            if get("include_headers") is not None else False
        warm_up_limit = attempt(_warm_up_limit, sec)
    _check_limits(ctx, sec, limits, delay)
    if delay is None and limits["min_offsets_per_trigger"] is not None:
        delay = 15 * 60_000  # Spark's default, made explicit
    if limits["max_offsets_per_trigger"] is None:  # the default bound, raised to a larger minimum
        limits["max_offsets_per_trigger"] = max(DEFAULT_MAX_OFFSETS_PER_TRIGGER,
                                                limits["min_offsets_per_trigger"] or 0)
    return SourceConfig(starting_offsets=starting, max_trigger_delay_ms=delay, on_data_loss=on_data_loss,
                        reader=reader, include_headers=headers, warm_up_limit_ms=warm_up_limit, **limits)


def _warm_up_limit(ctx: Ctx, sec: Section) -> int:
    """``source.warm_up_limit``: a duration, or 0 (``0s``): rehearse one batch, never longer."""
    node = sec.get("warm_up_limit")
    if node is None:
        return DEFAULT_WARM_UP_LIMIT_MS
    if node.kind == "scalar" and ZERO_DURATION.fullmatch(str(node.text).strip()):
        return 0
    return as_duration_ms(ctx, node, sec.sub("warm_up_limit"))


def _check_reader_warm_up(ctx: Ctx, top: Section, source: SourceConfig) -> None:
    """``source.warm_up_limit`` bounds the scg-kafka reader's warm-up; Spark's Kafka source warms
    up with one batch of its own, so the setting would do nothing there."""
    sec = top.section("source", SOURCE_KEYS)  # its unknown keys are recorded already
    if source.reader != "scg-kafka" and sec.get("warm_up_limit") is not None:
        ctx.fail(*sec.line_of("warm_up_limit"), C.CONFLICTING_FIELDS,
                 "warm_up_limit applies to reader scg-kafka only; remove it or set source.reader: scg-kafka",
                 fields=("source.warm_up_limit", "source.reader"))


def _check_schema_evolution(ctx: Ctx, top: Section, sink: SinkConfig, fmt: FormatConfig) -> None:
    """``sink.schema_evolution: add_columns`` adds the columns the output has and the table lacks.
    With avro or protobuf it follows the registry subject's latest version: it needs
    ``reader_schema: latest``, and no transform (a transform decides the output's columns
    itself). With json the output's columns are ``format.schema``'s (or the transform's); a raw
    value has no columns to add."""
    if sink.schema_evolution != "add_columns":
        return
    line, path = top.section("sink", SINK_KEYS).line_of("schema_evolution")
    if fmt.type not in ("avro", "protobuf", "json"):
        ctx.fail(line, path, C.CONFLICTING_FIELDS,
                 f"schema_evolution add_columns adds the records' new fields as columns; format type {fmt.type} "
                 "has no fields (use format.type json, avro or protobuf, or remove it)",
                 fields=("sink.schema_evolution", "format.type"))
    if fmt.type == "json":
        return
    if fmt.reader_schema != "latest":
        ctx.fail(line, path, C.CONFLICTING_FIELDS,
                 "schema_evolution add_columns follows the subject's latest version; format.reader_schema "
                 f"pins {fmt.reader_schema!r} (set it to latest, or remove schema_evolution)",
                 fields=("sink.schema_evolution", "format.reader_schema"))
    if top.get("transform") is not None or any(t.transform for t in sink.tables):
        ctx.fail(line, path, C.CONFLICTING_FIELDS,
                 "schema_evolution add_columns needs the output columns to be the records' fields; a "
                 "transform chooses its own", fields=("sink.schema_evolution", "transform"))


def _check_envelope(ctx: Ctx, top: Section, sink: SinkConfig, fmt: FormatConfig) -> None:
    """A change-event envelope says how a key changes: it needs an upsert table."""
    if fmt.envelope is not None and sink.mode != "upsert":
        ctx.fail(top.section("format", FORMAT_KEYS).get("envelope").line, "format.envelope", C.CONFLICTING_FIELDS,
                 f"envelope {fmt.envelope} applies change events to an upsert table; set sink.mode: upsert "
                 "and sink.key, or remove format.envelope", fields=("format.envelope", "sink.mode"))


RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "key_bytes")  # records.py output


def _check_field_names(ctx: Ctx, top: Section, source: SourceConfig | None, fmt: FormatConfig) -> None:
    """A ``format.schema`` field may not take the name of a column every output row carries
    (Spark compares names case-insensitively): the table would get two columns of that name.
    Every such field is reported; ``headers`` only when the source section is good."""
    for field in fmt.schema:
        name = field.name.lower()
        if name in RECORD_COLUMNS:
            why, fields = "every output row carries the record's Kafka coordinates and key", ("format.schema",)
        elif name == "headers" and source is not None and source.include_headers:
            why, fields = "source.include_headers puts the record's headers there", ("format.schema",
                                                                                     "source.include_headers")
        else:
            continue
        ctx.report(top.section("format", FORMAT_KEYS).get("schema").line, "format.schema", C.CONFLICTING_FIELDS,
                   f"schema field {field.name!r} is an output column already ({why}); rename it, or read "
                   "the value as format: {type: raw} and parse it in the transform", fields=fields)


def _on_data_loss(ctx: Ctx, sec: Section) -> str:
    """``source.on_data_loss`` (fail | skip, default fail); the older boolean
    ``fail_on_data_loss`` is read as fail (true) or skip (false), never both."""
    get = sec.get
    if get("on_data_loss") is not None and get("fail_on_data_loss") is not None:
        ctx.fail(get("fail_on_data_loss").line, sec.sub("fail_on_data_loss"), C.CONFLICTING_FIELDS,
                 "give source.on_data_loss only (fail_on_data_loss is its older boolean form)")
    if get("fail_on_data_loss") is not None:
        keep_failing = as_bool(ctx, get("fail_on_data_loss"), sec.sub("fail_on_data_loss"))
        return "fail" if keep_failing else "skip"
    if get("on_data_loss") is None:
        return "fail"
    return as_enum(ctx, get("on_data_loss"), sec.sub("on_data_loss"), ON_DATA_LOSS)


def _check_limits(ctx: Ctx, sec: Section, limits: Mapping[str, int | None], delay: int | None) -> None:
    low, high = limits["min_offsets_per_trigger"], limits["max_offsets_per_trigger"]
    if delay is not None and low is None:
        ctx.fail(sec.get("max_trigger_delay").line, sec.sub("max_trigger_delay"), C.CONFLICTING_FIELDS,
                 "max_trigger_delay only applies with min_offsets_per_trigger",
                 fields=("max_trigger_delay", "min_offsets_per_trigger"))
    if low is not None and high is not None and low > high:
        ctx.fail(sec.get("min_offsets_per_trigger").line, sec.sub("min_offsets_per_trigger"),
                 C.CONFLICTING_FIELDS, f"min_offsets_per_trigger ({low}) exceeds max_offsets_per_trigger ({high})",
                 fields=("min_offsets_per_trigger", "max_offsets_per_trigger"))


def _known_columns(top: Section, fmt: FormatConfig | None) -> tuple[str, ...] | None:
    """The output columns known before a query runs, or None: a transform derives its own (they are
    checked against its output when the query starts, and by ``scg validate``), or format is bad."""
    if top.get("transform") is not None or fmt is None or fmt.envelope is not None:
        return None
    if fmt.type in ("avro", "protobuf"):
        names = framed_field_names(fmt)
        return None if names is None else names + KAFKA_COORDINATE_COLUMNS
    return fmt.field_names + KAFKA_COORDINATE_COLUMNS


def _metrics(ctx: Ctx, top: Section) -> MetricsConfig:
    sec = top.section("metrics", METRICS_KEYS)
    get, attempt = sec.get, ctx.attempt
    with ctx.independent():
        enabled = attempt(as_bool, get("enabled"), sec.sub("enabled")) if get("enabled") is not None else True
        port = attempt(_port, get("port"), sec.sub("port")) if get("port") is not None else MetricsConfig.port
        host = attempt(as_str, get("host"), sec.sub("host")) if get("host") is not None else MetricsConfig.host
    return MetricsConfig(enabled=enabled, port=port, host=host.strip())


def _port(ctx: Ctx, node: Node, path: str) -> int:
    if node.kind != "scalar" or isinstance(node.value, bool) or not isinstance(node.value, int):
        wrong_type(ctx, node, path, "a port number (0-65535)")
    if not 0 <= node.value <= 65535:
        ctx.fail(node.line, path, C.BAD_VALUE, f"must be a port number 0-65535, got {node.value}", value=node.value)
    return node.value


def _trigger(ctx: Ctx, top: Section) -> TriggerConfig:
    sec = top.section("trigger", TRIGGER_KEYS)
    interval = sec.get("processing_time")
    with ctx.independent():
        available_now = ctx.attempt(as_bool, sec.get("available_now"), sec.sub("available_now")) \
            if sec.get("available_now") else False
        # with available_now: true the interval is refused below whatever it holds
        ms = ctx.attempt(as_duration_ms, interval, sec.sub("processing_time")) \
            if interval and available_now is not True else TriggerConfig.processing_time_ms
    if available_now and interval is not None:
        ctx.fail(sec.get("available_now").line, sec.sub("available_now"), C.CONFLICTING_FIELDS,
                 "give either processing_time or available_now: true, not both",
                 fields=("processing_time", "available_now"))
    if available_now:
        return TriggerConfig(processing_time_ms=None, available_now=True)
    return TriggerConfig(processing_time_ms=ms)


def _checkpoint_root(ctx: Ctx, top: Section, sink: SinkConfig | None) -> str | None:
    """Outside every table; not compared with them when the sink section is bad (None then when
    not given: validation raises anyway)."""
    node = top.get("checkpoint_root")
    if node is None:
        return f"{sink.path}_checkpoints" if sink is not None else None
    root = as_location(ctx, node, "checkpoint_root").rstrip("/") or "/"
    tables = [t.path for t in sink.output_tables(None)] + [sink.dead_letter_path] if sink is not None else []
    for table in tables:
        if same_or_inside(root, table) or same_or_inside(table, root):
            ctx.fail(node.line, "checkpoint_root", C.CONFLICTING_FIELDS,
                     f"checkpoint_root must be outside the table {table} (and not contain it)",
                     fields=("checkpoint_root", "sink.path"))
    return root
