"""StickyAssignor: docstring example, ownership rules, balance and movement, also at scale.

Speed is measured by bench/bench_assignors.py (bench/results/assignors.md), never asserted here: a
test has no wall-clock bound besides the per-test timeout that catches a hang."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from groupmgr.assignors import StickyAssignor, Subscription, TopicPartition, run_assignor
from groupmgr.assignors import sticky as sticky_module

TP = TopicPartition
ASSIGNOR = StickyAssignor()


def assign(partitions_per_topic, subscriptions):
    return run_assignor(ASSIGNOR, partitions_per_topic, subscriptions)


def sub(*topics, owned=(), generation=-1, instance=None):
    return Subscription(topics, owned_partitions=owned, generation_id=generation, group_instance_id=instance)


def tps(topic, *partitions):
    return [TP(topic, p) for p in partitions]


def moved(before, after):
    """Partitions taken from a member that is still in the group (new partitions and leavers' ones not counted)."""
    owner = {tp: m for m, ps in before.items() for tp in ps}
    return {tp for m, ps in after.items() for tp in ps if owner.get(tp, m) != m and owner[tp] in after}


def rejoin(result, topics, generation=1):
    return {m: sub(*topics, owned=ps, generation=generation) for m, ps in result.items()}


def test_docstring_example_third_member_joins():
    result = assign({"t": 6}, {
        "C0": sub("t", owned=tps("t", 0, 1, 2), generation=3),
        "C1": sub("t", owned=tps("t", 3, 4, 5), generation=3),
        "C2": sub("t"),
    })
    assert result == {"C0": tps("t", 0, 1), "C1": tps("t", 3, 4), "C2": tps("t", 2, 5)}
    doc = " ".join(sticky_module.__doc__.split())
    assert "C0: [t0, t1]" in doc and "C1: [t3, t4]" in doc and "C2: [t2, t5]" in doc


def test_cold_start_is_balanced_and_contiguous():
    result = assign({"t": 7}, {m: sub("t") for m in ("a", "b", "c")})
    assert result == {"a": tps("t", 0, 1, 2), "b": tps("t", 3, 4), "c": tps("t", 5, 6)}


def test_same_members_again_moves_nothing():
    first = assign({"t": 10, "u": 3}, {m: sub("t", "u") for m in ("a", "b", "c", "d")})
    second = assign({"t": 10, "u": 3}, rejoin(first, ("t", "u")))
    assert second == first


def test_member_leaving_moves_only_its_partitions():
    first = assign({"t": 12}, {m: sub("t") for m in ("a", "b", "c", "d")})
    members = rejoin(first, ("t",))
    del members["b"]
    second = assign({"t": 12}, members)
    assert moved(first, second) == set()
    assert sorted(tp for m in ("a", "c", "d") for tp in second[m] if tp not in first[m]) == first["b"]


def test_member_joining_takes_only_surplus():
    first = assign({"t": 9}, {m: sub("t") for m in ("a", "b", "c")})
    members = rejoin(first, ("t",))
    members["d"] = sub("t")
    second = assign({"t": 9}, members)
    assert len(moved(first, second)) == 2  # 3,3,3 -> 3,2,2,2: d takes one from two members
    assert sorted(len(ps) for ps in second.values()) == [2, 2, 2, 3]


def test_extra_slot_goes_to_member_that_owns_more_than_the_floor():
    # 7 partitions, 3 members: quotas 3,2,2. "c" owns 3, so it keeps all three.
    result = assign({"t": 7}, {
        "a": sub("t", owned=tps("t", 0), generation=1),
        "b": sub("t", owned=tps("t", 1), generation=1),
        "c": sub("t", owned=tps("t", 2, 3, 4), generation=1),
    })
    assert result["c"] == tps("t", 2, 3, 4)
    assert len(result["a"]) == len(result["b"]) == 2


def test_over_quota_member_keeps_lowest_partitions():
    result = assign({"t": 4}, {"a": sub("t", owned=tps("t", 0, 1, 2, 3), generation=1), "b": sub("t")})
    assert result == {"a": tps("t", 0, 1), "b": tps("t", 2, 3)}


def test_higher_generation_wins_a_double_claim():
    result = assign({"t": 2}, {
        "old": sub("t", owned=tps("t", 0, 1), generation=4),
        "new": sub("t", owned=tps("t", 0), generation=5),
    })
    assert result == {"new": tps("t", 0), "old": tps("t", 1)}


def test_same_generation_double_claim_is_voided_but_still_assigned_once():
    result = assign({"t": 4}, {
        "a": sub("t", owned=tps("t", 0, 1), generation=5),
        "b": sub("t", owned=tps("t", 1, 2), generation=5),
    })
    assert result["a"][0] == TP("t", 0) and result["b"][0] == TP("t", 2)
    assert sorted(result["a"] + result["b"]) == tps("t", 0, 1, 2, 3)


def test_claims_on_vanished_or_unsubscribed_partitions_are_ignored():
    result = assign({"t": 2, "u": 2}, {
        "a": sub("t", owned=[TP("t", 5), TP("u", 0), TP("gone", 0)], generation=2),
        "b": sub("t", "u"),
    })
    assert TP("u", 0) not in result["a"]
    assert sorted(result["a"] + result["b"]) == tps("t", 0, 1) + tps("u", 0, 1)


def test_more_members_than_partitions_prefers_previous_owners():
    result = assign({"t": 2}, {
        "a": sub("t"), "b": sub("t"),
        "y": sub("t", owned=tps("t", 1), generation=1), "z": sub("t", owned=tps("t", 0), generation=1),
    })
    assert result == {"a": [], "b": [], "y": tps("t", 1), "z": tps("t", 0)}


def test_topics_without_metadata_are_skipped():
    result = assign({"t": 3}, {"a": sub("t", "gone"), "b": sub("t"), "c": sub("gone")})
    assert result["c"] == []
    assert sorted(result["a"] + result["b"]) == tps("t", 0, 1, 2)
    assert abs(len(result["a"]) - len(result["b"])) <= 1


def test_uneven_subscriptions_kafka_javadoc_case_is_better_balanced_than_roundrobin():
    result = assign({"t0": 1, "t1": 2, "t2": 3},
                    {"C0": sub("t0"), "C1": sub("t0", "t1"), "C2": sub("t0", "t1", "t2")})
    assert result == {"C0": tps("t0", 0), "C1": tps("t1", 0, 1), "C2": tps("t2", 0, 1, 2)}


def test_uneven_subscriptions_equal_members_within_one():
    members = {f"x{i}": sub("t") for i in range(3)}
    members.update({f"y{i}": sub("t", "u") for i in range(4)})
    result = assign({"t": 20, "u": 9}, members)
    xs = [len(result[f"x{i}"]) for i in range(3)]
    ys = [len(result[f"y{i}"]) for i in range(4)]
    assert max(xs) - min(xs) <= 1 and max(ys) - min(ys) <= 1
    assert max(xs + ys) - min(xs + ys) <= 1  # here perfect balance is reachable


def test_uneven_subscriptions_rebalance_from_a_hoarder():
    owned = tps("t", *range(10))
    result = assign({"t": 10, "u": 2}, {"a": sub("t", owned=owned, generation=1), "b": sub("t", "u")})
    assert sorted(len(ps) for ps in result.values()) == [6, 6]
    assert result["a"] == tps("t", *range(6))  # a keeps its lowest partitions, gives up the rest


@pytest.mark.parametrize("members, partitions", [(1000, 100_000), (10, 100_000), (1000, 1_000)])
def test_large_groups_are_balanced_and_a_rejoin_moves_nothing(members, partitions):
    subscriptions = {f"member-{i:05d}": sub("t") for i in range(members)}
    first = ASSIGNOR.assign({"t": partitions}, subscriptions)
    warm = ASSIGNOR.assign({"t": partitions}, rejoin(first, ("t",)))
    assert warm == first
    sizes = Counter(len(ps) for ps in first.values())
    assert set(sizes) <= {partitions // members, -(-partitions // members)}
    assert sum(len(ps) for ps in first.values()) == partitions


# --- general (uneven subscriptions) path ---

def greedy_one_by_one(counts, members, units):
    counts = list(counts)
    given = Counter()
    for _ in range(units):
        index = min(members, key=lambda i: (counts[i], i))
        counts[index] += 1
        given[index] += 1
    return given


@pytest.mark.parametrize("seed", range(40))
def test_water_fill_equals_handing_out_one_at_a_time(seed):
    rnd = random.Random(seed)
    counts = [rnd.randint(0, 6) for _ in range(rnd.randint(1, 8))]
    members = sorted(rnd.sample(range(len(counts)), rnd.randint(1, len(counts))))
    units = rnd.randint(0, 25)
    filled = {i: n for i, n in sticky_module.water_fill(counts, members, units) if n}
    assert filled == dict(greedy_one_by_one(counts, members, units))


def test_hoarder_with_uneven_subscriptions_is_spread():
    members = {f"m{i:04d}": sub("t") if i % 2 else sub("t", "u") for i in range(1000)}
    everything = tps("t", *range(50_000)) + tps("u", *range(50_000))
    members["m0000"] = sub("t", "u", owned=everything, generation=1)
    result = assign({"t": 50_000, "u": 50_000}, members)
    sizes = Counter(len(ps) for ps in result.values())
    assert min(sizes) >= 99 and max(sizes) <= 101
    assert 99 <= len(result["m0000"]) <= 101  # it keeps a fair share of what it owned


def test_assign_returns_each_members_partitions_sorted_even_from_unsorted_claims():
    owned = [TP("t", 3), TP("t", 0)]                     # within its quota: kept as claimed
    result = ASSIGNOR.assign({"t": 4}, {"a": sub("t", owned=owned, generation=1), "b": sub("t", owned=[], generation=1)})
    assert all(ps == sorted(ps) for ps in result.values())
    assert sorted(result["a"] + result["b"]) == tps("t", 0, 1, 2, 3)


# --- the smaller rules, each on its own: dropped claims, dealing order, empty topics, more members
# than partitions, moves from the fullest holder ---

def test_a_claim_on_a_topic_the_claimer_dropped_is_ignored_even_if_the_first_member_subscribes_to_it():
    result = assign({"t": 2, "u": 1}, {"a": sub("t", "u"), "b": sub("u", owned=tps("t", 1), generation=1),
                                       "c": sub("t", "u")})
    assert all(tp.topic == "u" for tp in result["b"])
    assert sorted(result["a"] + result["b"] + result["c"]) == tps("t", 0, 1) + tps("u", 0)


def test_topics_with_fewer_subscribers_are_handed_out_first():
    """m1 can only take t0: t1 (two subscribers) is dealt before t0 (three), so t0 is left for m1."""
    result = assign({"t0": 1, "t1": 1}, {"m0": sub("t0", "t1"), "m1": sub("t0"), "m2": sub("t0", "t1")})
    assert result == {"m0": tps("t1", 0), "m1": tps("t0", 0), "m2": []}


def test_topics_with_no_or_a_negative_partition_count_are_no_topics_of_a_member():
    subscriptions = {"a": sub("t", "u", "v"), "b": sub("v")}
    assert sticky_module.effective_topics({"t": 2, "u": 0, "v": -1}, subscriptions, ["a", "b"]) == [
        frozenset({"t"}), frozenset()]


def test_a_new_group_with_more_members_than_partitions_gets_one_list_per_member():
    owned = [[], [], [], []]
    assert sticky_module.constrained_assign({"t": 2}, owned) == [tps("t", 0), tps("t", 1), [], []]


def test_balancing_always_moves_from_the_currently_fullest_holder():
    """m1 hoards five of t. Each move must see every member's current count: then m1 gives up only
    the two partitions balance needs (t4, t5), and m0 takes a u partition instead of a third t."""
    result = assign({"t": 6, "u": 2}, {
        "m0": sub("t", "u"),
        "m1": sub("t", owned=tps("t", 0, 1, 2, 4, 5), generation=1),
        "m2": sub("t", owned=tps("t", 3), generation=1),
        "x": sub("u"),
    })
    assert result == {"m0": tps("t", 4) + tps("u", 0), "m1": tps("t", 0, 1, 2), "m2": tps("t", 3, 5), "x": tps("u", 1)}
    assert set(tps("t", 0, 1, 2, 4, 5)) - set(result["m1"]) == {TP("t", 4), TP("t", 5)}
