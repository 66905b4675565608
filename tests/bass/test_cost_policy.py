"""The cost-aware draft-length policy (DESIGN.md §7): its objective and its argmax, its acceptance estimators,
on fake clocks. Its timing, probes and trace: `test_cost_policy_timing.py`; the engine with it, on the tiny
models: `test_cost_policy_engine.py`."""

import numpy as np
import pytest
from policy_clocks import FakeClock, by_position, geometric, make_policy, rounds

from bass.acceptance import AcceptanceEstimator, best_length, expected_accepted, expected_tokens, tokens_from_reach
from bass.config import DraftLengthConfig
from bass.round_costs import L_BUCKETS, bucket

# ---- the objective, by hand -------------------------------------------------------------------------

def test_expected_accepted_sums_each_sequence_to_its_own_length():
    reach = np.cumprod([[0.5, 0.5, 0.5], [1.0, 0.8, 0.0]], axis=1)  # P(a_b >= j) from α_{b,i}
    # sequence 0 asked 2: 0.5 + 0.25; sequence 1 asked 3: 1 + 0.8 + 0
    assert expected_accepted(reach, [2, 3]) == pytest.approx(0.75 + 1.8)
    assert expected_accepted(reach, [0, 0]) == 0.0


def test_expected_tokens_is_the_geometric_sum():
    got = expected_tokens([0.5, 1.0, 0.0], 3)
    # α = 0.5: 1, 1.5, 1.75, 1.875; α = 1: L + 1; α = 0: 1
    assert np.allclose(got, [3, 1.5 + 2 + 1, 1.75 + 3 + 1, 1.875 + 4 + 1])


def best_at(alphas, round_cost, margin=0.0) -> int:
    """`best_length` at the expected tokens of these acceptance rates."""
    return best_length(expected_tokens(alphas, len(round_cost) - 1), round_cost, margin)


def test_best_length_hand_cases():
    flat = np.ones(9)  # a plain step; a round of L costs 1 + L * draft
    per_draft = lambda d, n=9: 1 + d * np.arange(n)  # noqa: E731
    # useless draft: every L gives B tokens, any cost makes L = 0 the best (and ties go to 0 too)
    assert best_at([0.0] * 8, per_draft(0.01)) == 0
    assert best_at([0.0] * 8, flat) == 0
    # α 0.5, draft a quarter of a step: rates 1, 1.5/1.25 = 1.2, 1.75/1.5 = 1.167, ... -> L = 1
    assert best_at([0.5], per_draft(0.25, 5)) == 1
    # α 0.9, draft half a step: 1, 1.9/1.5 = 1.267, 2.71/2 = 1.355, 3.439/2.5 = 1.376, 4.095/3 = 1.365
    assert best_at([0.9], per_draft(0.5)) == 3
    # α 0.9, draft as costly as a step: 1.9 / 2 < 1 -> plain decoding
    assert best_at([0.9], per_draft(1.0)) == 0
    # α 0.9 and a nearly free draft: the longest allowed draft
    assert best_at([0.9], per_draft(0.01)) == 8
    # a round growing fast with L (compute-bound CPU) shortens it:
    # 1.9 / 1.51 = 1.258, 2.71 / 2.02 = 1.342, 3.439 / 2.53 = 1.359, 4.095 / 3.04 = 1.347
    assert best_at([0.9], 1 + 0.51 * np.arange(9)) == 3
    # a batch: the sum decides; sequences with α = 0 add 1 token at every L, which favours shorter drafts:
    # alone 4.095 / 2.2 = 1.861 < 4.686 / 2.5 = 1.874 > 5.217 / 2.8 = 1.863 -> 5;
    # with two α = 0: (2 * 3.439 + 2) / 1.9 = 4.673 > (2 * 2.71 + 2) / 1.6 = 4.638, (2 * 4.095 + 2) / 2.2 = 4.632
    assert best_at([0.9], per_draft(0.3)) == 5
    assert best_at([0.9, 0.9, 0.0, 0.0], per_draft(0.3)) == 3
    # a length margin: the shortest L within it of the best rate. At α 0.9 and a draft half a step, L = 3's
    # 1.376 leads L = 2's 1.355 by 1.5 % and L = 1's 1.267 by 7.9 %
    assert best_at([0.9], per_draft(0.5), margin=0.01) == 3
    assert best_at([0.9], per_draft(0.5), margin=0.02) == 2
    assert best_at([0.9], per_draft(0.5), margin=0.08) == 1
    assert best_at([0.9], per_draft(0.5), margin=0.5) == 0  # plain decoding, within half of the best


