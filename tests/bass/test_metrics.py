"""§2 metric arithmetic against hand-computed values."""

from math import comb

import pytest

from bass.events import BatchStats, Candidate, SequenceStats
from bass.metrics import (
    candidates_ms_per_token,
    decoder_flops_per_token,
    first_finished,
    gpu_utilization,
    mean_ms_per_token,
    pass_at_all,
    pass_at_first,
    pass_at_k,
)


def test_a_sequence_cut_before_its_first_round_has_no_rate():
    """A cancel or the time budget that ends a sequence before its first round leaves it holding its prefill's
    token at the time of the cut: no rate, so it leaves the batch's mean. One cut mid-way, and one that ended on its
    first token by itself, stay."""
    def cand(reason, tokens, rounds, finish_s):
        return Candidate(0, 0, "", (), reason, SequenceStats(tokens, rounds, 0, 0, finish_s))

    ran, cut = cand("stop", 40, 20, 18.0), cand("cancelled", 10, 4, 18.0)  # 450 and 1,800 ms/token
    unstarted = [cand("cancelled", 1, 0, 18.0), cand("budget", 1, 0, 18.0)]  # 18,000 each, no rate
    eos_at_once = cand("eos", 1, 0, 0.5)  # 500 ms/token: it ended by itself
    assert [c.has_rate for c in (ran, cut, *unstarted, eos_at_once)] == [True, True, False, False, True]
    assert candidates_ms_per_token((ran, cut, *unstarted, eos_at_once)) == pytest.approx((450 + 1800 + 500) / 3)
    assert candidates_ms_per_token(unstarted) == 0.0


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - comb(3, 2) / comb(5, 2))  # 0.7
    assert pass_at_k(3, 2, 2) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_first_finished_breaks_ties_by_index():
    assert first_finished([None, 0.2, 0.1, 0.1]) == 2
    assert first_finished([None, None]) is None


def test_pass_at_first_and_all_within_budget():
    times = [2.0, None, 1.5, 3.0]  # sequence 1 did not finish in the budget
    assert pass_at_first(times, [False, True, True, False]) is True  # seq 2 finished first
    assert pass_at_first(times, [True, True, False, True]) is False
    assert pass_at_all(times, [False, True, False, False]) is False  # only the unfinished one passes
    assert pass_at_all(times, [False, False, False, True]) is True
    assert pass_at_first([None, None], [True, True]) is False


def test_latency_and_utilization():
    assert mean_ms_per_token([1.0, 0.5, 0.0], [100, 25, 0]) == pytest.approx((10 + 20) / 2)
    flops = decoder_flops_per_token(7_000_000_000, 32, 4096, 512)
    assert flops == pytest.approx(14e9 + 4 * 32 * 512 * 4096)
    assert gpu_utilization(flops, 1000, 782e12) == pytest.approx(flops * 1000 / 782e12)


def test_time_to_first_pass_counts_prefill_and_ignores_unfinished_and_untested():
    from bass.metrics import format_seconds_or_none, time_to_first_pass

    # seq 0 passes at 3 s, seq 1 fails at 1 s, seq 2 "passes" but was cut by the budget, seq 3 untested
    assert time_to_first_pass(0.4, [3.0, 1.0, None, 0.5], [True, False, True, None]) == pytest.approx(3.4)
    assert time_to_first_pass(0.4, [3.0, 2.0], [True, True]) == pytest.approx(2.4)
    assert time_to_first_pass(0.4, [3.0, 1.0], [False, None]) is None
    assert format_seconds_or_none(None) == "none" and format_seconds_or_none(2.345) == "2.3 s"


def test_seconds_under_one_read_in_milliseconds():
    """A GPU's first pass in 0.05 s budgets read "mean 0.0 s" before: under a second the unit is ms."""
    from bass.metrics import format_seconds, format_seconds_or_none

    assert format_seconds_or_none(0.0512) == "51 ms" and format_seconds(0.00437) == "4.4 ms"
    assert format_seconds(0.9994) == "999 ms" and format_seconds(1.0) == "1.0 s" and format_seconds(0.0) == "0 ms"


def _timeline(ends: list[float], waits: list[float]) -> BatchStats:
    return BatchStats("bass", "model", "ragged", 8, 0.02, ends[-1], 0, len(ends), 0, 0, 0.0,
                      round_ends_s=tuple(ends), round_waits_s=tuple(waits))


def test_a_host_stall_is_host_time_far_over_the_median():
    """Rounds of 2.2 ms, the host busy 0.7 of each and waiting 1.5 for the device; one round's host time is 9.7
    ms (held up 9 ms), another's interval is as long but spent waiting for the device (a slow device round)."""
    ends, waits, t = [], [], 0.0
    for r in range(12):
        host, wait = (9.7e-3, 1.5e-3) if r == 5 else (0.7e-3, 9.5e-3) if r == 8 else (0.7e-3, 1.5e-3)
        t += host + wait
        ends.append(t), waits.append(wait)
    n, excess = _timeline(ends, waits).host_stalls()
    assert n == 1 and excess == pytest.approx(9e-3)
    assert _timeline(ends, waits).host_stalls(over_s=0.01) == (0, 0)
    assert _timeline(ends, [0.0] * len(ends)).host_stalls() is None  # the CPU: no device to wait for
