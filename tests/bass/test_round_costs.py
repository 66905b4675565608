"""The cost policy's timing half (`bass.round_costs`): per-bucket estimates and the monotone fit."""

import numpy as np
import pytest

from bass.config import DraftLengthConfig
from bass.round_costs import CostModel, RoundClock, quantile


def test_cost_model_converges_and_ignores_a_warm_up_sample():
    rng = np.random.default_rng(2)
    cm = CostModel(DraftLengthConfig())
    true_c = lambda L: 2e-3 * (1 + 0.25 * L)  # noqa: E731
    cm.observe(4, 8, 3.0)  # the first round at L=4 paid for a graph capture: seconds
    for _ in range(300):
        for L in (0, 2, 4):
            cm.observe(L, 8, true_c(L) * rng.uniform(0.9, 1.1))
    curve = cm.round_curve(8, 8)
    assert curve[[0, 2, 4]] == pytest.approx([true_c(0), true_c(2), true_c(4)], rel=0.08)
    assert curve[3] == pytest.approx(true_c(3), rel=0.08)  # interpolated
    assert curve[8] == pytest.approx(true_c(8), rel=0.1)  # extrapolated with the measured slope
    assert cm.round_curve(6, 8).tolist() == curve.tolist()  # 6 shares batch bucket 8
    assert cm.round_curve(1, 8) is not None  # an unmeasured batch bucket borrows the nearest one's


def test_cost_model_cold_extrapolation():
    cm = CostModel(DraftLengthConfig())
    assert cm.round_curve(4, 4) is None
    cm.observe(0, 4, 1.0)
    assert cm.round_curve(4, 4) is None  # one length measured: no shape yet, the policy must probe
    cm.observe(0, 8, 2.0)
    cm.observe(4, 8, 4.0)
    cm.observe(2, 2, 6.0)  # batch 2 measured at L=2 only, batch 8 at two lengths: its shape, scaled
    assert cm.round_curve(2, 4).tolist() == pytest.approx([4.0, 5.0, 6.0, 7.0, 8.0])


def test_a_noisy_cost_that_falls_with_l_is_fitted_monotone():
    """What the H100 showed with the split timing: L = 1 measured dearer than L = 2. A longer draft never
    makes a round cheaper: the violators are pooled by their sample counts, and the extrapolation past
    them keeps a positive slope."""
    cm = CostModel(DraftLengthConfig())
    for L, ms, n in ((0, 2.5, 40), (1, 5.0, 2), (2, 3.5, 20), (3, 4.4, 10)):
        for _ in range(n):
            cm.observe(L, 8, ms * 1e-3)
    curve = cm.round_curve(8, 6) * 1e3
    assert np.all(np.diff(curve) >= 0)
    assert curve[0] == pytest.approx(2.5)
    window = DraftLengthConfig().cost_window  # 16: a bucket's weight is the samples its estimate stands on
    pooled = (5.0 * 2 + 3.5 * window) / (2 + window)
    assert curve[1] == pytest.approx(pooled) and curve[2] == pytest.approx(pooled)
    assert curve[3] == pytest.approx(4.4) and curve[5] == pytest.approx(4.4 + 2 * (4.4 - pooled))
    flat = CostModel(DraftLengthConfig(draft_cost_floor=0.05))
    for L, ms in ((0, 3.0), (2, 2.0)):  # every point pooled: the mean of the two, and no slope but the floor's
        flat.observe(L, 8, ms * 1e-3)
    assert flat.round_curve(8, 4).tolist() == pytest.approx([2.5e-3 * (1 + 0.05 * L) for L in range(5)])


def test_a_one_off_does_not_move_the_estimate_and_a_real_change_is_followed():
    """A graph capture inside a timed round (20x the real cost) after the estimate settled leaves it where
    it was; a real rise is followed once it is three quarters of the window's samples, a fall at a quarter."""
    model = CostModel(DraftLengthConfig(cost_window=16))
    ms = lambda: model.describe()["round_ms"][8][0]  # noqa: E731
    for x in (1.0, 1.0, 1.0, 20.0):
        model.observe(0, 8, x)
    assert ms() == pytest.approx(1e3)
    for _ in range(8):
        model.observe(0, 8, 1.5)
    assert ms() == pytest.approx(1.375e3)  # 1 x3, 1.5 x8, 20: the quartile at position 2.75 of 0 .. 11
    model.observe(0, 8, 1.5)
    assert ms() == pytest.approx(1.5e3)  # the new cost
    median = CostModel(DraftLengthConfig(cost_window=16, cost_quantile=0.5))
    for x in (1.0, 1.0, 1.0, 20.0, 1.5, 1.5, 1.5):
        median.observe(0, 8, x)
    assert median.describe()["round_ms"][8][0] == pytest.approx(1.5e3)  # cost_quantile 0.5: the median


