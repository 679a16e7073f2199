"""Pure rendering of a secured local Kafka node, the SCRAM format argument, the client settings a
secured cluster hands out (accepted by the pipeline loader) and the `scg kafka start --secure` flag."""
from __future__ import annotations

import base64
import hashlib
import re
import textwrap
from pathlib import Path

import pytest
import yaml

from pipelines.local.broker_config import (PRINCIPAL_MAPPING_RULES, BrokerSecurity, NodePorts,
                                           render_server_properties, scram_credential)
from pipelines.local.local_kafka import ClusterSecurity
from tests.support.tls_material import write_client_files

CHAIN = "-----BEGIN CERTIFICATE-----\nQUJD\nREVG\n-----END CERTIFICATE-----\n" * 2
KEY = "-----BEGIN PRIVATE KEY-----\nS0VZS0VZ\nS0VZ\n-----END PRIVATE KEY-----\n"
SECURITY = BrokerSecurity(Path("/tls/ca.pem"), CHAIN, KEY, ("User:broker", "User:admin"))


def java_properties(text: str) -> dict[str, str]:
    """The subset of java.util.Properties parsing the renderer relies on: key=value lines, ``\\n``."""
    return {k: v.replace("\\n", "\n") for k, v in (line.split("=", 1) for line in text.splitlines())}


def secure_props(node_id: int = 1, count: int = 1) -> dict[str, str]:
    nodes = [NodePorts(i, 9000 + i, 9100 + i, 9200 + i) for i in range(1, count + 1)]
    return java_properties(render_server_properties(nodes[node_id - 1], nodes, Path("/d"),
                                                    security=SECURITY))


def test_secured_node_has_scram_and_mtls_listeners_and_no_plaintext():
    props = secure_props()
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9001,SSL://127.0.0.1:9201,CONTROLLER://127.0.0.1:9101"
    assert props["advertised.listeners"] == "SASL_SSL://127.0.0.1:9001,SSL://127.0.0.1:9201"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SSL"
    assert props["inter.broker.listener.name"] == "SSL"
    assert "PLAINTEXT" not in "".join(props.values())
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert "ScramLoginModule required" in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert props["listener.name.sasl_ssl.ssl.client.auth"] == "none"
    assert props["listener.name.ssl.ssl.client.auth"] == "required"
    assert props["listener.name.controller.ssl.client.auth"] == "required"


def test_secured_node_enforces_acls_with_super_users():
    props = secure_props()
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:broker;User:admin"


def test_tls_material_is_inline_pem_that_round_trips_through_properties():
    props = secure_props()
    assert props["ssl.keystore.type"] == "PEM" and props["ssl.truststore.type"] == "PEM"
    assert props["ssl.keystore.certificate.chain"] == CHAIN.strip()
    assert props["ssl.keystore.key"] == KEY.strip()
    assert props["ssl.truststore.location"] == "/tls/ca.pem"
    assert "ssl.key.password" not in props  # an inline unencrypted key takes no password


def test_the_private_key_is_not_in_the_repr_of_the_render_input():
    assert "S0VZ" not in repr(SECURITY) and "QUJD" not in repr(SECURITY)


def test_three_secured_nodes_share_one_quorum():
    props = secure_props(node_id=2, count=3)
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    assert props["listeners"].startswith("SASL_SSL://127.0.0.1:9002,SSL://127.0.0.1:9202")


def test_secured_node_without_mtls_port_is_refused():
    node = NodePorts(1, 9001, 9101)
    with pytest.raises(ValueError, match="mtls_port"):
        render_server_properties(node, [node], Path("/d"), security=SECURITY)


