"""Tables, dead letters and checkpoints on a real S3-compatible server (s3proxy on loopback), with
one ``storage:`` section feeding both deltalake and Spark's s3a: members as real processes and
in-process runners against a real broker, checked through delta-spark (docs/DESIGN.md invariants
3 and 5), and the named errors for a storage that is down, refuses credentials or is configured
unsafely."""
from __future__ import annotations

import os
import socket
import subprocess
import textwrap
import threading
import uuid
from pathlib import Path

import pytest
from deltalake import DeltaTable

from groupmgr.core import TopicPartition
from pipelines.config import load_pipeline
from pipelines.local.local_kafka import free_port
from pipelines.runtime.install_paths import PROJECT_ROOT
from pipelines.runtime.runner import PipelineRunner
from sinks.txn_table import read_recorded_offsets
from tests.e2e.harness import MemberProcess
from tests.support.kafka_data import create_topic, delta_coordinates, json_events, log_end_offsets, produce
from tests.support.member_group import owned_once_by_all, stop_all
from tests.support.s3_server import SECRET_KEY, S3Server
from tests.support.static_member import StaticMember
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
SCG = str(PROJECT_ROOT / "bin" / "scg")
PARTITIONS = 6
WRONG_SECRET = "not-the-secret-4c2a9e"


def _bucket(s3: S3Server) -> str:
    """A fresh bucket per test, so no Hadoop FileSystem cached for another bucket is reused."""
    return s3.make_bucket(f"scg-{uuid.uuid4().hex[:12]}")


