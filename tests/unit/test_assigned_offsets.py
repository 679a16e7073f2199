"""Planning of the assignment-following source: claims, ranges, admission control (pure)."""
import json

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.assigned_offsets import (INITIAL, Assignment, Claim, RateLimits, SourceOffset, batch_ranges,
                                                delay_batch, plan_next, prorate, task_groups)

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def assign(**claims):
    return Assignment({{"a": A, "b": B, "c": C}[k]: Claim(*v) for k, v in claims.items()})


def test_the_first_batch_reads_each_claim_from_its_start():
    plan = plan_next(INITIAL, assign(a=(1, 10), b=(1, 20)), {A: 15, B: 20})
    assert batch_ranges(INITIAL, plan.offset) == (OffsetRange("t", 0, 10, 15), OffsetRange("t", 1, 20, 20))
    assert plan.offset.starts == {A: 10, B: 20}


def test_a_partition_under_the_same_claim_goes_on_from_the_previous_end():
    first = plan_next(INITIAL, assign(a=(1, 10)), {A: 15}).offset
    second = plan_next(first, assign(a=(1, 10)), {A: 18}).offset
    assert second.starts == {}
    assert batch_ranges(first, second) == (OffsetRange("t", 0, 15, 18),)


def test_a_partition_that_joins_starts_at_its_claim_and_the_others_go_on():
    first = plan_next(INITIAL, assign(a=(1, 10)), {A: 15}).offset
    second = plan_next(first, assign(a=(1, 10), c=(2, 40)), {A: 16, C: 44}).offset
    assert batch_ranges(first, second) == (OffsetRange("t", 0, 15, 16), OffsetRange("u", 0, 40, 44))


def test_a_partition_that_leaves_is_not_in_the_next_batch():
    first = plan_next(INITIAL, assign(a=(1, 10), b=(1, 20)), {A: 15, B: 25}).offset
    second = plan_next(first, assign(a=(1, 10)), {A: 16, B: 30}).offset
    assert batch_ranges(first, second) == (OffsetRange("t", 0, 15, 16),)


def test_a_partition_claimed_again_starts_at_the_new_claim_not_the_old_end():
    """Given up after a batch that was not committed, then claimed back: the table's offset
    (the new claim's start) is behind the query's old end, and wins."""
    first = plan_next(INITIAL, assign(a=(1, 10)), {A: 15}).offset
    second = plan_next(first, assign(a=(3, 12)), {A: 17}).offset
    assert batch_ranges(first, second) == (OffsetRange("t", 0, 12, 17),)


def test_a_partition_the_brokers_did_not_answer_for_keeps_its_place():
    first = plan_next(INITIAL, assign(a=(1, 10), b=(1, 20)), {A: 15, B: 25}).offset
    second = plan_next(first, assign(a=(1, 10), b=(1, 20)), {A: 16}).offset
    assert batch_ranges(first, second) == (OffsetRange("t", 0, 15, 16), OffsetRange("t", 1, 25, 25))


def test_a_log_end_behind_the_source_is_reported_and_never_goes_back():
    first = plan_next(INITIAL, assign(a=(1, 10)), {A: 15}).offset
    plan = plan_next(first, assign(a=(1, 10)), {A: 3})
    assert plan.behind == {A: (15, 3)}
    assert plan.offset.end == {A: 15}


def test_the_offset_survives_spark_s_json_round_trip():
    offset = plan_next(INITIAL, assign(a=(1, 10), c=(2, 40)), {A: 15, C: 41}).offset
    assert SourceOffset.from_json(json.dumps(offset.to_dict())) == offset
    assert Assignment.from_json(assign(a=(1, 10)).to_json()) == assign(a=(1, 10))


def test_the_assignment_file_carries_the_application_s_cores_when_the_runner_says_them():
    claims = {A: Claim(1, 10)}
    assert Assignment.from_json(Assignment(claims, task_slots=8).to_json()) == Assignment(claims, 8)
    assert Assignment.from_json(Assignment(claims).to_json()).task_slots is None
    assert Assignment.from_json('{"claims": {}, "task_slots": 0}').task_slots == 1


