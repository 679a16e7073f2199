"""A local certificate authority for the secured local Kafka: CA, broker and client certificates.

All files are PEM, written under one directory and reused when they are already there (and still
verify against the CA there), so a restarted cluster keeps working with the files its users
already point at:

| file | what |
|---|---|
| ``ca.pem`` / ``ca-key.pem`` | the CA certificate (what clients trust) and its key |
| ``broker.pem`` / ``broker-key.pem`` | the broker certificate followed by the CA certificate (the chain), and its key; SAN ``IP:127.0.0.1``, ``DNS:localhost``; usable as server and as client certificate (the nodes authenticate to each other with it) |
| ``client-<name>.pem`` / ``client-<name>-key.pem`` | a client certificate with ``CN=<name>`` (client-auth only) and its key |

Keys are ECDSA P-256 (fast to make), unencrypted PKCS#8 (``-----BEGIN PRIVATE KEY-----``), mode 0600; the broker's Java PEM
keystore, librdkafka and Python's ``ssl`` all read that form. The ``openssl`` command line does the
work (no Python crypto package is needed).
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from groupmgr.core import ExitCategory, ScgError

BROKER_NAME = "broker"
CLIENT_NAME = "scg-client"
CA_DAYS = 3650
LEAF_DAYS = 825
CURVE = "P-256"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class CertificateError(ScgError):
    """Certificates for the local cluster could not be made (``openssl`` missing or failing)."""

    condition = "CERTIFICATES_FAILED"
    exit_category = ExitCategory.ENVIRONMENT


@dataclass(frozen=True)
class ClientCertificate:
    """A client certificate and its key; the broker maps it to the principal ``User:<name>``."""

    name: str
    cert_file: Path
    key_file: Path

    @property
    def principal(self) -> str:
        return f"User:{self.name}"


@dataclass(frozen=True)
class Certificates:
    """The PEM files of a local CA, its broker certificate and one client certificate."""

    ca_file: Path
    broker_cert_file: Path
    broker_key_file: Path
    client: ClientCertificate

    @property
    def broker_principal(self) -> str:
        return f"User:{BROKER_NAME}"


def ensure_certificates(directory: Path, client_name: str = CLIENT_NAME) -> Certificates:
    """The CA, broker and client certificate under ``directory``; made only where missing or stale."""
    directory = Path(directory)
    fresh_ca = _ensure_ca(directory)
    broker_cert, broker_key = directory / "broker.pem", directory / "broker-key.pem"
    if fresh_ca or not _leaf_is_valid(directory, broker_cert, broker_key):
        _issue(directory, BROKER_NAME, broker_cert, broker_key, server=True)
    client = issue_client_certificate(directory, client_name, _force=fresh_ca)
    return Certificates(directory / "ca.pem", broker_cert, broker_key, client)


def issue_client_certificate(directory: Path, name: str, _force: bool = False) -> ClientCertificate:
    """A client certificate ``CN=<name>`` signed by the CA under ``directory`` (made if missing).

    Tests use it for a second principal over mutual TLS; a certificate from another directory's CA
    is one the broker does not trust."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"certificate name {name!r}: use letters, digits, '.', '_' and '-'")
    directory = Path(directory)
    fresh_ca = _ensure_ca(directory)
    cert, key = directory / f"client-{name}.pem", directory / f"client-{name}-key.pem"
    if _force or fresh_ca or not _leaf_is_valid(directory, cert, key):
        _issue(directory, name, cert, key, server=False)
    return ClientCertificate(name, cert, key)


def read_pem(path: Path) -> str:
    """The text of a PEM file (for inline PEM settings)."""
    return Path(path).read_text(encoding="ascii")


# -- internals -------------------------------------------------------------------------------------
_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = {cn}
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth,clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid,issuer
subjectAltName = IP:127.0.0.1,DNS:localhost
[client_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid,issuer
"""


def _ensure_ca(directory: Path) -> bool:
    """Make the CA if it is missing; True when it was made now."""
    ca_cert, ca_key = directory / "ca.pem", directory / "ca-key.pem"
    if ca_cert.exists() and ca_key.exists():
        return False
    directory.mkdir(parents=True, exist_ok=True)
    config = _write_config(directory, "scg-local-ca")
    try:
        _new_key(ca_key)
        tmp = ca_cert.with_suffix(".tmp")
        _openssl("req", "-new", "-x509", "-config", config, "-extensions", "ca_ext",
                 "-key", ca_key, "-days", CA_DAYS, "-sha256", "-set_serial", _serial(), "-out", tmp)
        tmp.chmod(0o644)
        tmp.replace(ca_cert)
    finally:
        config.unlink(missing_ok=True)
    return True


def _issue(directory: Path, name: str, cert: Path, key: Path, server: bool) -> None:
    config = _write_config(directory, name)
    csr = directory / f".{name}.csr"
    tmp = cert.with_suffix(".tmp")
    try:
        _new_key(key)
        _openssl("req", "-new", "-config", config, "-key", key, "-out", csr)
        _openssl("x509", "-req", "-in", csr, "-CA", directory / "ca.pem",
                 "-CAkey", directory / "ca-key.pem", "-set_serial", _serial(), "-days", LEAF_DAYS,
                 "-sha256", "-extfile", config, "-extensions", "server_ext" if server else "client_ext",
                 "-out", tmp)
        chain = tmp.read_text() + ((directory / "ca.pem").read_text() if server else "")
        tmp.write_text(chain)
        tmp.chmod(0o644)
        tmp.replace(cert)
    finally:
        for path in (config, csr, tmp):
            path.unlink(missing_ok=True)


def _new_key(key: Path) -> None:
    """A fresh ECDSA P-256 key as unencrypted PKCS#8, created with mode 0600 (never readable by others)."""
    tmp = key.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    os.close(os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600))
    try:
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", f"ec_paramgen_curve:{CURVE}", "-out", tmp)
        tmp.chmod(0o600)
        tmp.replace(key)
    finally:
        tmp.unlink(missing_ok=True)


def _leaf_is_valid(directory: Path, cert: Path, key: Path) -> bool:
    """Both files exist, the certificate verifies against the CA there (not expired) and the key
    belongs to it."""
    if not (cert.exists() and key.exists()):
        return False
    try:
        _openssl("verify", "-CAfile", directory / "ca.pem", "-purpose", "any", cert)
        cert_pub = _openssl("x509", "-in", cert, "-noout", "-pubkey")
        key_pub = _openssl("pkey", "-in", key, "-pubout")
    except CertificateError:
        return False
    return cert_pub.strip() == key_pub.strip()


def _write_config(directory: Path, cn: str) -> Path:
    path = directory / f".openssl-{cn}.cnf"
    path.write_text(_CONFIG.format(cn=cn))
    return path


def _serial() -> str:
    return "0x" + secrets.token_hex(8)


def _openssl(*args) -> str:
    if shutil.which("openssl") is None:
        raise CertificateError("openssl not found on PATH; it makes the local cluster's certificates "
                               "(apt-get install openssl)")
    result = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=60)
    if result.returncode != 0:
        raise CertificateError(f"openssl {args[0]} failed: {result.stderr.strip()[-400:]}")
    return result.stdout