def _pipeline(path: Path, s3: S3Server, bootstrap: str, topic: str, name: str, bucket: str,
              sink_extra: str = "", endpoint: str | None = None, storage_extra: str = "") -> Path:
    """A pipeline whose table, dead letters and checkpoints all live in ``bucket`` (s3a://)."""
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        kafka:
          bootstrap_servers: {bootstrap}
        topics: [{topic}]
        group:
          id: {name}
          session_timeout: 6s
          heartbeat_interval: 500ms
        source:
          starting_offsets: earliest
        format: {{type: json, schema: "id BIGINT, name STRING"}}
        sink:
          path: s3a://{bucket}/table
          dead_letter_path: s3a://{bucket}/dead
        """) + sink_extra + textwrap.dedent(f"""\
        trigger:
          processing_time: 500ms
        checkpoint_root: s3a://{bucket}/checkpoints
        """) + s3.storage_yaml(endpoint=endpoint) + storage_extra)
    return path


def _load(path: Path, secret: str = SECRET_KEY):
    return load_pipeline(path, env={**os.environ, **S3Server.credentials_env(secret=secret)})


def _table_reached(config, ends: dict[TopicPartition, int]) -> bool:
    """Every partition recorded at or past ``ends`` in the S3 table (read by deltalake)."""
    recorded = read_recorded_offsets(config.sink.path, config.name, ends,
                                     config.storage.delta_storage_options())
    return bool(recorded) and all((recorded[tp] or 0) >= end for tp, end in ends.items())


def _spark_reads_storage(spark, config) -> None:
    """The test session's Hadoop configuration gets the storage section's fs.s3a.* settings
    (and fs.s3.impl), set at runtime as a user would on an existing session."""
    settings = config.storage.hadoop_settings()
    assert "fs.s3.impl" in settings and settings["fs.s3a.path.style.access"] == "true"
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in settings.items():
        hadoop.set(key, value)


def _assert_exact(spark, path: str, produced: set) -> None:
    rows = delta_coordinates(spark, path)
    assert len(rows) == len(set(rows)), "duplicate (topic, partition, offset) rows"
    assert set(rows) == produced, f"missing {len(produced - set(rows))}, extra {len(set(rows) - produced)}"


def test_two_member_processes_write_one_s3_table_exactly_once(bootstrap, spark, s3, tmp_path, unique_name):
    topic = unique_name
    create_topic(bootstrap, topic, PARTITIONS)
    produced = produce(bootstrap, topic, json_events(600))
    bucket = _bucket(s3)
    path = _pipeline(tmp_path / "pipeline.yaml", s3, bootstrap, topic, unique_name, bucket)
    config = _load(path)
    members = [MemberProcess(n, path, tmp_path, env=S3Server.credentials_env()) for n in ("a", "b")]
    try:
        wait_until(lambda: owned_once_by_all(members, PARTITIONS), 600, "two members sharing 6 partitions")
        seen = [len(member.lines) for member in members]
        produced |= produce(bootstrap, topic, json_events(600, start=600))  # both own partitions now
        ends = log_end_offsets(produced)
        wait_until(lambda: owned_once_by_all(members, PARTITIONS) and _table_reached(config, ends), 600,
                   "the S3 table to hold every produced record")
        for member, after in zip(members, seen):  # each wrote batches of its own share
            member.wait_for(r"batch \d+: [1-9]", 120, after=after)
        # The running queries' checkpoints went through Spark's s3a into the bucket (a clean stop
        # removes them again), not to a local directory.
        offset_logs = {p.parent.parent.name for p in (s3.data / bucket / "checkpoints").rglob("offsets/*")
                       if p.is_file()}
        assert len(offset_logs) >= 2, f"checkpoint offset logs in the bucket: {offset_logs}"
    finally:
        codes = stop_all(members)
    assert codes == [0, 0], "\n".join(member.tail() for member in members)

    _spark_reads_storage(spark, config)
    _assert_exact(spark, config.sink.path, produced)
    assert spark.read.format("delta").load(config.sink.dead_letter_path).count() == 0
    for member in members:
        log = member.log_path.read_text()
        assert SECRET_KEY not in log and SECRET_KEY not in "\n".join(member.lines), \
            f"{member.name}'s output shows the secret key"


def test_partitioned_s3_table_reads_and_prunes_through_delta_spark(bootstrap, spark, s3, tmp_path, unique_name):
    topic = unique_name
    create_topic(bootstrap, topic, 3)
    produced = produce(bootstrap, topic, json_events(300))
    bucket = _bucket(s3)
    config = _load(_pipeline(tmp_path / "pipeline.yaml", s3, bootstrap, topic, unique_name, bucket,
                             sink_extra="  partition_by: [partition]\n"))
    partitions = [TopicPartition(topic, p) for p in range(3)]
    ends = log_end_offsets(produced)
    runner = PipelineRunner.open(config, spark, out=lambda _: None,
                                 member_factory=lambda cfg, listener: StaticMember(listener, partitions))
    bound = threading.Event()
    timer = threading.Timer(600, bound.set)  # the hang guard; the test fails below if it fired
    timer.start()
    try:
        runner.run(bound, until=lambda: _table_reached(config, ends))
    finally:
        timer.cancel()
    assert _table_reached(config, ends), "the runner did not write every record within 600 s"

    table = DeltaTable(config.sink.path, storage_options=config.storage.delta_storage_options())
    assert table.metadata().partition_columns == ["partition"]
    assert {p.name for p in (s3.data / bucket / "table").iterdir() if p.name.startswith("partition=")} \
        == {"partition=0", "partition=1", "partition=2"}

    _spark_reads_storage(spark, config)
    _assert_exact(spark, config.sink.path, produced)
    one = spark.read.format("delta").load(config.sink.path).where("partition = 1")
    assert {(r.topic, r.partition, r.offset) for r in one.select("topic", "partition", "offset").collect()} \
        == {c for c in produced if c[1] == 1}
    files = one.inputFiles()
    assert files and all("/partition=1/" in f for f in files), f"partition filter not pruned: {files}"
    names = {r.id: r.name for r in one.collect()}
    assert names and all(name == f"n{i}" for i, name in names.items())


# The hang guard of an `scg run` that must fail at start. Not a timing assertion (docs/DESIGN.md):
# the start includes a local Spark session, which takes 30 s on an idle 2-core machine and over
# 120 s on a loaded one.
HANG_GUARD_S = 400


def _scg(*args, env: dict[str, str], timeout: float = HANG_GUARD_S):
    return subprocess.run([SCG, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("scg: error:")]


class SilentEndpoint:
    """A hung server: accepts connections and never answers; counts the connections."""

    def __init__(self):
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(128)
        self._server.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                self.accepted.append(self._server.accept()[0])
            except TimeoutError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for conn in [*self.accepted, self._server]:
            conn.close()


@pytest.fixture
def silent_endpoint():
    endpoint = SilentEndpoint()
    yield endpoint
    endpoint.close()


@pytest.mark.parametrize("fault", ["endpoint_down", "endpoint_silent", "wrong_secret", "missing_bucket"])
def test_unusable_storage_is_a_named_error_before_joining(fault, bootstrap, s3, tmp_path, unique_name, request):
    """``scg run`` ends with exit 1 and one ``[STORAGE_UNAVAILABLE]`` line: no traceback, no
    secret, nothing joins the group. A hung endpoint is given up after its first unanswered request
    (the start-up check's retry bound, half the request timeout the options set: 5 s here), not
    retried for deltalake's default three minutes."""
    topic = unique_name
    create_topic(bootstrap, topic, 1)
    bucket = f"scg-missing-{uuid.uuid4().hex[:8]}" if fault == "missing_bucket" else _bucket(s3)
    silent = request.getfixturevalue("silent_endpoint") if fault == "endpoint_silent" else None
    endpoint = {"endpoint_down": f"http://127.0.0.1:{free_port()}",
                "endpoint_silent": silent and silent.url}.get(fault)
    secret = WRONG_SECRET if fault == "wrong_secret" else SECRET_KEY
    path = _pipeline(tmp_path / "pipeline.yaml", s3, bootstrap, topic, unique_name, bucket, endpoint=endpoint,
                     storage_extra="  options: {timeout: 5s}\n" if silent is not None else "")

    result = _scg("run", path, env=S3Server.credentials_env(secret=secret))

    if silent is not None:  # deltalake's default retries would open one connection per attempt
        assert 1 <= len(silent.accepted) <= 2, f"{len(silent.accepted)} connections to the hung endpoint"
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    errors = _error_lines(result.stderr)
    assert len(errors) == 1 and "[STORAGE_UNAVAILABLE]" in errors[0], result.stderr[-3000:]
    assert "Traceback" not in output
    assert SECRET_KEY not in output and WRONG_SECRET not in output
    assert "joining consumer group" not in output
    assert not (s3.data / bucket / "table").exists()


def test_unsafe_storage_option_is_refused_by_validate(s3, tmp_path, unique_name):
    path = _pipeline(tmp_path / "pipeline.yaml", s3, "127.0.0.1:9", unique_name, unique_name, "scg-unsafe",
                     storage_extra="  options: {aws_conditional_put: disabled}\n")

    result = _scg("validate", path, env=S3Server.credentials_env())

    assert result.returncode == 2, result.stdout + result.stderr
    errors = [text for text in result.stderr.splitlines() if "[UNSAFE_STORAGE_OPTION]" in text]
    assert len(errors) == 1, result.stderr
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "aws_conditional_put" in text)
    assert f"pipeline.yaml:{line}: storage.options" in errors[0], errors[0]
    assert "Traceback" not in result.stderr and SECRET_KEY not in result.stdout + result.stderr
