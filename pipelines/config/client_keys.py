"""TLS material of a pipeline, read the way the Kafka clients read it: certificates, the client's
private key, and the key in the one form Spark's Java Kafka client reads.

Pure: PEM bytes and a password in, parsed values or one :class:`TlsMaterialProblem` out (no file
is opened here). Guarantees:

* :func:`certificate_blocks` returns every ``CERTIFICATE`` PEM block of a file, at least one, or
  raises ``NOT_A_CERTIFICATE``. It does not parse them: a CA bundle is judged by the TLS stacks
  that load it (OpenSSL through librdkafka and Python's ``ssl``; Java), which accept encodings
  ``cryptography``'s stricter parser refuses (non-DER encodings, negative serial numbers).
* :func:`read_client_certificate` returns the client's own certificate, the file's first (librdkafka
  and Java take it as the leaf, the rest as its chain), parsed; ``NOT_A_CERTIFICATE`` when the
  file has none or it does not parse. The rest of the chain is not parsed here.
* :func:`read_private_key` returns the file's first private key (the one OpenSSL takes), in any
  PEM form OpenSSL writes: PKCS#8 (``PRIVATE KEY``), encrypted PKCS#8 (``ENCRYPTED PRIVATE KEY``:
  PBES2 as OpenSSL 3 writes it, or PBES1), traditional (``RSA``/``EC``/``DSA PRIVATE KEY``, also
  encrypted with a ``Proc-Type: 4,ENCRYPTED`` header). It raises ``NOT_A_PRIVATE_KEY`` when there
  is none or it does not parse, ``CLIENT_KEY_PASSWORD_MISSING`` for an encrypted key without a
  password and ``CLIENT_KEY_PASSWORD_WRONG`` when the password does not decrypt it. A password
  given with a key that is not encrypted is not used, as librdkafka and Python's ``ssl`` do not
  use it.
* :func:`check_client_pair` raises ``CLIENT_KEY_MISMATCH`` unless the key is the private half of
  the certificate's public key.
* :func:`java_client_key` is the key unencrypted as PKCS#8 PEM (``-----BEGIN PRIVATE KEY-----``):
  Kafka's Java client (3.9) reads only PKCS#8, and on Java 17 cannot decrypt PBES2. The text is
  as secret as the key and its password together; callers hand it only to options that Spark
  redacts.

A problem's detail never holds key material or a password: only what was found and what to do.
:class:`TlsFileChanged` is the run-time error for a file that no longer reads as it did when
the pipeline was validated: one line, exit 1, the field and the problem's condition.
"""
from __future__ import annotations

import re
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from groupmgr.core import ExitCategory, ScgError
from pipelines.config.yaml_nodes import Condition as C

CERTIFICATE_FIELD, KEY_FIELD, PASSWORD_FIELD = "ssl_certificate_location", "ssl_key_location", "ssl_key_password"
PRIVATE_KEY_LABELS = ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY",
                      "DSA PRIVATE KEY")
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.DOTALL)
_ENCRYPTED_HEADER = re.compile(rb"^Proc-Type:\s*4,\s*ENCRYPTED\s*$", re.MULTILINE)


class TlsMaterialProblem(ValueError):
    """Why a TLS file cannot be used: ``field`` is the security key to blame (``ssl_key_location``,
    ``ssl_key_password``, ...), ``condition`` names the case, ``detail`` says it for people."""

    def __init__(self, field: str, condition: C, detail: str):
        super().__init__(detail)
        self.field, self.condition, self.detail = field, condition, detail


class TlsFileChanged(ScgError):
    """A TLS file read when a client's options are built (after the pipeline was validated) no
    longer gives what validation found: replaced, edited or removed since. Exit 1; the message
    names the field and the problem's condition, never key material or a password."""

    condition = "TLS_FILE_CHANGED"
    exit_category = ExitCategory.RUNTIME

    @classmethod
    def of(cls, section: str, field: str, condition: str, detail: str) -> "TlsFileChanged":
        return cls(f"{section}.{field}: [{condition}] {detail}; the file changed since the pipeline was "
                   "loaded: `scg validate FILE` checks it again")


def pem_labels(pem: bytes) -> list[str]:
    """The labels of the PEM blocks in ``pem`` (``CERTIFICATE``, ``PRIVATE KEY``...), in order."""
    return [match.group(1).decode("ascii") for match in _PEM_BLOCK.finditer(pem)]


