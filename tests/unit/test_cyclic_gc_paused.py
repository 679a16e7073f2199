"""kafka_range_reader.cyclic_gc_paused: the collector is off inside the block and as it was after."""
import gc

import pytest

from pipelines.runtime.kafka_range_reader import cyclic_gc_paused


@pytest.fixture(autouse=True)
def _restore_gc():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_inside_and_restored_after(enabled):
    (gc.enable if enabled else gc.disable)()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled


def test_the_collector_is_restored_when_the_block_raises():
    gc.enable()
    with pytest.raises(RuntimeError), cyclic_gc_paused():
        raise RuntimeError("a task failed")
    assert gc.isenabled()
