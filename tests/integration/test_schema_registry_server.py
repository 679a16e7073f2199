"""A real Confluent-compatible Schema Registry on loopback (Apicurio Registry 3.3, started by
pipelines/local/schema_registry.py), spoken to over plain HTTP as a Confluent client speaks to it:
register an Avro schema, read it back by id and as the subject's latest version, evolve it
compatibly, and see an incompatible version refused (the registry starts with BACKWARD as its
global compatibility, Confluent's default; Apicurio's own default is none). One registry for the
module; the last test stops it. Another serves HTTPS only, read through the pipeline's client
with ``ca_file``; behind an authenticating gateway, the client signs in with basic auth or a
bearer token."""
from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request

import pytest

from pipelines.local.schema_registry import HOST, SchemaRegistry

pytestmark = pytest.mark.integration
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
START_BOUND_S = 60.0
A = {"name": "a", "type": "string"}
B_WITH_DEFAULT = {"name": "b", "type": "int", "default": 0}
A_AS_INT = {"name": "a", "type": "int"}


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    server = SchemaRegistry(tmp_path_factory.mktemp("schema-registry")).start()
    yield server
    server.stop()


def avro(*fields: dict) -> str:
    return json.dumps({"type": "record", "name": "Event", "namespace": "scg.test", "fields": list(fields)})


def call(method: str, url: str, body: dict | None = None) -> tuple[int, dict | list]:
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def test_it_serves_on_loopback_once_ready_within_a_bound(registry):
    assert registry.started_in_s < START_BOUND_S
    assert registry.url == f"http://{HOST}:{registry.port}/apis/ccompat/v7"
    assert call("GET", registry.url + "/subjects") == (200, [])
    assert registry.log_file.is_file() and registry.log_file.parent == registry.workdir
    assert call("GET", registry.url + "/config") == (200, {"compatibilityLevel": "BACKWARD"})


def test_a_schema_registered_under_a_subject_reads_back_by_id_and_as_its_latest_version(registry):
    status, registered = call("POST", registry.url + "/subjects/t-value/versions", {"schema": avro(A)})
    assert status == 200 and isinstance(registered["id"], int)

    status, by_id = call("GET", registry.url + f"/schemas/ids/{registered['id']}")
    assert status == 200 and json.loads(by_id["schema"]) == json.loads(avro(A))

    status, latest = call("GET", registry.url + "/subjects/t-value/versions/latest")
    assert status == 200
    assert (latest["subject"], latest["version"], latest["id"]) == ("t-value", 1, registered["id"])
    assert json.loads(latest["schema"]) == json.loads(avro(A))
    # the same schema again is the same registration, as with Confluent's registry
    assert call("POST", registry.url + "/subjects/t-value/versions", {"schema": avro(A)}) == (200, registered)


def test_a_backward_compatible_version_is_added_and_an_incompatible_one_refused(registry):
    first = call("GET", registry.url + "/subjects/t-value/versions/latest")[1]
    status, second = call("POST", registry.url + "/subjects/t-value/versions", {"schema": avro(A, B_WITH_DEFAULT)})
    assert status == 200 and second["id"] != first["id"]

    check = registry.url + "/compatibility/subjects/t-value/versions/latest"
    assert call("POST", check, {"schema": avro(A_AS_INT)}) == (200, {"is_compatible": False})
    status, refused = call("POST", registry.url + "/subjects/t-value/versions", {"schema": avro(A_AS_INT)})
    assert status == 409 and refused["error_code"] == 409 and "Incompatible" in refused["message"]

    assert call("GET", registry.url + "/subjects/t-value/versions") == (200, [1, 2])
    status, latest = call("GET", registry.url + "/subjects/t-value/versions/latest")
    assert latest["version"] == 2 and json.loads(latest["schema"]) == json.loads(avro(A, B_WITH_DEFAULT))


def test_a_subject_set_to_none_takes_an_incompatible_version(registry):
    url = registry.url
    assert call("POST", url + "/subjects/loose-value/versions", {"schema": avro(A)})[0] == 200
    assert call("PUT", url + "/config/loose-value", {"compatibility": "NONE"})[0] == 200
    assert call("POST", url + "/subjects/loose-value/versions", {"schema": avro(A_AS_INT)})[0] == 200
    assert call("GET", url + "/subjects/loose-value/versions") == (200, [1, 2])


def test_an_https_registry_is_read_with_the_configured_ca_and_refused_without_it(tmp_path):
    """``format.schema_registry.ca_file`` against a registry serving only HTTPS with a certificate
    of the local CA: the pipeline's client reads a subject's version with that CA; without it the
    TLS handshake fails and the registry counts as not answering (a transient fault)."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from pipelines.local.certificates import ensure_certificates
    from pipelines.runtime.registry_client import RegistrySchemas, RegistrySettings, RegistryUnavailableError

    certificates = ensure_certificates(tmp_path / "tls")
    server = SchemaRegistry(tmp_path / "registry", tls=(certificates.broker_cert_file,
                                                         certificates.broker_key_file)).start()
    try:
        assert server.url.startswith(f"https://{HOST}:")
        trusted = RegistrySettings(server.url, ca_file=str(certificates.ca_file))
        SchemaRegistryClient(trusted.client_config()).register_schema("events-value", Schema(avro(A), "AVRO"))
        version = RegistrySchemas(trusted).subject_version("events-value", None)
        assert (version.version, json.loads(version.text)["fields"]) == (1, [A])
        with pytest.raises(RegistryUnavailableError, match="certificate|SSL|TLS"):
            RegistrySchemas(RegistrySettings(server.url)).subject_version("events-value", None)
        with pytest.raises(OSError):  # no plain HTTP next to it
            urllib.request.urlopen(server.url.replace("https://", "http://") + "/subjects", timeout=10)
    finally:
        server.stop()


def test_the_pipeline_s_client_signs_in_with_basic_auth_or_a_bearer_token(registry):
    """The registry behind an authenticating gateway: the pipeline's client passes with the
    configured username and password, or bearer token; wrong credentials are refused
    (SCHEMA_REGISTRY_REFUSED, never retried as unavailable)."""
    from pipelines.runtime.registry_client import RegistryRefusedError, RegistrySchemas, RegistrySettings
    from tests.support.auth_proxy import AuthProxy

    status, _ = call("POST", f"{registry.url}/subjects/signed-value/versions", {"schema": avro(A)})
    assert status == 200
    proxy = AuthProxy(registry.url, username="reader", password="s3cret", token="t0ken")
    try:
        for settings in (RegistrySettings(proxy.url, username="reader", password="s3cret"),
                         RegistrySettings(proxy.url, bearer_token="t0ken")):
            assert json.loads(RegistrySchemas(settings).subject_version("signed-value", None).text)["fields"] == [A]
        with pytest.raises(RegistryRefusedError, match="HTTP 401"):
            RegistrySchemas(RegistrySettings(proxy.url, username="reader", password="wrong")).subject_version(
                "signed-value", None)
        assert proxy.seen[:2] == ["Basic cmVhZGVyOnMzY3JldA==", "Bearer t0ken"]
    finally:
        proxy.close()


def test_stop_ends_the_process_and_frees_the_port(registry):
    pid, port = registry.pid, registry.port
    registry.stop()
    assert not registry.running()
    assert not os.path.exists(f"/proc/{pid}"), "the registry's JVM is still there (stop waits for it)"
    with socket.socket() as sock:
        assert sock.connect_ex((HOST, port)) != 0, "the registry's port still accepts connections"
    registry.stop()  # again: nothing to do