def certificate_blocks(pem: bytes, field: str) -> list[bytes]:
    """Every ``CERTIFICATE`` PEM block of ``pem``, in order (at least one), unparsed; other blocks
    are ignored, as the clients ignore them."""
    blocks = [match.group(0) for match in _PEM_BLOCK.finditer(pem) if match.group(1) == b"CERTIFICATE"]
    if not blocks:
        raise TlsMaterialProblem(field, C.NOT_A_CERTIFICATE,
                                 f"holds no certificate ({_found(pem)}); give a PEM file with a "
                                 "-----BEGIN CERTIFICATE----- block")
    return blocks


def read_client_certificate(pem: bytes, field: str = CERTIFICATE_FIELD) -> x509.Certificate:
    """The first certificate of ``pem`` (the client's own), parsed."""
    blocks = certificate_blocks(pem, field)
    try:
        return x509.load_pem_x509_certificate(blocks[0])
    except ValueError:
        raise TlsMaterialProblem(field, C.NOT_A_CERTIFICATE,
                                 f"the first certificate (of {len(blocks)}), the client's own, is not a valid "
                                 "X.509 certificate (damaged or not a certificate)") from None


def read_private_key(pem: bytes, password: str | None) -> PrivateKeyTypes:
    """The first private key of ``pem``, decrypted with ``password`` when it is encrypted (a
    password for a key that is not encrypted is not used)."""
    block = _first_private_key_block(pem)
    encrypted = _is_encrypted(block)
    if encrypted and password is None:
        raise TlsMaterialProblem(KEY_FIELD, C.CLIENT_KEY_PASSWORD_MISSING,
                                 "the private key is encrypted; give its password as ssl_key_password "
                                 "(${ENV_VAR}) or ssl_key_password_file")
    try:
        return serialization.load_pem_private_key(block, password.encode() if encrypted else None)
    except UnsupportedAlgorithm:
        raise TlsMaterialProblem(KEY_FIELD, C.NOT_A_PRIVATE_KEY,
                                 "the private key uses an algorithm or encryption this machine's "
                                 "cryptography library does not support") from None
    except ValueError:
        if encrypted:
            raise TlsMaterialProblem(PASSWORD_FIELD, C.CLIENT_KEY_PASSWORD_WRONG,
                                     "does not decrypt the private key in ssl_key_location "
                                     "(a wrong password, or a damaged key)") from None
        raise TlsMaterialProblem(KEY_FIELD, C.NOT_A_PRIVATE_KEY,
                                 "the private key block does not parse (damaged, or not a key)") from None


def check_client_pair(certificate: x509.Certificate, key: PrivateKeyTypes) -> None:
    """Raise ``CLIENT_KEY_MISMATCH`` unless ``key`` belongs to the client ``certificate``."""
    if _public_der(certificate.public_key()) != _public_der(key.public_key()):
        raise TlsMaterialProblem(KEY_FIELD, C.CLIENT_KEY_MISMATCH,
                                 "the private key does not belong to the certificate in "
                                 f"ssl_certificate_location ({certificate.subject.rfc4514_string()}); "
                                 "give the key the certificate was issued for")


def java_client_key(pem: bytes, password: str | None) -> str:
    """The first private key of ``pem`` as unencrypted PKCS#8 PEM text (see the module docstring)."""
    key = read_private_key(pem, password)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode("ascii")


def _first_private_key_block(pem: bytes) -> bytes:
    for match in _PEM_BLOCK.finditer(pem):
        if match.group(1).decode("ascii") in PRIVATE_KEY_LABELS:
            return match.group(0)
    raise TlsMaterialProblem(KEY_FIELD, C.NOT_A_PRIVATE_KEY,
                             f"holds no private key ({_found(pem)}); give the PEM file with the client "
                             "certificate's private key (-----BEGIN PRIVATE KEY----- or similar)")


def _is_encrypted(block: bytes) -> bool:
    return block.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") or bool(_ENCRYPTED_HEADER.search(block))


def _found(pem: bytes) -> str:
    labels = pem_labels(pem)
    return f"found: {', '.join(dict.fromkeys(labels))}" if labels else "no complete PEM block"


def _public_der(public_key) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
