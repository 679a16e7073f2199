"""Real TLS material for tests, made with ``cryptography``: a CA, client certificates it signs, and
their private keys in each PEM form the clients meet (PKCS#8, encrypted PKCS#8 with PBES2 as
OpenSSL 3 writes it, traditional ``RSA``/``EC PRIVATE KEY`` plain or with ``Proc-Type: 4,ENCRYPTED``).
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

FORMS = {"pkcs8": serialization.PrivateFormat.PKCS8, "traditional": serialization.PrivateFormat.TraditionalOpenSSL}


def new_key(kind: str = "ec"):
    """A fresh private key: ``ec`` (P-256) or ``rsa`` (2048 bits)."""
    if kind == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass(frozen=True)
class Authority:
    """A CA certificate and its key."""

    certificate: x509.Certificate
    key: object

    @classmethod
    def make(cls, name: str = "test-ca") -> "Authority":
        key = new_key("ec")
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        certificate = _builder(subject, subject, key.public_key()).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256())
        return cls(certificate, key)

    @classmethod
    def load(cls, cert_file: Path, key_file: Path) -> "Authority":
        return cls(x509.load_pem_x509_certificate(Path(cert_file).read_bytes()),
                   serialization.load_pem_private_key(Path(key_file).read_bytes(), None))

    def issue(self, name: str, public_key) -> x509.Certificate:
        """A client certificate ``CN=<name>`` for ``public_key``."""
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        return _builder(subject, self.certificate.subject, public_key).add_extension(
            x509.BasicConstraints(ca=False, path_length=None), critical=True).add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False).sign(
            self.key, hashes.SHA256())


def certificate_pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def key_pem(key, form: str = "pkcs8", password: str | None = None) -> bytes:
    """``key`` as PEM in ``form`` (``pkcs8`` or ``traditional``), encrypted when ``password`` is given
    (PKCS#8: PBES2 with AES-256-CBC; traditional: ``Proc-Type: 4,ENCRYPTED``, AES-256-CBC)."""
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password is not None
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, FORMS[form], encryption)


@dataclass(frozen=True)
class ClientFiles:
    """The files of one client: the CA that signed it, its certificate and its key."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def write_client_files(directory: Path, *, name: str = "client", kind: str = "ec", form: str = "pkcs8",
                       password: str | None = None, authority: Authority | None = None) -> ClientFiles:
    """A CA (``authority`` or a new one), a client certificate it signs and the certificate's key,
    written as PEM files under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    authority = authority or Authority.make()
    key = new_key(kind)
    files = ClientFiles(directory / "ca.pem", directory / f"{name}.pem", directory / f"{name}-key.pem")
    files.ca_file.write_bytes(certificate_pem(authority.certificate))
    files.cert_file.write_bytes(certificate_pem(authority.issue(name, key.public_key())))
    files.key_file.write_bytes(key_pem(key, form, password))
    return files


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30)))
