"""The local CA (openssl on loopback-free files only): what the certificates say, key file modes,
reuse of existing files, and that another CA's certificates do not verify."""
from __future__ import annotations

import shutil
import stat
import subprocess

import pytest

from pipelines.local.certificates import ensure_certificates, issue_client_certificate

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def openssl(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, timeout=60)


def text_of(cert) -> str:
    return openssl("x509", "-in", cert, "-noout", "-text", "-nameopt", "RFC2253").stdout


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return ensure_certificates(tmp_path_factory.mktemp("tls"))


def test_broker_certificate_names_loopback_and_serves_both_ends(certs):
    text = text_of(certs.broker_cert_file)
    assert "Subject: CN=broker" in text
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text
    assert "TLS Web Server Authentication" in text and "TLS Web Client Authentication" in text
    # the chain file holds the broker certificate and then the CA
    assert certs.broker_cert_file.read_text().count("BEGIN CERTIFICATE") == 2


def test_client_certificate_is_the_principal_named_by_its_cn(certs):
    text = text_of(certs.client.cert_file)
    assert "Subject: CN=scg-client" in text and "TLS Web Client Authentication" in text
    assert certs.client.principal == "User:scg-client"


def test_certificates_verify_against_the_ca(certs):
    for cert in (certs.broker_cert_file, certs.client.cert_file):
        result = openssl("verify", "-CAfile", certs.ca_file, cert)
        assert result.returncode == 0, result.stderr


def test_keys_are_unencrypted_pkcs8_readable_by_the_owner_only(certs):
    for key in (certs.broker_key_file, certs.client.key_file, certs.ca_file.with_name("ca-key.pem")):
        assert key.read_text().startswith("-----BEGIN PRIVATE KEY-----")
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_existing_files_are_reused(certs):
    before = {p: p.read_bytes() for p in certs.ca_file.parent.glob("*.pem")}
    again = ensure_certificates(certs.ca_file.parent)
    assert again == certs
    assert {p: p.read_bytes() for p in certs.ca_file.parent.glob("*.pem")} == before


def test_a_leaf_missing_its_key_is_made_again(tmp_path):
    first = ensure_certificates(tmp_path)
    old = first.client.cert_file.read_bytes()
    first.client.key_file.unlink()
    second = ensure_certificates(tmp_path)
    assert second.client.key_file.exists() and second.client.cert_file.read_bytes() != old
    assert openssl("verify", "-CAfile", second.ca_file, second.client.cert_file).returncode == 0


def test_a_new_ca_reissues_every_certificate(tmp_path):
    first = ensure_certificates(tmp_path)
    broker = first.broker_cert_file.read_bytes()
    first.ca_file.unlink()
    second = ensure_certificates(tmp_path)
    assert second.broker_cert_file.read_bytes() != broker
    assert openssl("verify", "-CAfile", second.ca_file, second.broker_cert_file).returncode == 0


def test_another_directory_is_another_ca(certs, tmp_path):
    other = issue_client_certificate(tmp_path, "stranger")
    assert other.principal == "User:stranger"
    assert openssl("verify", "-CAfile", certs.ca_file, other.cert_file).returncode != 0


def test_bad_names_are_refused(tmp_path):
    with pytest.raises(ValueError):
        issue_client_certificate(tmp_path, "CN=evil,O=x")
