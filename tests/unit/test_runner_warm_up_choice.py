"""How long an scg-kafka member rehearses before it joins (PipelineRunner._warm_up_rounds, pure:
the group's members come from a fake probe, as their group.instance.id)."""
from types import SimpleNamespace

from pipelines.runtime.runner import PipelineRunner


def _rounds(members, limit_ms: int = 60_000, trigger_ms: int = 500, instance_id: str | None = None,
            backlog: int | None = 0, per_batch: int = 500_000):
    runner = SimpleNamespace(
        probe=SimpleNamespace(group_members=lambda group_id: members, group_backlog=lambda group_id: backlog),
        config=SimpleNamespace(group=SimpleNamespace(id="g", instance_id=instance_id),
                               trigger=SimpleNamespace(processing_time_ms=trigger_ms),
                               source=SimpleNamespace(warm_up_limit_ms=limit_ms, max_offsets_per_trigger=per_batch)))
    return PipelineRunner._warm_up_rounds(runner)


def test_while_others_read_the_group_s_partitions_it_rehearses_up_to_the_limit():
    rounds, why = _rounds(members=(None, "static-b"), limit_ms=45_000)
    assert rounds.max_seconds == 45.0 and rounds.max_batches > 1 and rounds.trigger_s == 0.5
    assert why.startswith("the group's 2 member(s) read its partitions meanwhile") and why.endswith("at most 45s")


def test_an_empty_group_waits_for_nobody_one_batch():
    rounds, why = _rounds(members=())
    assert rounds.max_batches == 1 and why == "the group has no member: one batch"


def test_a_group_the_brokers_did_not_describe_is_taken_as_empty():
    rounds, why = _rounds(members=None)
    assert rounds.max_batches == 1 and "did not describe" in why


def test_a_static_member_restarting_within_its_session_rehearses_one_batch():
    # its partitions stay with its instance id until it rejoins: nobody reads them meanwhile
    rounds, why = _rounds(members=("static-a", None), instance_id="static-a")
    assert rounds.max_batches == 1 and "'static-a'" in why
    rounds, _ = _rounds(members=("static-b", None), instance_id="static-a")
    assert rounds.max_batches > 1


def test_a_group_more_than_a_batch_behind_is_joined_after_one_batch():
    # members started together over a backlog: the others share it at once, not after a minute
    rounds, why = _rounds(members=(None,), backlog=1_200_000, per_batch=500_000)
    assert rounds.max_batches == 1
    assert why == "the group is 1,200,000 records behind, more than a batch reads (500,000): one batch, to share them sooner"


def test_a_backlog_one_batch_reads_or_an_unknown_one_does_not_cut_the_warm_up():
    for backlog in (500_000, 12, None):
        rounds, _ = _rounds(members=(None,), backlog=backlog, per_batch=500_000)
        assert rounds.max_batches > 1, backlog
