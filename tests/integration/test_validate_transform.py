"""``scg validate`` rejects what ``scg run`` would about a transform's output:
it analyses the transform on a local Spark session, as ``open_tables`` does at run start, and
names the condition with file, line (the ``transform:`` key, or the ``partition_by`` item) and
field; exit 2. A file without a transform starts no Spark."""
from __future__ import annotations

import re
import subprocess

import pytest

from pipelines.runtime.install_paths import PROJECT_ROOT
from tests.support.kafka_data import write_pipeline

pytestmark = pytest.mark.integration
SCG = str(PROJECT_ROOT / "bin" / "scg")
PROGRESS = "analysing the transform"


def _validate(*paths) -> subprocess.CompletedProcess:
    return subprocess.run([SCG, "validate", *map(str, paths)], capture_output=True, text=True, timeout=600)


def _file(tmp_path, name: str, transform: str | None, partition_by: str = ""):
    extra = 'format: {type: json, schema: "id BIGINT, name STRING"}\n'
    if transform is not None:
        extra += "transform: |\n" + "".join(f"  {line}\n" for line in transform.splitlines())
    path = write_pipeline(tmp_path / f"{name}.yaml", "127.0.0.1:9", "t", name, tmp_path / name, extra)
    if partition_by:
        path.write_text(path.read_text().replace("  dead_letter_path:", f"  partition_by: [{partition_by}]\n"
                                                                      "  dead_letter_path:"))
    return path


def _line_of(path, prefix: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(prefix))


def _error_lines(result) -> list[str]:
    assert result.returncode == 2, result.stdout + result.stderr
    assert PROGRESS in result.stderr and "Traceback" not in result.stderr
    assert "SQLQueryContextLogger" not in result.stderr and "\tat org.apache" not in result.stderr
    return [line for line in result.stderr.splitlines() if re.match(r"^\S+\.yaml:\d+: ", line)]


REJECTED = [
    ("drops", "SELECT id, name FROM input", "", "TRANSFORM_DROPS_COORDINATES", "transform"),
    ("unresolved", "SELECT topic, partition, offset, nope FROM input", "", "TRANSFORM_INVALID", "transform"),
    ("syntax", "SELECT topic, partition, offset FROM input WHERE id >", "", "TRANSFORM_INVALID", "transform"),
    ("partition", "SELECT topic, partition, offset, id FROM input", "name", "PARTITION_COLUMN_NOT_IN_OUTPUT",
     "sink.partition_by[0]"),
]


def test_validate_names_what_run_would_reject_and_passes_a_good_transform(tmp_path):
    """One ``scg validate`` over several files (one Spark JVM): one error line per rejected file,
    "OK" for the good one, exit 2 because some are invalid."""
    expected = []
    for name, transform, partition_by, condition, field in REJECTED:
        path = _file(tmp_path, name, transform, partition_by)
        line = _line_of(path, "transform:") if field == "transform" else _line_of(path, "  partition_by:")
        expected.append(f"{path}:{line}: {field}: [{condition}] ")
    good = _file(tmp_path, "good", "SELECT topic, partition, offset, upper(name) AS name, key_bytes FROM input",
                 partition_by="partition")
    result = _validate(*[tmp_path / f"{case[0]}.yaml" for case in REJECTED], good)
    errors = _error_lines(result)
    assert len(errors) == len(REJECTED), result.stderr
    for error, start in zip(errors, expected):
        assert error.startswith(start), error
    assert result.stdout.startswith("OK ") and len(result.stdout.splitlines()) == 1, result.stdout


def test_a_file_without_a_transform_starts_no_spark(tmp_path):
    result = _validate(_file(tmp_path, "plain", None))
    assert result.returncode == 0, result.stdout + result.stderr
    assert PROGRESS not in result.stderr


def _routed_file(tmp_path, name: str, route: str, transform: str) -> object:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""\
name: {name}
kafka: {{bootstrap_servers: "127.0.0.1:9"}}
topics: [t]
group: {{id: {name}}}
format: {{type: json, schema: "id BIGINT, kind STRING"}}
sink:
  tables:
    - name: a
      path: {tmp_path / name / 'a'}
      route: {{where: "kind = 'a'"}}
    - name: b
      path: {tmp_path / name / 'b'}
      transform: {transform}
      route: {{where: "{route}"}}
""")
    return path


def test_validate_names_a_route_or_a_table_transform_that_run_would_reject(tmp_path):
    bad_route = _routed_file(tmp_path, "route", "nope = 1", "SELECT * FROM input")
    bad_transform = _routed_file(tmp_path, "shape", "kind = 'b'", "SELECT id FROM input")
    good = _routed_file(tmp_path, "good", "kind = 'b' AND id > 2", "SELECT topic, partition, offset, id FROM input")
    result = _validate(bad_route, bad_transform, good)
    errors = _error_lines(result)
    assert errors[0].startswith(f"{bad_route}:{_line_of(bad_route, '  tables:')}: sink.tables: [ROUTE_INVALID] ")
    assert "nope" in errors[0]
    line = _line_of(bad_transform, "      transform:")
    assert errors[1].startswith(f"{bad_transform}:{line}: sink.tables[1].transform: [TRANSFORM_DROPS_COORDINATES] ")
    assert len(errors) == 2 and result.stdout.startswith("OK "), result.stdout + result.stderr


def _upsert_file(tmp_path, name: str, key: str, order_by: str) -> object:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""\
name: {name}
kafka: {{bootstrap_servers: "127.0.0.1:9"}}
topics: [t]
group: {{id: {name}}}
format:
  type: json
  envelope: debezium
  schema: "before STRUCT<id: BIGINT>, after STRUCT<id: BIGINT>, op STRING, source STRUCT<lsn: BIGINT>"
sink:
  path: {tmp_path / name / 'table'}
  mode: upsert
  key: [{key}]
  order_by: {order_by}
""")
    return path


def test_validate_names_an_upsert_key_or_ordering_that_run_would_reject(tmp_path):
    bad_key = _upsert_file(tmp_path, "key", "lsn", "source.lsn")
    bad_order = _upsert_file(tmp_path, "order", "id", "source.scn")
    good = _upsert_file(tmp_path, "good", "id", "source.lsn")
    result = _validate(bad_key, bad_order, good)
    assert result.returncode == 2 and "analysing the upsert key and ordering" in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if re.match(r"^\S+\.yaml:\d+: ", line)]
    assert errors[0].startswith(f"{bad_key}:{_line_of(bad_key, '  key:')}: sink.key[0]: [UPSERT_INVALID] ")
    assert errors[1].startswith(f"{bad_order}:{_line_of(bad_order, '  order_by:')}: sink.order_by: [UPSERT_INVALID] ")
    assert len(errors) == 2 and result.stdout.startswith("OK "), result.stdout + result.stderr