def test_plaintext_node_is_unchanged_by_the_secure_option():
    node = NodePorts(1, 9092, 9093)
    props = java_properties(render_server_properties(node, [node], Path("/d")))
    assert props["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert not any(k.startswith(("ssl.", "sasl.", "authorizer")) for k in props)


@pytest.mark.parametrize("dn, principal", [
    ("CN=scg-client", "scg-client"),
    ("CN=broker,O=scg,C=DE", "broker"),
])
def test_principal_mapping_rule_takes_the_common_name(dn, principal):
    # Kafka applies RULE:<pattern>/<replacement>/ with java.util.regex; this pattern means the same in re.
    rule = re.fullmatch(r"RULE:(.*)/(.*)/,DEFAULT", PRINCIPAL_MAPPING_RULES)
    pattern, replacement = rule.group(1), rule.group(2).replace("$1", r"\1")
    assert re.sub(pattern, replacement, dn) == principal


def test_scram_argument_carries_the_salted_password_never_the_password():
    salt = b"0123456789abcdef"
    arg = scram_credential("scg-client", "s3cret-canary", salt=salt, iterations=4096)
    match = re.fullmatch(r'SCRAM-SHA-512=\[name=scg-client,iterations=4096,'
                         r'salt="([A-Za-z0-9+/=]+)",saltedpassword="([A-Za-z0-9+/=]+)"\]', arg)
    assert match, arg
    assert "s3cret-canary" not in arg
    assert base64.b64decode(match.group(1)) == salt
    # ScramFormatter.hi = PBKDF2-HMAC-SHA-512 with the hash's length (64 bytes)
    expected = hashlib.pbkdf2_hmac("sha512", b"s3cret-canary", salt, 4096)
    assert base64.b64decode(match.group(2)) == expected and len(expected) == 64


def test_scram_arguments_get_fresh_salts():
    assert scram_credential("u", "p") != scram_credential("u", "p")


def _security(tmp_path: Path) -> ClusterSecurity:
    write_client_files(tmp_path, name="client")  # ca.pem, client.pem, client-key.pem
    files = {name: tmp_path / name for name in ("ca.pem", "client.pem", "client-key.pem",
                                                "admin.password", "client.password")}
    for name in ("admin.password", "client.password"):
        files[name].write_text("pw-canary\n")
    return ClusterSecurity(
        sasl_ssl_bootstrap="127.0.0.1:9092", mtls_bootstrap="127.0.0.1:9093",
        sasl_mechanism="SCRAM-SHA-512", ca_file=str(files["ca.pem"]),
        client_cert_file=str(files["client.pem"]), client_key_file=str(files["client-key.pem"]),
        client_principal="User:scg-client", admin_username="admin",
        admin_password_file=str(files["admin.password"]), client_username="scg-client",
        client_password_file=str(files["client.password"]))


def test_client_settings_for_each_library(tmp_path):
    sec = _security(tmp_path)
    assert sec.scram_config()["sasl.password"] == "pw-canary"
    assert sec.admin_config()["sasl.username"] == "admin"
    assert sec.scram_config("other", "x")["sasl.username"] == "other"
    assert sec.mtls_config()["ssl.certificate.location"].endswith("client.pem")
    assert "ssl.certificate.location" not in sec.mtls_config(with_certificate=False)
    assert sec.kafka_python_scram()["sasl_plain_password"] == "pw-canary"
    assert sec.kafka_python_mtls()["bootstrap_servers"] == ["127.0.0.1:9093"]
    assert "pw-canary" not in repr(sec)


@pytest.mark.parametrize("listener, protocol", [("sasl_ssl", "SASL_SSL"), ("mtls", "SSL")])
def test_printed_pipeline_settings_load_as_a_pipeline(tmp_path, listener, protocol):
    from pipelines.config import load_pipeline

    sec = _security(tmp_path)
    section = yaml.safe_dump({"kafka": sec.pipeline_kafka(listener)}, sort_keys=False)
    assert "pw-canary" not in section
    path = tmp_path / "p.yaml"
    path.write_text(section + textwrap.dedent(f"""\
        name: secure-{listener}
        topics: [t]
        group: {{id: g}}
        format: {{type: raw}}
        sink: {{path: {tmp_path / 'table'}, dead_letter_path: {tmp_path / 'dead'}}}
        """))
    kafka = load_pipeline(path, env={}).kafka
    assert kafka.security.protocol == protocol
    assert kafka.security.ssl_ca_location == sec.ca_file
    if listener == "sasl_ssl":
        assert kafka.security.sasl_username == "scg-client"
        assert kafka.security.sasl_password.reveal() == "pw-canary"
    else:
        assert kafka.security.ssl_certificate_location == sec.client_cert_file
        assert kafka.security.ssl_key_location == sec.client_key_file


def test_kafka_start_takes_secure():
    from pipelines.cli.main import build_parser

    assert build_parser().parse_args(["kafka", "start", "--secure"]).secure is True
    assert build_parser().parse_args(["kafka", "start"]).secure is False