# ---- estimators ---------------------------------------------------------------------------------------
def test_acceptance_estimate_converges_per_sequence():
    rng = np.random.default_rng(0)
    est = AcceptanceEstimator(DraftLengthConfig(alpha_decay=0.995))
    truth = [0.2, 0.6, 0.9]
    for _ in range(3000):
        est.observe([0, 1, 2], [4, 4, 4], [geometric(rng, a, 4) for a in truth])
    assert np.allclose(est.alphas([0, 1, 2]), truth, atol=0.04)
    # accepted / proposed would be biased low (it counts never-tested positions as failures)
    assert est.alphas([0])[0] > 0.15


def test_short_proposals_count_as_rejections():
    """A drafter that runs out (n-gram) ends a round like a rejection: the estimate is α · supply,
    and it predicts the tokens per round that were actually emitted."""
    rng = np.random.default_rng(1)
    est = AcceptanceEstimator(DraftLengthConfig(alpha_decay=1.0))
    emitted = []
    for _ in range(4000):
        a = geometric(rng, 0.9, 6, supply=0.7)
        est.observe([0], [6], [a])
        emitted.append(a + 1)
    alpha = est.alphas([0])[0]
    assert alpha == pytest.approx(0.63, abs=0.02)
    assert expected_tokens([alpha], 6)[6] == pytest.approx(np.mean(emitted), rel=0.03)


def test_expected_tokens_is_kept_through_plain_rounds_and_follows_every_draft():
    """The policy reads the curve every round; a plain round (nothing asked) cannot change it, a drafting one
    must, and another batch gets its own."""
    est = AcceptanceEstimator(DraftLengthConfig(alpha_decay=0.9))
    first = est.expected_tokens([0, 1], 4)
    est.observe([0, 1], [0, 0], [0, 0])
    assert est.expected_tokens([0, 1], 4) is first and not first.flags.writeable
    est.observe([0, 1], [4, 4], [0, 0])
    after = est.expected_tokens([0, 1], 4)
    assert after[4] < first[4]
    assert after == pytest.approx(tokens_from_reach(est.reach([0, 1], 4)))
    assert len(est.expected_tokens([0], 4)) == 5 and est.expected_tokens([0], 4)[1] == pytest.approx(after[1] / 2)
    assert len(est.expected_tokens([0], 6)) == 7


def test_expected_tokens_per_position_by_hand():
    assert expected_tokens([[0.5, 0.5, 0.5]], 3) == pytest.approx(expected_tokens([0.5], 3))
    # position 1 always, position 2 half the time once reached, position 3 never
    assert expected_tokens([[1.0, 0.5, 0.0], [0.0, 1.0, 1.0]], 3) == pytest.approx([2, 3, 3.5, 3.5])


def test_the_profile_learns_each_positions_rate_and_never_hopes_past_its_data():
    rng = np.random.default_rng(2)
    cfg = DraftLengthConfig(alpha_decay=0.999, l0=3, l_limit=6)
    est = AcceptanceEstimator(cfg)
    truth = [0.8, 0.5, 0.3]
    for _ in range(4000):
        est.observe([0, 1], [3, 3], [by_position(rng, truth, 3) for _ in range(2)])
    profile = est.profile()
    assert profile[:3] == pytest.approx(truth, abs=0.04)
    assert profile[3:] == pytest.approx([profile[2]] * 3)  # never reached: the position before
    # the sequences' rates are the batch's: each gets the profile
    assert est.position_alphas([0, 1]) == pytest.approx(np.stack([profile, profile]), abs=0.03)
    # expected tokens per round at L = 3 match what the rounds emitted, where one rate for all would not
    emitted = np.mean([by_position(rng, truth, 3) + 1 for _ in range(20000)])
    assert expected_tokens(est.position_alphas([0]), 3)[3] == pytest.approx(emitted, rel=0.02)
    assert abs(expected_tokens(est.alphas([0]), 3)[3] - emitted) > 0.05


