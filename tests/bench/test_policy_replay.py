"""bench/policy_replay.py: the replay's arithmetic by hand, and a log of tiny CPU models replayed."""

import json

import numpy as np
import policy_replay as pr
import pytest
from tiny import make_model

from bass.config import DraftLengthConfig

COSTS = np.array([1.0, 1.5, 2.0, 2.5])
# two requests; each round: (sequences, drafts asked, drafts accepted) at L = 3
LOG = [[([0, 1], [3, 3], [3, 0]), ([0, 1], [3, 3], [1, 2])],
       [([2, 3], [3, 2], [0, 2])]]  # (sequence 3 near its token limit: asked 2)


def test_fixed_lengths_and_the_oracle_by_hand():
    got = {L: pr.replay(LOG, COSTS, lambda e, r, L=L: L)[0] for L in range(4)}
    # L = 1: min(a, 1) + 1 per sequence: (2 + 1) + (2 + 2) + (1 + 2) tokens in 3 rounds of 1.5 ms
    assert got[1] == pytest.approx(10 / 4.5)
    assert got[3] == pytest.approx(((4 + 1) + (2 + 3) + (1 + 3)) / 7.5)
    got[2] = pr.replay(LOG, COSTS, lambda e, r: 2)[0]
    assert got[2] == pytest.approx((4 + 5 + 4) / 6)
    # the first round makes 2 tokens a ms at every L, the second most at L = 1 (4 in 1.5 ms), the third at L = 0:
    # 8 tokens in 3.5 ms, more than any fixed length (the best, L = 1: 10 in 4.5)
    assert pr.oracle(LOG, COSTS) == pytest.approx(8 / 3.5)
    assert pr.oracle(LOG, COSTS) > max(got.values())


def test_the_estimate_learns_and_reports_its_calibration():
    cheap = np.array([1.0, 1.1, 1.2, 1.3])  # drafting pays at the prior's guess: the estimate drafts, and learns
    choose, estimator = pr.policies(cheap, DraftLengthConfig())["acceptance estimate"]
    rate, calibration = pr.replay(LOG * 5, cheap, choose, estimator)
    assert 0 < rate <= pr.oracle(LOG * 5, cheap)
    assert calibration and all(1 <= L <= 3 and acc >= 0 and pred > 0 for L, (acc, pred) in calibration.items())


def test_the_estimate_with_a_length_margin():
    cheap = np.array([1.0, 1.1, 1.2, 1.3])
    table = pr.policies(cheap, DraftLengthConfig(), margins=(0.0, 1.0))
    plain = pr.replay(LOG * 5, cheap, *table["acceptance estimate"])[0]
    assert pr.replay(LOG * 5, cheap, *table["estimate, margin 0"])[0] == pytest.approx(plain)
    # a margin of 1 takes the shortest length of all, plain decoding, every round
    assert pr.replay(LOG * 5, cheap, *table["estimate, margin 1"])[0] == pytest.approx(
        pr.replay(LOG * 5, cheap, lambda e, r: 0)[0])


def test_log_of_tiny_models_replays(tmp_path):
    target, draft = make_model(tmp_path / "target", seed=0), make_model(tmp_path / "draft", seed=1)
    out = tmp_path / "log.json"
    pr.main(["log", "--target", str(target), "--draft", str(draft), "--device", "cpu", "--prompts", "2", "--k", "2",
             "--L", "3", "--max-new-tokens", "10", "--out", str(out)])
    d = json.loads(out.read_text())
    assert d["L"] == 3 and len(d["requests"]) == 2 and all(d["requests"])
    for seqs, asked, accepted in (r for req in d["requests"] for r in req):
        assert len(seqs) == len(asked) == len(accepted) <= 2
        assert all(0 <= a <= n <= 3 for n, a in zip(asked, accepted, strict=True))
    table = pr.main(["replay", str(out), "--costs", "1,1.5,2,2.5,3,3.5"])
    assert set(table) == {"fixed L=0", "fixed L=1", "fixed L=2", "fixed L=3", "oracle",
                          "acceptance estimate", "estimate, uncalibrated"}  # (no length past the logged L = 3)
    assert table["oracle"]["tokens_per_ms"] >= max(v["tokens_per_ms"] for v in table.values()) - 1e-12
    assert table["fixed L=0"]["simulated"]["ms_per_token_seq"] == pytest.approx(1.0)  # every token a plain step


def test_the_simulation_decodes_the_logged_texts_again_by_hand():
    # LOG's texts: sequence 0 is 6 tokens long, its draft failing at position 5 (its first round took all 3);
    # sequence 1 is 4 long, failing at 0 and 3; sequence 2 is 1 long, failing at 0; sequence 3 is 3 long
    assert pr.texts(LOG[0]) == [(6, [5]), (4, [0, 3])] and pr.texts(LOG[1]) == [(1, [0]), (3, [])]
    one = pr.simulate(LOG, COSTS, lambda e, r: 1)
    # request 0 at L = 1: sequence 0 takes 2, 2, 2 tokens, sequence 1 takes 1, 2, 1: both end in round 3 (4.5 ms);
    # request 1: sequence 2 ends in round 1 (nothing to draft: 1.5 ms, sequence 3 drafted), sequence 3 in round 2,
    # where nobody drafts (a plain round, 1.0 ms)
    assert one["ms_per_token_seq"] == pytest.approx((4.5 / 6 + 4.5 / 4 + 1.5 / 1 + 2.5 / 3) / 4)
    assert one["tokens_per_ms"] == pytest.approx(14 / 7.0) and one["mean_L"] == pytest.approx(4 / 5)
    three = pr.simulate(LOG, COSTS, lambda e, r: 3)
    # request 0: round 1 at L = 3 (2.5 ms: 4 tokens and 1); round 2 drafts at most 2 (2.0 ms): both end at 4.5 ms;
    # request 1: one round drafting 2 (2.0 ms) ends both
    assert three["ms_per_token_seq"] == pytest.approx((4.5 / 6 + 4.5 / 4 + 2.0 / 1 + 2.0 / 3) / 4)
    assert three["tokens_per_ms"] == pytest.approx(14 / 6.5)
    plain = pr.simulate(LOG, COSTS, lambda e, r: 0)  # a token a round, each round costing c(0)
    assert plain["ms_per_token_seq"] == pytest.approx(COSTS[0]) and plain["mean_L"] == 0


def test_the_simulated_estimate_learns_across_passes():
    cheap = np.array([1.0, 1.1, 1.2, 1.3])
    choose, estimator = pr.policies(cheap, DraftLengthConfig())["acceptance estimate"]
    sim = pr.simulate(LOG * 5, cheap, choose, estimator)
    plain = pr.simulate(LOG * 5, cheap, lambda e, r: 0)
    assert 0 < sim["mean_L"] <= 3 and sim["ms_per_token_seq"] < plain["ms_per_token_seq"]
