"""A request's first round, read from earlier requests' first rounds (`bass.acceptance`, Opening round): the
counts by hand, and the cost policy drafting short where first rounds fail and long after them, with its rounds
read in order (as on the CPU) and a round ahead (as on CUDA); its length decided while the prefill runs
(`DraftLengthPolicy.prepare`), and the opening reading nothing from the device before the first tokens."""

import numpy as np
import pytest
import torch
from policy_clocks import FakeClock, PipelinedClock, make_policy, rounds, rounds_ahead

from bass.acceptance import opening_reach, position_outcomes
from bass.config import DraftLengthConfig, SamplingParams
from bass.draft_length import PolicyMemory
from bass.engine import Engine
from bass.round_costs import CostModel
from bass.transfer import HostRead

SEQS = list(range(8))


def test_position_outcomes_by_hand():
    # asked 3 / 3 / 2, accepted 3 / 0 / 1: positions reached 3 / 1 / 2 (a failure unless all were taken)
    got = position_outcomes([3, 3, 2], [3, 0, 1], 4)
    np.testing.assert_array_equal(got, [[2, 1, 1, 0], [3, 2, 1, 0]])


def test_opening_reach_shrinks_each_position_toward_the_one_before():
    counts = np.array([[2.0, 1.0, 1.0, 0.0], [3.0, 2.0, 1.0, 0.0]])
    got = opening_reach(counts, 0.8, 4, m=4.0)
    r1 = (2 + 4 * 0.8) / 7
    r2 = (1 + 4 * r1) / 6
    r3 = (1 + 4 * r2) / 5
    np.testing.assert_allclose(got, np.cumprod([r1, r2, r3, r3]))  # a position never reached: the one before's
    assert opening_reach(np.array([[9.0], [3.0]]), 0.9, 1, m=1.0)[0] == 1.0  # a reach is at most 1
    assert len(opening_reach(counts, 0.8, 8, m=4.0)) == 4  # no further than the counts go (l_limit)


def test_memory_counts_first_rounds_and_discounts_earlier_requests():
    cfg = DraftLengthConfig(l0=3, l_limit=4, alpha_decay=0.5)
    memory = PolicyMemory(CostModel(cfg), cfg.alpha_prior)
    memory.count_first_round([2, 2], [2, 0], cfg)
    memory.count_first_round([1, 1], [1, 1], cfg)
    np.testing.assert_allclose(memory.opening, [[0.5 + 2, 0.5, 0, 0], [1 + 2, 0.5, 0, 0]])
    memory.count_first_round([0, 0], [0, 0], cfg)  # a first round that drafted nothing: the counts only fade
    np.testing.assert_allclose(memory.opening, [[1.25, 0.25, 0, 0], [1.5, 0.25, 0, 0]])
    fresh = PolicyMemory(CostModel(cfg), cfg.alpha_prior)
    fresh.count_first_round([0, 0], [0, 0], cfg)  # ... and starts none
    assert fresh.opening is None


def _requests(cfg, n, ahead, first_accepts):
    """n requests of 8 sequences sharing one memory, each 24 rounds long: its first round accepts
    `first_accepts(L)` drafts per sequence, every later round all it asked. Returns (memory, each request's
    first three lengths, its policy)."""
    memory, firsts, policy = PolicyMemory(CostModel(cfg), cfg.alpha_prior), [], None
    for _ in range(n):
        if ahead:
            clock = PipelinedClock(lambda L: 1.0 + 0.05 * (L > 0) + 0.1 * L, lambda L, after: 0.0)
        else:
            clock = FakeClock(lambda L: 1.0 + 0.05 * (L > 0), 0.1)
        policy = make_policy(cfg, SEQS, clock, memory=memory)
        seen = []

        def accepted(lengths, seen=seen):
            seen.append(lengths[0])
            return [first_accepts(n) for n in lengths] if len(seen) == 1 else list(lengths)

        (rounds_ahead if ahead else rounds)(policy, SEQS, 24, accepted)
        memory.learn(policy.acceptance)
        firsts.append(seen[:3])
    return memory, firsts, policy


@pytest.mark.parametrize("ahead", [False, True], ids=["in-order", "ahead"])
def test_first_rounds_that_fail_are_drafted_short_and_the_rounds_after_them_long(ahead):
    cfg = DraftLengthConfig(explore_every=0, l_limit=8, trace=True)
    memory, firsts, last = _requests(cfg, 5, ahead, lambda L: 0)
    assert memory.opening is not None and memory.opening[0, 0] == 0 and memory.opening[1, 0] > 20
    # from the third request on (the first's opening is a plain probe, the second's is the first counted): a
    # first round with next to no hope drafts one token at most (position 1 still leans on the batch's ᾱ_1 with
    # prior_strength pseudo-trials), and the round after it, read from the ordinary estimates, drafts long, as
    # every round after the first did
    assert all(f[0] <= 1 for f in firsts[2:]) and all(f[2] >= 4 for f in firsts[2:])
    # its prediction in the trace is the first rounds' (next to nothing), not the later rounds' near-certainty
    state = last.describe()
    first = state["trace"][0]
    assert first[0] <= 1 and first[5] == 0 and first[6] < 2.0  # drafts accepted by the batch of 8, predicted
    assert state["opening_reach"][0] < 0.25 and state["alpha_positions"][0] > 0.9
    # without the opening estimate the first round drafts what the last request ended with, and expects it all
    cfg_off = DraftLengthConfig(explore_every=0, l_limit=8, opening=False, trace=True)
    memory_off, firsts_off, last_off = _requests(cfg_off, 5, ahead, lambda L: 0)
    assert memory_off.opening is None and all(f[0] >= 4 for f in firsts_off[2:])
    assert "opening_reach" not in last_off.describe()
    first_off = last_off.describe()["trace"][0]
    assert first_off[0] >= 4 and first_off[6] > 6 * first_off[0]


