"""When an scg-kafka member stops rehearsing batches before it joins (WarmUpRounds, pure)."""
from pipelines.runtime.warm_up_rounds import WarmUpRounds


def rehearse(rounds: WarmUpRounds, durations, start: float = 100.0) -> int:
    """Feed ``durations`` (one batch right after the other) while ``more`` says so; how many ran."""
    now = start
    for count, seconds in enumerate(durations):
        if not rounds.more(now):
            return count
        now += seconds
        rounds.add(seconds, now)
    return len(durations) if not rounds.more(now) else -1


def test_a_first_batch_is_always_rehearsed():
    assert WarmUpRounds().more(0.0)


def test_it_goes_on_while_batches_keep_getting_faster():
    rounds = WarmUpRounds(max_batches=20, max_seconds=1000)
    assert rehearse(rounds, [8.0, 4.0, 2.0, 1.0, 0.8, 0.6, 0.5, 0.4]) == -1


def test_it_stops_after_two_batches_in_a_row_that_did_not_beat_the_best_before_them():
    # measured in a joining member on 2 cores: 5.94 s first, warm from about 0.85 s
    rounds = WarmUpRounds(max_batches=20, max_seconds=1000)
    assert rehearse(rounds, [5.94, 1.78, 1.75, 1.11, 1.16, 0.85, 0.93, 0.93, 0.5, 0.5]) == 8
    assert rounds.summary() == "8 batches, 5.94s first, 0.85s best"


def test_a_gain_of_less_than_ten_percent_is_no_gain():
    rounds = WarmUpRounds(max_batches=20, max_seconds=1000)
    assert rehearse(rounds, [3.0, 1.0, 0.95, 0.92, 0.1]) == 4


def test_one_slower_batch_between_faster_ones_does_not_stop_it():
    rounds = WarmUpRounds(max_batches=20, max_seconds=1000)
    assert rehearse(rounds, [3.0, 1.0, 1.5, 0.5, 0.6, 0.3, 0.2, 0.2, 0.2]) == 9


def test_at_most_max_batches_are_rehearsed():
    rounds = WarmUpRounds(max_batches=3, max_seconds=1000)
    assert rehearse(rounds, [8.0, 4.0, 2.0, 1.0]) == 3


def test_no_batch_starts_max_seconds_after_the_first_one_ended():
    rounds = WarmUpRounds(max_batches=100, max_seconds=5.0)
    rounds.add(20.0, now=120.0)  # the query's first batch: not counted in max_seconds
    assert rounds.more(124.9)
    rounds.add(2.0, now=124.9)
    assert not rounds.more(125.0)


def test_no_batch_whose_trigger_would_come_past_max_seconds():
    rounds = WarmUpRounds(trigger_s=2.0, max_batches=100, max_seconds=5.0)
    rounds.add(8.0, now=108.0)
    assert rounds.more(110.9)                # the next trigger at about 112.9: within 5 s
    rounds.add(1.0, now=111.0)
    assert not rounds.more(111.0)            # ... at about 113.0: 5 s after the first ended


def test_a_trigger_interval_past_max_seconds_rehearses_one_batch():
    rounds = WarmUpRounds(trigger_s=60.0)
    assert rounds.more(0.0)
    rounds.add(3.0, now=3.0)
    assert not rounds.more(3.0)


def test_summary_of_none_and_of_one():
    rounds = WarmUpRounds()
    assert rounds.summary() == "no batch"
    rounds.add(1.5, now=1.5)
    assert rounds.summary() == "1 batch, 1.50s first, 1.50s best"