def test_prorate_shares_the_cap_by_backlog_like_spark():
    begin = {A: 0, B: 0, C: 0}
    assert prorate(begin, {A: 900, B: 100, C: 0}, 100) == {A: 90, B: 10, C: 0}


def test_prorate_never_starves_a_partition_with_a_record():
    assert prorate({A: 0, B: 0}, {A: 10_000, B: 1}, 100) == {A: 99, B: 1}


def test_prorate_with_nothing_to_read_keeps_the_ends():
    assert prorate({A: 5}, {A: 5}, 100) == {A: 5}


def test_the_cap_applies_from_where_each_partition_stands():
    first = plan_next(INITIAL, assign(a=(1, 0)), {A: 10}).offset
    plan = plan_next(first, assign(a=(1, 0), b=(2, 100)), {A: 1010, B: 1100}, max_rows=100)
    assert batch_ranges(first, plan.offset) == (OffsetRange("t", 0, 10, 60), OffsetRange("t", 1, 100, 150))
    assert plan.ready(first) == 100


def test_min_rows_delays_until_enough_or_the_delay_passed():
    limits = RateLimits(min_rows=50, max_delay_ms=1000)
    assert delay_batch(10, limits, last_batch_ms=0, now_ms=500)
    assert not delay_batch(50, limits, last_batch_ms=0, now_ms=500)
    assert not delay_batch(10, limits, last_batch_ms=0, now_ms=1000)
    assert not delay_batch(0, RateLimits(), last_batch_ms=0, now_ms=0)


def r(partition: int, size: int, topic: str = "t", start: int = 0) -> OffsetRange:
    return OffsetRange(topic, partition, start, start + size)


def test_a_small_batch_runs_in_one_task_per_slot_balanced_by_records():
    groups = task_groups([r(0, 30), r(1, 5), r(2, 10), r(3, 20)], slots=2)
    assert groups == [(r(0, 30), r(1, 5)), (r(2, 10), r(3, 20))]
    assert task_groups([r(p, 10) for p in range(12)], slots=1) == [tuple(r(p, 10) for p in range(12))]


def test_each_range_is_read_whole_by_exactly_one_task_and_empty_ranges_by_none():
    ranges = [r(p, (p * 37) % 11, topic) for topic in ("t", "u") for p in range(9)]
    groups = task_groups(ranges, slots=3)
    flat = [rng for group in groups for rng in group]
    assert sorted(flat) == sorted(rng for rng in ranges if rng.end > rng.start)
    assert len(groups) == 3 and all(groups)
    assert task_groups([r(0, 0), r(1, 0)], slots=4) == []


def test_a_large_batch_gets_a_task_per_records_per_task_up_to_one_per_range():
    assert len(task_groups([r(p, 60) for p in range(8)], slots=1, records_per_task=100)) == 5
    assert len(task_groups([r(p, 60) for p in range(8)], slots=1)) == 1
    assert len(task_groups([r(p, 1000) for p in range(3)], slots=1, records_per_task=100)) == 3
    assert len(task_groups([r(p, 10) for p in range(3)], slots=16)) == 3


def test_tasks_come_in_whole_waves_of_slots():
    twelve = [r(p, 100) for p in range(12)]
    assert len(task_groups(twelve, slots=2, records_per_task=250)) == 6  # not 5: a last wave on one core of two
    assert len(task_groups(twelve, slots=2, records_per_task=600)) == 2
    assert len(task_groups(twelve, slots=2, records_per_task=599)) == 4
    assert len(task_groups(twelve, slots=5, records_per_task=100)) == 12  # 15 waved, one per range at most
    assert len(task_groups(twelve, slots=0)) == 1


def test_a_partition_with_most_of_the_batch_gets_a_task_of_its_own():
    assert task_groups([r(0, 900), r(1, 50), r(2, 40), r(3, 10)], slots=2) == [(r(0, 900),), (r(1, 50), r(2, 40), r(3, 10))]
