"""How long an scg-kafka member rehearses before it joins (warm_up.warm_up_rounds and who_waits,
pure: the group's members, as their group.instance.id, and its backlog come from a fake probe,
its committed offsets from a fake member)."""
import threading
from types import SimpleNamespace

from groupmgr.core import TopicPartition
from groupmgr.offsets import OffsetAndMetadata
from pipelines.runtime.warm_up import WarmUpContext, warm_up_rounds


def _context(members=(None,), backlog: int | None = 0, limit_ms: int = 60_000, trigger_ms: int = 500,
             instance_id: str | None = None, per_batch: int = 500_000, topics=("t",), asked=None,
             offsets_error=None, pattern=None) -> WarmUpContext:
    committed = {} if backlog is None else {TopicPartition(t, 0): 7 for t in topics} | {TopicPartition("other", 0): 3}

    def group_offsets(timeout_s):
        if isinstance(offsets_error, Exception):
            raise offsets_error
        return {tp: OffsetAndMetadata(offset, "delta:12", leader_epoch=5) for tp, offset in committed.items()}

    def probe_backlog(offsets):
        if asked is not None:
            asked.append(dict(offsets))
        return backlog

    def group_members(group_id, patience_s, sleep):
        if isinstance(members, Exception):
            raise members
        return members

    config = SimpleNamespace(group=SimpleNamespace(id="g", instance_id=instance_id), topics=topics,
                             topic_pattern=pattern, trigger=SimpleNamespace(processing_time_ms=trigger_ms),
                             source=SimpleNamespace(warm_up_limit_ms=limit_ms, max_offsets_per_trigger=per_batch))
    probe = SimpleNamespace(group_members=group_members, backlog=probe_backlog, timeout_s=5.0)
    return WarmUpContext(spark=None, config=config, tables=None, probe=probe, group_offsets=group_offsets,
                         note=lambda line: None)


def _rounds(**settings):
    return warm_up_rounds(_context(**settings), threading.Event().wait)


def test_while_others_read_the_group_s_partitions_it_rehearses_up_to_the_limit():
    asked = []
    rounds, why = _rounds(members=(None, "static-b"), backlog=12, limit_ms=45_000, asked=asked)
    assert rounds.max_seconds == 45.0 and rounds.max_batches > 1 and rounds.trigger_s == 0.5
    assert why.startswith("the group's 2 member(s) read its partitions meanwhile") and why.endswith("within 45s")
    assert asked == [{TopicPartition("t", 0): 7}]  # the committed offsets of the pipeline's topics only


def test_an_empty_group_is_joined_at_once():
    rounds, why = _rounds(members=())
    assert rounds is None and why == "the group has no member: nobody reads its partitions meanwhile"
    assert _rounds(members=(), limit_ms=0)[0] is None  # whatever the limit


def test_a_group_the_brokers_did_not_describe_is_joined_after_one_batch():
    rounds, why = _rounds(members=None)
    assert rounds.max_batches == 1 and "did not describe" in why


def test_a_static_member_restarting_within_its_session_joins_at_once():
    # its partitions stay with its instance id until it rejoins: nobody reads them meanwhile
    rounds, why = _rounds(members=("static-a", None), instance_id="static-a")
    assert rounds is None and "'static-a'" in why and why.endswith("nobody reads its partitions meanwhile")
    rounds, _ = _rounds(members=("static-b", None), instance_id="static-a")
    assert rounds.max_batches > 1


def test_a_group_more_behind_than_its_members_read_in_a_batch_each_is_joined_after_one_batch():
    # members started together over a backlog: the others share it at once, not after a minute
    rounds, why = _rounds(members=(None, None), backlog=1_200_000, per_batch=500_000)
    assert rounds.max_batches == 1
    assert why == ("the group is 1,200,000 records behind, more than its 2 member(s) read in a batch each "
                   "(1,000,000): one batch")
    rounds, _ = _rounds(members=(None, None, None), backlog=1_200_000, per_batch=500_000)
    assert rounds.max_batches > 1


def test_an_unknown_backlog_a_new_group_is_joined_after_one_batch():
    rounds, why = _rounds(members=(None,), backlog=None)
    assert rounds.max_batches == 1 and "no committed offset yet" in why


def test_a_limit_of_zero_or_a_failed_check_is_one_batch():
    assert _rounds(limit_ms=0)[0].max_batches == 1
    rounds, why = _rounds(members=RuntimeError("boom"))
    assert rounds.max_batches == 1 and "could not be checked (RuntimeError)" in why


def test_a_pattern_subscription_counts_the_committed_topics_it_matches():
    asked = []
    _rounds(topics=(), pattern="oth.*", asked=asked)
    assert asked == [{TopicPartition("other", 0): 3}]
    rounds, why = _rounds(topics=(), pattern="oth")  # a whole-name match, as the member subscribes
    assert rounds.max_batches == 1 and "no committed offset yet" in why


def test_committed_offsets_the_brokers_did_not_give_are_joined_after_one_batch():
    rounds, why = _rounds(members=(None,), offsets_error=TimeoutError("no answer"))
    assert rounds.max_batches == 1 and "could not be checked (TimeoutError)" in why
