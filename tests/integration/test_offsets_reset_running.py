"""`scg offsets FILE reset --force` while a real pipeline member (Spark) runs: the member is named
and the reset refused without --force; with it, the member is fenced and removed from the group,
rejoins, and reads the partition again from the new offset, exactly once more (the rewind writes
the records between the new offset and the old one a second time; nothing else changes)."""
from __future__ import annotations

import threading

import pytest
from deltalake import DeltaTable

from pipelines.cli.main import main
from pipelines.config import load_pipeline
from pipelines.runtime.membership import group_member_factory
from pipelines.runtime.runner import PipelineRunner
from tests.integration.test_offsets_command import RECORDS, _produce
from tests.support.kafka_data import create_topic, write_pipeline
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
WAIT_S = 180


def test_forced_reset_reaches_a_running_member(bootstrap, spark, tmp_path, unique_name, capsys):
    topic = unique_name
    create_topic(bootstrap, topic, 2)
    _produce(bootstrap, topic, 2)
    path = write_pipeline(tmp_path / "p.yaml", bootstrap, topic, unique_name, tmp_path)
    config = load_pipeline(path)
    lines: list[str] = []
    runner = PipelineRunner.open(config, spark, out=lines.append,
                                 member_factory=lambda c, l: group_member_factory(c, l, metadata_max_age_ms=1000))
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: _offsets(config.sink.path, 0) == _offsets(config.sink.path, 1) == list(range(RECORDS)),
                   WAIT_S, "the first read")
        capsys.readouterr()
        refused = main(["offsets", str(path), "reset", "--to", "3", "--partitions", f"{topic}:0"])
        assert refused == 2 and "[RESET_GROUP_HAS_MEMBERS]" in capsys.readouterr().err

        assert main(["offsets", str(path), "reset", "--to", "3", "--partitions", f"{topic}:0", "--force"]) == 0
        again = sorted([*range(RECORDS), *range(3, RECORDS)])
        wait_until(lambda: _offsets(config.sink.path, 0) == again, WAIT_S, "partition 0 read again from offset 3")
        assert _offsets(config.sink.path, 1) == list(range(RECORDS))  # (a fenced member that was not
        # removed from the group would wait for a rebalance and never read partition 0 again)
    finally:
        stop.set()
        thread.join(120)
    assert not thread.is_alive()


def _offsets(table_path: str, partition: int) -> list[int]:
    """The offsets of ``partition``'s rows in the table, sorted (duplicates kept)."""
    try:
        table = DeltaTable(table_path).to_pyarrow_table(columns=["partition", "offset"])
    except Exception:  # noqa: BLE001 - not created yet
        return []
    return sorted(o for p, o in zip(table["partition"].to_pylist(), table["offset"].to_pylist()) if p == partition)
