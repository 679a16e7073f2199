"""Client certificates and keys read as the Kafka clients read them (pure; real key material made
in the test): each usable PEM form, each refusal by its condition, and the one form handed to
Spark's Java client."""
from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives import serialization

from pipelines.config.client_keys import (TlsMaterialProblem, certificate_blocks, check_client_pair, java_client_key,
                                          pem_labels, read_client_certificate, read_private_key)
from pipelines.config.yaml_nodes import Condition
from tests.support.tls_material import Authority, certificate_pem, key_pem, new_key

PASSWORD = "key-password-canary"


def _public(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def _problem(call, *args) -> TlsMaterialProblem:
    with pytest.raises(TlsMaterialProblem) as info:
        call(*args)
    assert PASSWORD not in str(info.value)
    return info.value


@pytest.mark.parametrize("kind", ["ec", "rsa"])
@pytest.mark.parametrize("form", ["pkcs8", "traditional"])
@pytest.mark.parametrize("password", [None, PASSWORD])
def test_every_pem_form_is_read_and_matches_its_certificate(kind, form, password):
    key = new_key(kind)
    certificate = Authority.make().issue("client", key.public_key())
    read = read_private_key(key_pem(key, form, password), password)
    assert _public(read) == _public(key)
    check_client_pair(read_client_certificate(certificate_pem(certificate)), read)


def test_an_encrypted_pkcs8_key_is_pbes2_as_openssl_3_writes_it():
    pem = key_pem(new_key(), "pkcs8", PASSWORD)
    assert pem_labels(pem) == ["ENCRYPTED PRIVATE KEY"]
    body = base64.b64decode(b"".join(pem.splitlines()[1:-1]))
    assert bytes.fromhex("2a864886f70d01050d") in body  # 1.2.840.113549.1.5.13 (PBES2)


@pytest.mark.parametrize("kind", ["ec", "rsa"])
@pytest.mark.parametrize("form", ["pkcs8", "traditional"])
@pytest.mark.parametrize("password", [None, PASSWORD])
def test_java_gets_the_key_unencrypted_as_pkcs8(kind, form, password):
    key = new_key(kind)
    text = java_client_key(key_pem(key, form, password), password)
    assert pem_labels(text.encode()) == ["PRIVATE KEY"]
    assert _public(serialization.load_pem_private_key(text.encode(), None)) == _public(key)


def test_the_first_private_key_of_a_file_is_the_one_read_and_other_blocks_are_ignored():
    first, second = new_key(), new_key()
    certificate = certificate_pem(Authority.make().issue("c", first.public_key()))
    combined = certificate + key_pem(first, "traditional") + key_pem(second)
    assert _public(read_private_key(combined, None)) == _public(first)
    assert pem_labels(java_client_key(combined, None).encode()) == ["PRIVATE KEY"]


def test_a_key_from_another_pair_is_a_mismatch():
    certificate = Authority.make().issue("c", new_key().public_key())
    problem = _problem(check_client_pair, certificate, new_key())
    assert (problem.condition, problem.field) == (Condition.CLIENT_KEY_MISMATCH, "ssl_key_location")
    assert "CN=c" in problem.detail


def test_the_leaf_is_the_first_certificate_of_a_chain():
    authority, key = Authority.make(), new_key()
    leaf = read_client_certificate(certificate_pem(authority.issue("leaf", key.public_key()))
                                   + certificate_pem(authority.certificate))
    check_client_pair(leaf, key)
    reversed_leaf = read_client_certificate(certificate_pem(authority.certificate)
                                            + certificate_pem(authority.issue("leaf", key.public_key())))
    assert _problem(check_client_pair, reversed_leaf, key).condition == Condition.CLIENT_KEY_MISMATCH


@pytest.mark.parametrize("form", ["pkcs8", "traditional"])
def test_an_encrypted_key_without_password_is_named(form):
    problem = _problem(read_private_key, key_pem(new_key(), form, PASSWORD), None)
    assert (problem.condition, problem.field) == (Condition.CLIENT_KEY_PASSWORD_MISSING, "ssl_key_location")


@pytest.mark.parametrize("form", ["pkcs8", "traditional"])
def test_a_wrong_password_is_named(form):
    problem = _problem(read_private_key, key_pem(new_key("rsa"), form, PASSWORD), "not-" + PASSWORD)
    assert (problem.condition, problem.field) == (Condition.CLIENT_KEY_PASSWORD_WRONG, "ssl_key_password")


@pytest.mark.parametrize("form", ["pkcs8", "traditional"])
def test_a_password_for_an_unencrypted_key_is_not_used(form):
    """As librdkafka and Python's ssl: a password shared by several pipelines is harmless."""
    key = new_key()
    assert _public(read_private_key(key_pem(key, form), PASSWORD)) == _public(key)
    assert pem_labels(java_client_key(key_pem(key, form), PASSWORD).encode()) == ["PRIVATE KEY"]


@pytest.mark.parametrize("content, found", [
    (lambda: certificate_pem(Authority.make().certificate), "CERTIFICATE"),     # the CA given as the key
    (lambda: new_key().public_key().public_bytes(serialization.Encoding.PEM,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo), "PUBLIC KEY"),
    (lambda: b"garbage, no PEM at all", "no complete PEM block"),
    (lambda: b"-----BEGIN PRIVATE KEY-----\nTUlJQw==\n-----END PRIVATE KEY-----\n", None),  # a block that does not parse
    (lambda: key_pem(new_key())[:120], "no complete PEM block"),  # cut short
])
def test_a_file_without_a_usable_private_key_is_not_a_private_key(content, found):
    problem = _problem(read_private_key, content(), None)
    assert (problem.condition, problem.field) == (Condition.NOT_A_PRIVATE_KEY, "ssl_key_location")
    if found is not None:
        assert found in problem.detail


@pytest.mark.parametrize("content", [
    lambda: key_pem(new_key()),                                              # the key given as the certificate
    lambda: b"-----BEGIN CERTIFICATE-----\nTUlJQw==\n-----END CERTIFICATE-----\n",  # PEM-shaped garbage
    lambda: b"\x00\xff binary",
])
def test_a_client_certificate_file_without_a_parseable_first_certificate_is_not_a_certificate(content):
    problem = _problem(read_client_certificate, content())
    assert (problem.condition, problem.field) == (Condition.NOT_A_CERTIFICATE, "ssl_certificate_location")


@pytest.mark.parametrize("content", [
    lambda: key_pem(new_key()),                                              # the key given as the CA
    lambda: b"-----BEGIN X509 CRL-----\nTUlJQw==\n-----END X509 CRL-----\n",   # another PEM block only
    lambda: b"\x00\xff binary",
])
def test_a_file_without_a_certificate_block_is_not_a_certificate(content):
    problem = _problem(certificate_blocks, content(), "ssl_ca_location")
    assert (problem.condition, problem.field) == (Condition.NOT_A_CERTIFICATE, "ssl_ca_location")


def test_certificate_blocks_are_not_parsed_the_tls_stacks_judge_them():
    """A CA bundle's certificates are left to OpenSSL and Java, which read encodings cryptography
    refuses; only the client's own certificate is parsed here."""
    good = certificate_pem(Authority.make().certificate)
    damaged = b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"
    assert certificate_blocks(good + damaged, "ssl_ca_location") == [good.strip(), damaged.strip()]
    assert certificate_blocks(damaged, "ssl_ca_location") == [damaged.strip()]


def test_only_the_first_certificate_of_a_client_chain_is_parsed():
    authority, key = Authority.make(), new_key()
    leaf = certificate_pem(authority.issue("leaf", key.public_key()))
    damaged = b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"
    check_client_pair(read_client_certificate(leaf + damaged), key)
    assert "first certificate (of 2)" in _problem(read_client_certificate, damaged + leaf).detail