def test_a_slow_stretch_does_not_make_a_length_look_dear():
    """What an H100 showed at k = 8 (`real_bench_2026-11-26_h100v_median.json`): rounds of every length ran slow
    for a stretch, the median of L = 3's window ended above L = 4's, the monotone fit pooled them and the policy
    drafted longer for the rest of the run. Here half of L = 3's window is such a stretch: the median pools
    L = 3 with L = 4, the lower quartile keeps it at its own cost."""

    def fitted(q: float) -> np.ndarray:
        model = CostModel(DraftLengthConfig(cost_quantile=q))
        rng = np.random.default_rng(0)
        for L, ms, n in ((0, 1.74, 4), (4, 2.50, 16), (3, 2.23, 8)):
            for _ in range(n):
                model.observe(L, 8, ms * rng.uniform(0.98, 1.02) * 1e-3)
        for ms in (7.95, 4.81, 4.32, 3.42, 3.15, 7.04, 3.07, 3.29):  # the stretch, at L = 3
            model.observe(3, 8, ms * 1e-3)
        return model.round_curve(8, 4) * 1e3

    curve = fitted(0.25)
    assert curve[3] == pytest.approx(2.23, rel=0.03) and curve[4] == pytest.approx(2.50, rel=0.03)
    median = fitted(0.5)
    assert median[3] == pytest.approx(median[4]) and median[4] > 2.55  # L = 3 pooled with L = 4, both dear


def test_two_slow_first_samples_are_forgotten_once_the_length_is_timed_again():
    """What the H100 showed at batch 32: plain decoding's two probes both slow (6.9 ms against 2.8). Three
    more samples bring the estimate to the truth, where an estimate that kept the probes' average would
    have made L = 1 look dear through the monotone fit."""
    model = CostModel(DraftLengthConfig())
    for L, x in ((0, 6.9), (0, 6.9)) + ((1, 3.6),) * 16:
        model.observe(L, 32, x * 1e-3)
    assert model.round_curve(32, 1)[1] * 1e3 > 3.9  # pooled with the stale plain step
    for _ in range(3):
        model.observe(0, 32, 2.8e-3)
    assert model.round_curve(32, 1) * 1e3 == pytest.approx([2.8, 3.6])


def test_a_first_outlandish_draft_round_is_dropped_and_a_second_one_kept():
    """A round of L = 2 at 50x a plain step is a compile or a capture the first time (dropped), and the
    drafter's real cost the second time (sampled): a drafter that slow must not stay unmeasured."""
    cm = CostModel(DraftLengthConfig())
    cm.observe(0, 8, 2e-3)
    cm.observe(2, 8, 0.1)
    assert cm.dropped == 1 and cm.samples(2, 8) == 0
    cm.observe(2, 8, 3e-3)  # steady
    cm.observe(3, 8, 3.5e-3)
    assert cm.describe()["round_ms"][8] == {0: 2.0, 2: 3.0, 3: 3.5} and cm.describe()["dropped"] == 1
    slow = CostModel(DraftLengthConfig())
    slow.observe(0, 8, 2e-3)
    slow.observe(2, 8, 0.1)
    slow.observe(2, 8, 0.1)  # again: the drafter is that slow
    assert slow.samples(2, 8) == 1 and slow.describe()["round_ms"][8][2] == pytest.approx(100.0)
    cm.observe(1, 8, 0.5)  # L = 1's own bucket has a drop of its own
    assert cm.samples(1, 8) == 0 and cm.dropped == 2


def test_the_clock_flags_a_round_during_which_a_graph_was_captured(monkeypatch):
    import bass.graphs

    clock = RoundClock()
    clock.start()
    monkeypatch.setattr(bass.graphs, "_captures", bass.graphs.captures() + 1)  # what `capture` does
    assert clock.stop() >= 0 and clock.captured
    clock.start()
    clock.start()  # a round launched ahead
    monkeypatch.setattr(bass.graphs, "_captures", bass.graphs.captures() + 1)  # captured by the second
    clock.stop()
    assert clock.captured  # the first one's interval saw it too
    clock.stop()
    assert clock.captured
    clock.start()
    clock.stop()
    assert not clock.captured