def test_the_length_follows_each_positions_rate():
    """What the H100 showed at k = 32 with the trained draft: one rate for all positions, learnt from rounds of
    L >= 2, made L = 1 look no better than plain decoding, and the policy decoded plainly where fixed L = 1 made
    1.22x. Here the first position is accepted 0.7 of the time, the second 0.25, and a round costs 2.05 plain,
    3.2 at L = 1, 3.65 at L = 2: tokens per unit of time 0.488, 0.531 and 0.514, so L = 1 is best. Per
    position the policy runs L = 1; with one rate, rounds of L = 1 say α = 0.7, which makes L = 2 look best
    (0.600), and rounds of L = 2 then say α = 0.51, where every length looks alike. The calibration
    (`bass.acceptance`) mends the one rate too: what position 2 accepted against what it promised scales it."""
    rng = np.random.default_rng(6)
    seqs = list(range(8))

    def run(single_rate: bool, calibrate: bool = True) -> list[int]:
        cfg = DraftLengthConfig(explore_every=8, alpha_decay=0.98, calibrate=calibrate)
        policy = make_policy(cfg, seqs, FakeClock(lambda L: 2.05 if L == 0 else 2.75, 0.45))
        if single_rate:
            est = policy.acceptance
            est.position_alphas = lambda q: np.repeat(est.alphas(q)[:, None], cfg.l_limit, 1)
        return rounds(policy, seqs, 200, lambda lengths: [by_position(rng, [0.7, 0.25], n) for n in lengths])

    assert run(single_rate=False)[-150:].count(1) >= 120
    assert run(single_rate=False, calibrate=False)[-150:].count(1) >= 120
    assert run(single_rate=True, calibrate=False)[-150:].count(1) <= 30
    assert run(single_rate=True)[-150:].count(1) >= 100


def test_acceptance_prior_and_pooling():
    cfg = DraftLengthConfig(alpha_prior=0.5, prior_strength=4.0)
    est = AcceptanceEstimator(cfg)
    assert est.alphas([0, 1]).tolist() == [0.5, 0.5]  # nothing observed: the prior
    est.observe([0, 1], [3, 0], [0, 0])  # only sequence 0 drafted: one failure
    pool = (0 + 4 * 0.5) / (1 + 4)
    assert est.pooled() == pytest.approx(pool)
    assert est.alphas([0, 1]).tolist() == pytest.approx([(0 + 4 * pool) / (1 + 4), pool])


def test_calibration_by_hand():
    """Before a round's outcome updates the counts, the reach it was predicted is checked against it, per asked
    position (`bass.acceptance`, Calibration): κ_j = (O_j + c) / (P_j + c)."""
    cfg = DraftLengthConfig(alpha_prior=0.5, prior_strength=4.0, alpha_decay=1.0, calibration_strength=8.0, l0=2,
                            l_limit=4)
    est = AcceptanceEstimator(cfg)
    est.observe([0, 1], [2, 0], [2, 0])  # sequence 0 asked 2, took both, predicted 0.5 and 0.25; 1 drafted nothing
    assert est.calibration() == pytest.approx([9 / 8.5, 9 / 8.25, 1.0, 1.0])
    # the reach the objective reads: each position's, scaled, never rising along the draft, never above 1
    raw = np.cumprod(est.position_alphas([0]), axis=1)[:, :3]
    assert est.reach([0], 3) == pytest.approx(np.minimum.accumulate(raw * est.calibration()[:3], axis=1))
    assert est.expected_tokens([0, 1], 3) == pytest.approx(
        [2.0, *(2 + np.cumsum(est.reach([0, 1], 3).sum(0)))])
    assert est.expected_accepted([0, 1], [1, 3]) == pytest.approx(est.reach([0, 1], 3)[0, 0] +
                                                                  est.reach([0, 1], 3)[1].sum())
    off = AcceptanceEstimator(DraftLengthConfig(calibrate=False))
    off.observe([0], [2], [2])
    assert off.calibration().tolist() == [1.0] * off.cfg.l_limit and not off.cal_pred.any()
    assert off.expected_tokens([0], 5) == pytest.approx(expected_tokens(off.position_alphas([0]), 5))