def test_a_first_round_predicts_what_earlier_first_rounds_accepted():
    """First rounds that take their first draft and never a second: the first round drafts short, and its trace
    predicts about one draft per sequence, not what the rounds after it take."""
    cfg = DraftLengthConfig(explore_every=0, l_limit=8, trace=True)
    _, firsts, last = _requests(cfg, 6, False, lambda L: min(L, 1))
    L, B, _, _, _, accepted, predicted = last.describe()["trace"][0]
    assert 1 <= L <= 3 and all(1 <= f[0] <= 3 for f in firsts[2:])
    assert accepted == 8 and predicted < 8 * 1.2  # near certain at position 1, next to nothing past it


def test_first_rounds_sent_to_plain_decoding_are_drafted_again_in_time():
    """A first round drafted nothing counts nothing, so its estimate could never recover; the counts fade with
    every request instead, toward the batch's rate, and a later request's first round drafts again."""
    cfg = DraftLengthConfig(explore_every=0, l_limit=8)
    _, firsts, _ = _requests(cfg, 40, False, lambda L: 0)
    opening = [f[0] for f in firsts[2:]]
    plain = opening.index(0)  # first rounds that never pay go plain ...
    assert any(L > 0 for L in opening[plain:])  # ... and are tried again, as the counts fade


def test_a_prepared_first_round_is_decided_then_and_handed_out_by_the_first_lengths():
    cfg = DraftLengthConfig(explore_every=0, l_limit=8)
    memory, _, _ = _requests(cfg, 4, False, lambda L: 0)  # first rounds that fail: openings drafted short
    unprepared = make_policy(cfg, SEQS, FakeClock(lambda L: 1.0, 0.1), memory=memory)
    want = unprepared.lengths(SEQS)[0]
    clock = FakeClock(lambda L: 1.0, 0.1)
    policy = make_policy(cfg, SEQS, clock, memory=memory)
    policy.prepare(SEQS)
    assert policy.rounds == 0 and clock.L is None  # no round started, no clock running
    saved, memory.opening = memory.opening, None  # what the first round reads is gone: the decision was made
    try:
        assert policy.lengths(SEQS[:7]) == [want] * 7  # to the sequences live then (one finished on its first token)
    finally:
        memory.opening = saved
    assert want <= 1 and policy.lengths(SEQS)[0] >= 4  # the next round decided in its turn, from the batch's rates
    fixed = make_policy(DraftLengthConfig(policy="fixed", l0=3), SEQS, FakeClock(lambda L: 1.0, 0.1))
    fixed.prepare(SEQS)
    assert fixed.lengths(SEQS) == [3] * 8


@pytest.mark.parametrize("drafter", ["model", "feature"])
@pytest.mark.parametrize("static", [False, True], ids=["eager", "static-shapes"])
def test_a_requests_opening_reads_nothing_from_the_device_before_its_first_tokens(tiny_engine, monkeypatch,
                                                                                   drafter, static):
    """From the prefill's launch to the first tokens' read, the host waits for nothing: both caches' forks take the
    prompts' widths from the host, so the draft's prefill and the policy's first decision run while the device
    prefills (a read there would wait for the whole prefill)."""
    seed = 7 + static  # its own engine where static shapes stick
    engine = tiny_engine("llama", **({"feature_seed": seed} if drafter == "feature" else {"draft_seed": seed}))
    if static:
        engine.use_static_shapes(capture=False)  # the CUDA path's buffers and arena, run eagerly
    opening, reads = [False], []
    prefill, read = Engine._prefill, HostRead.tolist

    def started(self, *args, **kwargs):
        opening[0] = True
        return prefill(self, *args, **kwargs)

    def first_tokens(self):
        opening[0] = False
        return read(self)

    monkeypatch.setattr(Engine, "_prefill", started)
    monkeypatch.setattr(HostRead, "tolist", first_tokens)

    def counting(name: str):
        real = getattr(torch.Tensor, name)

        def counted(self, *args):
            if opening[0]:
                reads.append(name)
            return real(self, *args)

        return counted

    for name in ("item", "tolist", "__bool__", "__int__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    for method in ("bass", "regular"):
        result = engine.generate(["def fib(n):\n", "x = [1, 2"], k=2, params=params, method=method, drafter="model")
        assert result.stats.tokens > 0 and not opening[0]
    assert reads == []
