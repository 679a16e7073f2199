"""A Confluent-compatible Schema Registry as the decoders see it: writer schemas by id, a
subject's reader schema, each fetched once per process.

Built on confluent-kafka's ``SchemaRegistryClient``. The answers are four: a schema; no such
schema (the registry said 404: :data:`MISSING`, which makes the record a dead letter); refused
credentials (401, 403: :class:`RegistryRefusedError`, permanent); or no answer
(:class:`RegistryUnavailableError`: the registry could not be reached or failed, a transient
fault the batch retries, never a dead letter). Credentials are kept out of ``repr``.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from groupmgr.core import ExitCategory, ScgError

MISSING = object()  # the registry has no schema of that id
NOT_FOUND = 404
REFUSED = (401, 403)  # the credentials: not transient
REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RegistrySettings:
    """Where a registry is and how to sign in: basic auth (``username`` and ``password``) or a
    bearer token, and a CA file for HTTPS. Picklable; secrets never shown."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    ca_file: str | None = None

    def client_config(self) -> dict[str, Any]:
        """confluent-kafka's ``SchemaRegistryClient`` settings (secrets revealed)."""
        config: dict[str, Any] = {"url": self.url, "timeout": REQUEST_TIMEOUT_S, "max.retries": 2,
                                  "cache.latest.ttl.sec": 0}  # a subject's latest version is asked each time
        if self.username is not None:
            config["basic.auth.user.info"] = f"{self.username}:{self.password or ''}"
        if self.bearer_token is not None:
            config.update({"bearer.auth.credentials.source": "STATIC_TOKEN",
                           "bearer.auth.token": self.bearer_token, "bearer.auth.logical.cluster": "",
                           "bearer.auth.identity.pool.id": ""})
        if self.ca_file is not None:
            config["ssl.ca.location"] = self.ca_file
        return config


class RegistryUnavailableError(ScgError):
    """The schema registry did not answer (down, unreachable, a timeout, a 5xx): a transient
    fault; the batch waits and retries."""

    condition = "SCHEMA_REGISTRY_UNAVAILABLE"
    retriable = True

    def __init__(self, url: str, detail: str):
        super().__init__(f"schema registry {url} did not answer: {detail}")
        self.url = url


class RegistryRefusedError(ScgError):
    """The schema registry refused the pipeline's credentials (HTTP 401 or 403): retrying cannot
    help; fix ``format.schema_registry``'s credentials."""

    condition = "SCHEMA_REGISTRY_REFUSED"
    exit_category = ExitCategory.CONFIG

    def __init__(self, url: str, detail: str):
        super().__init__(f"schema registry {url} refused the credentials: {detail}")


class SubjectNotFoundError(ScgError):
    """The registry has no such subject or version for the reader schema (a configuration fault)."""

    condition = "SCHEMA_SUBJECT_NOT_FOUND"
    exit_category = ExitCategory.CONFIG

    def __init__(self, url: str, subject: str, version: int | None):
        which = "latest version" if version is None else f"version {version}"
        super().__init__(f"schema registry {url} has no {which} of subject {subject!r}")


@dataclass(frozen=True)
class SubjectVersion:
    """One version of a subject: its number, the id of its schema, and the schema's text."""

    subject: str
    version: int
    schema_id: int
    text: str = field(repr=False)


class RegistrySchemas:
    """One registry's schemas in this process: each id asked once (a found schema and a 404 are
    both kept; a failure is not). Thread-safe."""

    def __init__(self, settings: RegistrySettings, client: Any = None):
        self.settings = settings
        self._client = client
        self._by_id: dict[int, Any] = {}
        self._lock = threading.Lock()

    def _registry(self) -> Any:
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            self._client = SchemaRegistryClient(self.settings.client_config())
        return self._client

    def schema_text(self, schema_id: int) -> Any:
        """The schema text registered under ``schema_id``, or :data:`MISSING`."""
        with self._lock:
            if schema_id not in self._by_id:
                self._by_id[schema_id] = self._ask(lambda client: client.get_schema(schema_id).schema_str)
            return self._by_id[schema_id]

    def subject_version(self, subject: str, version: int | None) -> SubjectVersion:
        """``subject``'s ``version`` (None: its latest, asked again at every call);
        SubjectNotFoundError if none."""
        def ask(client):
            registered = client.get_latest_version(subject) if version is None else client.get_version(subject, version)
            return SubjectVersion(subject, registered.version, registered.schema_id, registered.schema.schema_str)

        found = self._ask(ask)
        if found is MISSING:
            raise SubjectNotFoundError(self.settings.url, subject, version)
        return found

    def _ask(self, request) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return request(self._registry())
        except SchemaRegistryError as exc:
            if exc.http_status_code == NOT_FOUND:
                return MISSING
            if exc.http_status_code in REFUSED:
                raise RegistryRefusedError(self.settings.url, f"HTTP {exc.http_status_code}: {exc.error_message}") from None
            raise RegistryUnavailableError(self.settings.url, f"HTTP {exc.http_status_code}: {exc.error_message}") from None
        except Exception as exc:  # httpx transport errors, TLS failures, timeouts
            raise RegistryUnavailableError(self.settings.url, f"{type(exc).__name__}: {exc}") from None


_PROCESS_REGISTRIES: dict[RegistrySettings, RegistrySchemas] = {}
_PROCESS_LOCK = threading.Lock()


def process_registry(settings: RegistrySettings) -> RegistrySchemas:
    """This process's :class:`RegistrySchemas` of ``settings`` (a Python worker asks each id once
    for all its tasks)."""
    with _PROCESS_LOCK:
        if settings not in _PROCESS_REGISTRIES:
            _PROCESS_REGISTRIES[settings] = RegistrySchemas(settings)
        return _PROCESS_REGISTRIES[settings]


def parse_schema_text(text: str) -> Any:
    """A schema text as JSON (an Avro schema); ValueError when it is not JSON."""
    return json.loads(text)
