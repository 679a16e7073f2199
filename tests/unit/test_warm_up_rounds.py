"""When an scg-kafka member stops rehearsing batches before it joins (WarmUpRounds, pure)."""
from pipelines.runtime.warm_up_rounds import WarmUpRounds

# the rehearsed batches (seconds) of a member joining two others on 2 cores, 500 ms trigger
MEASURED = [6.09, 2.53, 1.23, 1.31, 1.55, 1.73, 0.76, 1.41, 1.04, 0.70, 1.08, 0.56, 0.92, 0.74, 0.62,
            0.60, 0.81, 1.03, 0.57, 0.89, 0.79, 0.72, 0.59, 0.80, 0.52, 0.43, 0.57, 0.80, 0.54, 0.63,
            0.82, 0.76, 0.94, 0.44, 0.50, 0.52, 0.56, 0.72, 0.40, 0.62, 0.89, 0.45, 0.27, 0.36, 0.70]


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
    rounds = WarmUpRounds(max_seconds=1000, window=3)
    assert rehearse(rounds, [8.0, 4.0, 2.0, 1.0, 0.8, 0.6, 0.5, 0.4, 0.3]) == -1


def test_it_stops_once_a_window_is_not_ten_percent_faster_than_the_one_before():
    rounds = WarmUpRounds(max_seconds=1000, window=3)
    # the first (not compared), then windows of three sliding by one: 4.0 > 2.0, 4.0 > 2.0, then
    # 2.0 (4.0, 2.0, 2.0) against 1.9 (2.0, 1.9, 1.9)
    assert rehearse(rounds, [9.0, 4.0, 4.0, 4.0, 2.0, 2.0, 2.0, 1.9, 1.9, 1.9, 0.1]) == 9


def test_slower_batches_among_faster_ones_do_not_stop_it():
    # one batch in three slower than the one before, as measured: the medians still fall
    rounds = WarmUpRounds(max_seconds=1000, window=3)
    assert rehearse(rounds, [9.0, 2.0, 3.0, 2.2, 1.0, 1.8, 1.2, 0.6, 1.5, 0.7]) == -1


def test_the_measured_series_rehearses_until_its_batches_level_off():
    rounds = WarmUpRounds(max_seconds=1000)
    ran = rehearse(rounds, MEASURED)
    assert 20 <= ran < len(MEASURED), ran
    assert min(rounds.durations) < 0.5 * rounds.durations[2]


def test_two_windows_after_the_first_batch_before_it_can_stop():
    rounds = WarmUpRounds(max_seconds=1000, window=2)
    for seconds in (9.0, 1.0, 1.0, 1.0):
        rounds.add(seconds, now=110.0)
    assert rounds.more(110.0)          # three batches after the query's first: one window and a half
    rounds.add(1.0, now=111.0)
    assert not rounds.more(111.0)      # medians 1.0 and 1.0


def test_at_most_max_batches_are_rehearsed():
    rounds = WarmUpRounds(max_batches=3, max_seconds=1000)
    assert rehearse(rounds, [8.0, 4.0, 2.0, 1.0]) == 3


def test_one_batch_when_max_batches_is_one():
    rounds = WarmUpRounds(max_batches=1)
    assert rehearse(rounds, [8.0, 4.0]) == 1


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