def test_calibration_shortens_drafts_whose_deep_positions_overpromised():
    """A memory whose rounds accepted half of what positions 4 and on promised: the policy drafts shorter than
    the same policy without calibration, and a new request starts from that memory's calibration."""
    from bass.draft_length import PolicyMemory
    from bass.round_costs import CostModel

    seqs, rng = list(range(8)), np.random.default_rng(4)
    chosen = {}
    for calibrate in (True, False):
        cfg = DraftLengthConfig(l_limit=12, alpha_decay=0.99, calibrate=calibrate)
        memory = PolicyMemory(CostModel(cfg), cfg.alpha_prior)
        first = make_policy(cfg, seqs, FakeClock(lambda L: 1.0 + 0.01 * L, 0.1), memory=memory)
        rounds(first, seqs, 200, lambda lengths: [geometric(rng, 0.9, n) for n in lengths])
        first.acceptance.cal_pred[3:], first.acceptance.cal_obs[3:] = 400.0, 200.0  # positions 4 ..: half
        memory.learn(first.acceptance)
        second = make_policy(cfg, seqs, FakeClock(lambda L: 1.0 + 0.01 * L, 0.1), memory=memory)
        assert second.acceptance.calibration() == pytest.approx(first.acceptance.calibration())
        second.lengths(seqs)
        chosen[calibrate] = second.choice
    assert chosen[True] <= 5 < 8 <= chosen[False]


# ---- the policy, with injected costs and acceptance ---------------------------------------------------
@pytest.mark.parametrize("alphas,verify,draft,expected", [
    ([0.9] * 8, lambda L: 1.0 + 0.01 * L, 0.02, "long"),  # high α, cheap draft
    ([0.02] * 8, lambda L: 1.0 + 0.01 * L, 0.02, 0),  # α ≈ 0: plain decoding
    ([0.8] * 8, lambda L: 1.0 + 0.01 * L, 0.6, "short"),  # costly draft
])
def test_policy_picks_the_argmax_of_the_formula(alphas, verify, draft, expected):
    rng = np.random.default_rng(3)
    cfg = DraftLengthConfig(l_limit=16, alpha_decay=0.99)
    seqs = list(range(len(alphas)))
    policy = make_policy(cfg, seqs, FakeClock(verify, draft))
    chosen = []
    for _ in range(400):
        lengths = policy.lengths(seqs)
        policy.update(seqs, [geometric(rng, a, n) for a, n in zip(alphas, lengths)], lengths)
        chosen.append(lengths[0])
    # exactly the argmax of the formula at the policy's own estimates (the next decision, up to a bucket past the
    # longest length timed)
    tokens, curve = policy.acceptance.expected_tokens(seqs, 16), policy.costs.round_curve(len(seqs), 16)
    policy.lengths(seqs)
    cap = L_BUCKETS[L_BUCKETS.index(bucket(policy.costs.reach(len(seqs)), L_BUCKETS)) + 1]
    assert policy.choice == best_length(tokens, curve[:cap + 1])
    # and the estimates found the truth, so it is the argmax at the true values
    L_true = best_at(alphas, [verify(L) + L * draft for L in range(17)])
    assert policy.choice == L_true
    if expected == "long":
        assert L_true >= 10
    elif expected == "short":
        assert 1 <= L_true <= 3
    else:
        assert L_true == 0
        # it settled: once a few rounds have outweighed the prior, only the rare exploration rounds draft
        assert sum(n > 0 for n in chosen[50:]) <= 400 // cfg.explore_every
    d = policy.describe(seqs)
    assert d["L"] == policy.choice and set(d) >= {"round_ms", "alpha_pooled", "predicted_speedup"}


def test_a_length_margin_takes_the_shortest_length_near_the_best():
    rng = np.random.default_rng(3)
    seqs, alphas = list(range(8)), [0.9] * 8
    verify, draft = (lambda L: 1.0 + 0.01 * L), 0.1  # a flat top: L = 7 .. 12 within 3 % of L = 9's rate, L = 6 4 %
    chosen = {}
    for margin in (0.0, 0.05):
        cfg = DraftLengthConfig(l_limit=16, alpha_decay=0.99, length_margin=margin)
        policy = make_policy(cfg, seqs, FakeClock(verify, draft))
        for _ in range(300):
            lengths = policy.lengths(seqs)
            policy.update(seqs, [geometric(rng, a, n) for a, n in zip(alphas, lengths)], lengths)
        curve = policy.costs.round_curve(len(seqs), 16)
        tokens = policy.acceptance.expected_tokens(seqs, 16)
        policy.lengths(seqs)  # decides from the estimates the last round left, up to a bucket past the longest timed
        cap = L_BUCKETS[L_BUCKETS.index(bucket(policy.costs.reach(len(seqs)), L_BUCKETS)) + 1]
        assert policy.choice == best_length(tokens, curve[:cap + 1], margin)
        chosen[margin] = policy.choice
    # at the true rates the argmax is L = 9 and the shortest within 5 % L = 6; the estimates move them a little
    assert chosen[0.0] >= 8 and 5 <= chosen[0.05] <= 7
