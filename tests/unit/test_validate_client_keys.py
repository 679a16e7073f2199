"""``scg validate`` and ``scg run`` refuse unusable TLS files with exit 2 and one line naming file,
line, field and condition, before any client is made (real keys and certificates made in the
test); the usable forms load, and Spark's Java client gets the key unencrypted as PKCS#8."""
from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from pipelines.cli.main import main
from pipelines.config import Condition, ConfigError, load_pipeline, main_validate
from pipelines.config.client_keys import pem_labels
from tests.support.tls_material import Authority, certificate_pem, key_pem, new_key, write_client_files

PASSWORD = "key-password-canary-7"
LINES = {"ssl_ca_location": 7, "ssl_certificate_location": 8, "ssl_key_location": 9, "ssl_key_password_file": 10}


def _pipeline(directory: Path, files, password: str | None = None, client_config: str = "") -> Path:
    """A pipeline whose TLS fields sit on the lines of :data:`LINES`."""
    password_line = "    ssl_key_password_file: key.password\n" if password is not None else ""
    if password is not None:
        (directory / "key.password").write_text(password + "\n")
    path = directory / "pipeline.yaml"
    path.write_text(
        "name: keys\n"
        "kafka:\n"
        "  bootstrap_servers: 127.0.0.1:9\n"
        "  security:\n"
        "    protocol: SSL\n"
        "    # the TLS files\n"
        f"    ssl_ca_location: {files.ca_file}\n"
        f"    ssl_certificate_location: {files.cert_file}\n"
        f"    ssl_key_location: {files.key_file}\n"
        f"{password_line}"
        f"{client_config}"
        "topics: [t]\n"
        "group: {id: g}\n"
        "format: {schema: \"id BIGINT\"}\n"
        "sink: {path: out}\n")
    return path


def _other_pair_key(directory, files, password):
    files.key_file.write_bytes(key_pem(new_key()))
    return None


def _encrypted_without_password(directory, files, password):
    files.key_file.write_bytes(key_pem(new_key(), "pkcs8", PASSWORD))
    return None


def _wrong_password(directory, files, password):
    key = new_key("rsa")
    files.cert_file.write_bytes(certificate_pem(Authority.make().issue("c", key.public_key())))
    files.key_file.write_bytes(key_pem(key, "traditional", "another-password"))
    return PASSWORD


def _ca_certificate_as_key(directory, files, password):
    files.key_file.write_bytes(files.ca_file.read_bytes())
    return None