def test_a_seldom_run_length_forgets_samples_past_the_horizon():
    """The H100's look-ahead pair at k = 8: L = 3 kept 2.77 ms from an early, slow stretch while the policy
    ran L = 4, and a probe that read 2.40 could not move an estimate of 16 old samples. Past the horizon
    (timed rounds of any length) old samples go when a new one comes, down to the two newest; within it,
    one sample cannot move the estimate."""
    cfg = DraftLengthConfig(cost_window=16, cost_horizon=64)
    model = CostModel(cfg)
    ms = lambda: model.describe()["round_ms"][8][3]  # noqa: E731
    for _ in range(16):
        model.observe(3, 8, 2.77e-3)
    model.observe(3, 8, 2.40e-3)  # within the horizon: one probe among 16 old samples
    assert ms() == pytest.approx(2.77)
    for _ in range(cfg.cost_horizon):
        model.observe(4, 8, 2.85e-3)  # the length the policy runs
    model.observe(3, 8, 2.40e-3)  # the next probe: the old samples are past the horizon
    assert ms() == pytest.approx(2.40)  # the lower of the two newest (2.40 and 2.40)
    assert model.describe()["round_ms"][8][4] == pytest.approx(2.85)  # the length run often: its own window
    for x in (2.45, 2.50):
        model.observe(3, 8, x * 1e-3)
    assert ms() == pytest.approx(2.425)  # three fresh samples: their lower quartile


def test_a_length_not_timed_within_the_horizon_leaves_the_fit():
    """The H100's look-ahead pair at k = 8 (`real_bench_2026-11-26_h100o_launchtrim.json`): L = 3 kept two
    early samples near 4 ms and, looking dear, was never run again while the policy drafted L = 7. Once a
    drafting length has no sample within the horizon, the curve through the lengths timed since stands for
    it (plain decoding stays in), until a new sample makes it fresh again."""
    cfg = DraftLengthConfig(cost_horizon=64)
    model = CostModel(cfg)
    for L, ms in ((0, 1.80), (0, 1.80), (3, 4.09), (3, 4.09)):
        model.observe(L, 8, ms * 1e-3)
    for _ in range(40):
        for L, ms in ((4, 2.53), (7, 2.86)):
            model.observe(L, 8, ms * 1e-3)
    stale = model.round_curve(8, 8) * 1e3
    assert stale[3] == pytest.approx(1.80 + 0.75 * (2.53 - 1.80))  # interpolated between L = 0 and 4
    assert stale[7] == pytest.approx(2.86) and stale[0] == pytest.approx(1.80)
    assert model.describe()["round_ms"][8][3] == pytest.approx(4.09)  # the estimate is kept, only not fitted
    model.observe(3, 8, 2.23e-3)  # the policy runs it again: fresh, and its newest samples decide
    assert model.round_curve(8, 8)[3] * 1e3 == pytest.approx(2.23)


def test_a_curve_fitted_before_a_length_went_stale_is_fitted_again():
    """The fits are cached until an estimate changes, and steady samples change none: a length going stale
    must refit the curve all the same."""
    model = CostModel(DraftLengthConfig(cost_horizon=16))
    for L, ms in ((0, 1.8), (0, 1.8), (3, 4.0), (3, 4.0), (4, 2.5), (4, 2.5)):
        model.observe(L, 8, ms * 1e-3)
    assert model.round_curve(8, 8)[3] * 1e3 == pytest.approx((4.0 + 2.5) / 2)  # pooled: the fit is monotone
    for _ in range(20):
        model.observe(4, 8, 2.5e-3)  # the same value: no estimate changes
    assert model.round_curve(8, 8)[3] * 1e3 == pytest.approx(1.8 + 0.75 * (2.5 - 1.8))


def test_a_stale_length_past_the_longest_fresh_one_stays_in_the_fit():
    """Left out, a long length timed dear long ago would give way to the last fresh slope's extrapolation,
    and long drafts would look cheap: it bounds the curve until it is timed again."""
    model = CostModel(DraftLengthConfig(cost_horizon=16))
    for L, ms in ((0, 1.8), (0, 1.8), (10, 4.5), (10, 4.5)):
        model.observe(L, 8, ms * 1e-3)
    for _ in range(20):
        for L, ms in ((3, 2.2), (4, 2.5)):
            model.observe(L, 8, ms * 1e-3)
    curve = model.round_curve(8, 12) * 1e3
    assert curve[10] == pytest.approx(4.5)  # not 2.5 + 6 x 0.3 = 4.3 from the fresh slope
    assert curve[3] == pytest.approx(2.2) and curve[4] == pytest.approx(2.5)


def test_a_bucket_keeps_its_stale_lengths_while_fewer_than_two_would_be_left():
    model = CostModel(DraftLengthConfig(cost_horizon=8))
    model.observe(2, 8, 2.1e-3)
    model.observe(2, 8, 2.1e-3)
    for _ in range(20):
        model.observe(4, 8, 2.5e-3)  # the only fresh length: no shape from it alone
    assert model.round_curve(8, 8)[2] * 1e3 == pytest.approx(2.1)


def test_cost_horizon_is_validated():
    with pytest.raises(ValueError, match="cost_horizon"):
        DraftLengthConfig(cost_horizon=0)


def test_the_quantile_is_numpys():
    rng = np.random.default_rng(1)
    for n in (2, 3, 5, 16):
        xs = rng.uniform(1.0, 3.0, n).tolist()
        for q in (0.1, 0.25, 0.5):
            assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)), rel=1e-12)
