"""`scg validate --print FILE`: a valid file's resolved config as one YAML document on standard
output (the OK line a comment above it), every default filled in, paths resolved, every secret
``***`` whether it came from ``${ENV}`` or a ``*_file``; an invalid file prints nothing there."""
from __future__ import annotations

from pathlib import Path

import yaml

from pipelines.cli.main import main

CA_FILE = Path(__file__).parent / "config_cases" / "ca.pem"  # a real CA certificate (its key was discarded)
SASL_PASSWORD = "sasl-pw-from-env-7f3a"
STORAGE_SECRET = "storage-secret-from-file-91c2"
CLIENT_SECRET = "client-secret-from-env-4d5e"


def _write(tmp_path: Path) -> Path:
    (tmp_path / "s3.secret").write_text(STORAGE_SECRET + "\n")
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""\
name: orders
kafka:
  bootstrap_servers: 127.0.0.1:9093
  security:
    protocol: SASL_SSL
    sasl_mechanism: SCRAM-SHA-512
    sasl_username: alice
    sasl_password: ${{SCG_TEST_SASL_PASSWORD}}
    ssl_ca_location: {CA_FILE}
  client_config:
    sasl.oauthbearer.client.secret: ${{SCG_TEST_CLIENT_SECRET}}
topics: [orders]
group:
  id: orders-group
format:
  schema: "id BIGINT"
sink:
  path: out/orders
storage:
  endpoint: http://127.0.0.1:9000
  access_key_id: minio
  secret_access_key_file: s3.secret
""")
    return path


def test_print_shows_the_resolved_config_with_every_secret_masked(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("SCG_TEST_SASL_PASSWORD", SASL_PASSWORD)
    monkeypatch.setenv("SCG_TEST_CLIENT_SECRET", CLIENT_SECRET)
    path = _write(tmp_path)
    assert main(["validate", "--print", str(path)]) == 0
    out, err = capsys.readouterr()
    for secret in (SASL_PASSWORD, STORAGE_SECRET, CLIENT_SECRET):
        assert secret not in out and secret not in err
    assert out.startswith("# OK orders: ")
    printed = yaml.safe_load(out)  # the whole output is one YAML document
    assert printed["kafka"]["security"]["sasl_password"] == "***"
    assert printed["kafka"]["client_config"]["sasl.oauthbearer.client.secret"] == "***"
    assert printed["storage"]["secret_access_key"] == "***"
    # defaults filled in, paths resolved next to the file
    assert printed["group"]["session_timeout_ms"] == 10_000 and printed["group"]["assignors"] == ["range"]
    assert printed["trigger"] == {"processing_time_ms": 2000, "available_now": False}
    assert printed["sink"]["path"] == str(tmp_path / "out" / "orders")
    assert printed["checkpoint_root"] == str(tmp_path / "out" / "orders_checkpoints")
    assert printed["storage"]["path_style"] is True


def test_without_print_only_the_ok_line(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("SCG_TEST_SASL_PASSWORD", SASL_PASSWORD)
    monkeypatch.setenv("SCG_TEST_CLIENT_SECRET", CLIENT_SECRET)
    assert main(["validate", str(_write(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OK orders: ") and out.count("\n") == 1


def test_print_of_an_invalid_file_prints_its_problems_only(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("SCG_TEST_CLIENT_SECRET", CLIENT_SECRET)
    monkeypatch.delenv("SCG_TEST_SASL_PASSWORD", raising=False)
    assert main(["validate", "--print", str(_write(tmp_path))]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [f"{tmp_path / 'pipeline.yaml'}:8: kafka.security.sasl_password: [ENV_VAR_NOT_SET] "
                                "environment variable SCG_TEST_SASL_PASSWORD is not set"]


def test_print_of_several_files_is_one_document_each(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("SCG_TEST_SASL_PASSWORD", SASL_PASSWORD)
    monkeypatch.setenv("SCG_TEST_CLIENT_SECRET", CLIENT_SECRET)
    path = _write(tmp_path)
    assert main(["validate", "--print", str(path), str(path)]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [document["name"] for document in documents] == ["orders", "orders"]