def _garbage_key(directory, files, password):
    files.key_file.write_bytes(b"-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    return None


def _garbage_certificate(directory, files, password):
    files.cert_file.write_bytes(b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    return None


def _key_as_ca(directory, files, password):
    files.ca_file.write_bytes(files.key_file.read_bytes())
    return None


def _key_too_small_for_openssl(directory, files, password):
    """cryptography reads a 512-bit RSA key; OpenSSL's security level refuses it (made with the
    openssl command line: cryptography makes no key under 1024 bits)."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:512", "-nodes", "-keyout", str(files.key_file),
                    "-out", str(files.cert_file), "-subj", "/CN=weak", "-days", "2"],
                   check=True, capture_output=True)
    return None


CASES = [
    (_other_pair_key, Condition.CLIENT_KEY_MISMATCH, "ssl_key_location"),
    (_encrypted_without_password, Condition.CLIENT_KEY_PASSWORD_MISSING, "ssl_key_location"),
    (_wrong_password, Condition.CLIENT_KEY_PASSWORD_WRONG, "ssl_key_password_file"),
    (_ca_certificate_as_key, Condition.NOT_A_PRIVATE_KEY, "ssl_key_location"),
    (_garbage_key, Condition.NOT_A_PRIVATE_KEY, "ssl_key_location"),
    (_garbage_certificate, Condition.NOT_A_CERTIFICATE, "ssl_certificate_location"),
    (_key_as_ca, Condition.NOT_A_CERTIFICATE, "ssl_ca_location"),
    (_key_too_small_for_openssl, Condition.TLS_FILE_REFUSED, "ssl_certificate_location"),
]


@pytest.fixture(params=CASES, ids=lambda case: case[0].__name__.strip("_"))
def broken(request, tmp_path: Path):
    """(pipeline file, condition, field): a pipeline with one thing wrong in its TLS files."""
    fault, condition, field = request.param
    files = write_client_files(tmp_path / "tls")
    password = fault(tmp_path, files, None)
    return _pipeline(tmp_path, files, password), condition, field


def test_the_loader_names_the_condition_line_and_field(broken):
    path, condition, field = broken
    with pytest.raises(ConfigError) as info:
        load_pipeline(path, env={})
    assert len(info.value.errors) == 1
    error = info.value
    assert (error.condition, error.line, error.field_path) == (condition, LINES[field], f"kafka.security.{field}")
    assert PASSWORD not in str(error) and "PRIVATE KEY-----\n" not in str(error)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_validate_and_run_exit_2_with_one_line(broken, command, capsys):
    """``scg run`` loads its file through the same loader: it stops before anything starts."""
    path, condition, field = broken
    code = main([command, str(path)])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"{path}:{LINES[field]}: kafka.security.{field}: [{condition}]" in lines[0]
    assert "Traceback" not in out + err and PASSWORD not in out + err


def test_the_key_and_the_certificate_problems_of_one_file_are_reported_together(tmp_path: Path, capsys):
    files = write_client_files(tmp_path / "tls")
    files.ca_file.write_bytes(key_pem(new_key()))  # no certificate block
    files.key_file.write_bytes(key_pem(new_key()))
    assert main_validate(_pipeline(tmp_path, files)) == 2
    assert [line.split("[")[1].split("]")[0] for line in capsys.readouterr().err.splitlines()] == [
        "NOT_A_CERTIFICATE", "CLIENT_KEY_MISMATCH"]


@pytest.mark.parametrize("kind, form", [("ec", "pkcs8"), ("rsa", "traditional"), ("ec", "traditional")])
@pytest.mark.parametrize("password", [None, PASSWORD])
def test_usable_keys_load_and_spark_gets_them_unencrypted_as_pkcs8(tmp_path: Path, kind, form, password):
    files = write_client_files(tmp_path / "tls", kind=kind, form=form, password=password)
    kafka = load_pipeline(_pipeline(tmp_path, files, password), env={}).kafka
    spark = kafka.spark_kafka_options()
    assert pem_labels(spark["kafka.ssl.keystore.key"].encode()) == ["PRIVATE KEY"]
    key = serialization.load_pem_private_key(spark["kafka.ssl.keystore.key"].encode(), None)
    certificate_key = serialization.load_pem_private_key(files.key_file.read_bytes(),
                                                         password.encode() if password else None)
    assert key.private_numbers() == certificate_key.private_numbers()
    assert "kafka.ssl.key.password" not in spark  # the Java client is given no password for it
    assert spark["kafka.ssl.keystore.certificate.chain"] == files.cert_file.read_text()
    # the other clients read the file itself, with its password
    assert kafka.confluent_config()["ssl.key.location"] == str(files.key_file)
    assert kafka.confluent_config().get("ssl.key.password") == password
    assert kafka.kafka_python_kwargs().get("ssl_password") == password


def test_a_password_given_with_an_unencrypted_key_is_accepted_and_unused(tmp_path: Path):
    """librdkafka and Python's ssl do not use it, and Spark gets no key password: a password
    shared by several pipelines does no harm."""
    files = write_client_files(tmp_path / "tls")
    kafka = load_pipeline(_pipeline(tmp_path, files, PASSWORD), env={}).kafka
    assert kafka.confluent_config()["ssl.key.password"] == PASSWORD
    key = serialization.load_pem_private_key(kafka.spark_kafka_options()["kafka.ssl.keystore.key"].encode(), None)
    assert key.private_numbers() == serialization.load_pem_private_key(files.key_file.read_bytes(),
                                                                       None).private_numbers()


def _openssl_verdict(ca_file: Path) -> bool:
    """Whether both TLS stacks on the driver load ``ca_file`` as a CA bundle."""
    from pipelines.runtime.client_creation import librdkafka_refusal

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(str(ca_file))
    except ssl.SSLError:
        return False
    return librdkafka_refusal({"security.protocol": "SSL", "ssl.ca.location": str(ca_file)}) is None


@pytest.mark.parametrize("second", [
    b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n",        # damaged
    b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
])
def test_a_ca_bundle_is_judged_by_the_tls_stacks_not_by_cryptography(tmp_path: Path, second: bytes):
    """Only the client's own certificate is parsed with cryptography; a CA bundle's blocks are
    loaded by OpenSSL (librdkafka, Python's ssl), whose verdict stands: accepted, or
    TLS_FILE_REFUSED on ssl_ca_location, never NOT_A_CERTIFICATE."""
    files = write_client_files(tmp_path / "tls")
    files.ca_file.write_bytes(files.ca_file.read_bytes() + second)
    path = _pipeline(tmp_path, files)
    if _openssl_verdict(files.ca_file):
        assert load_pipeline(path, env={}).kafka.security.ssl_ca_location == str(files.ca_file)
        return
    with pytest.raises(ConfigError) as info:
        load_pipeline(path, env={})
    assert (info.value.condition, info.value.field_path) == (Condition.TLS_FILE_REFUSED,
                                                             "kafka.security.ssl_ca_location")


def test_the_tls_probe_gets_the_ssl_settings_of_client_config(tmp_path: Path, monkeypatch):
    """librdkafka loads the files with the pipeline's ssl.providers, ssl.engine.*... (a key that
    needs ``ssl.providers: legacy,default`` loads with it); Java-only and non-TLS entries are not
    offered, and the password is masked in what it says."""
    from pipelines.config import tls_file_checks
    from pipelines.runtime.client_creation import librdkafka_refusal

    offered = []

    def spy(settings):
        offered.append(dict(settings))
        return librdkafka_refusal(settings)

    monkeypatch.setattr(tls_file_checks, "librdkafka_refusal", spy)
    files = write_client_files(tmp_path / "tls", password=PASSWORD)
    client_config = ("  client_config:\n    ssl.providers: default\n    ssl.cipher.suites: HIGH\n"
                     "    ssl.truststore.type: PEM\n    request.timeout.ms: '30000'\n")
    load_pipeline(_pipeline(tmp_path, files, PASSWORD, client_config), env={})
    [settings] = offered
    assert settings["ssl.providers"] == "default" and settings["ssl.cipher.suites"] == "HIGH"
    assert "ssl.truststore.type" not in settings and "request.timeout.ms" not in settings
    assert settings["ssl.key.location"] == str(files.key_file) and settings["ssl.key.password"] == PASSWORD


def test_a_key_that_no_longer_reads_when_spark_options_are_built_is_one_named_line(tmp_path: Path):
    from groupmgr.core import ExitCategory
    from pipelines.config.client_keys import TlsFileChanged

    files = write_client_files(tmp_path / "tls", password=PASSWORD)
    kafka = load_pipeline(_pipeline(tmp_path, files, PASSWORD), env={}).kafka
    files.key_file.write_bytes(key_pem(new_key(), "pkcs8", "another-" + PASSWORD))
    with pytest.raises(TlsFileChanged) as info:
        kafka.spark_kafka_options()
    error = info.value
    assert error.exit_category == ExitCategory.RUNTIME and error.condition == "TLS_FILE_CHANGED"
    assert "kafka.security.ssl_key_password: [CLIENT_KEY_PASSWORD_WRONG]" in error.headline()
    assert "\n" not in error.headline() and PASSWORD not in error.headline() and "PRIVATE KEY" not in str(error)
    files.key_file.unlink()
    with pytest.raises(TlsFileChanged) as info:
        kafka.spark_kafka_options()
    assert "kafka.security.ssl_key_location: [FILE_NOT_READABLE]" in info.value.headline()
