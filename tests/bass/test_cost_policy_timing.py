"""The cost-aware draft-length policy's timing (DESIGN.md §7; `bass.draft_length`, Timing and Exploration):
which rounds are cost samples, its probes and their back-off, its memory, its climb, its trace; on fake
clocks, rounds read in order (as on the CPU) or a round ahead (as on CUDA)."""

import numpy as np
import pytest
from policy_clocks import FakeClock, PipelinedClock, by_position, geometric, make_policy, rounds, rounds_ahead

from bass.config import DraftLengthConfig
from bass.draft_length import PLAIN_GAP_MAX, START_ROUNDS, DraftLengthPolicy, PolicyMemory
from bass.round_costs import CostModel

START = [0] * START_ROUNDS  # a request's first rounds: warm-ups, plain (`bass.draft_length`, Timing)
PROBES = START + [0, 0, 2, 2, 2]  # then plain decoding and a draft, each timed twice (read in order)


def test_hopeless_probes_are_skipped():
    """A draft step slower than a verify step cannot pay even at α = 1: after its one timed probe (the round
    before it is its untimed warm-up), no exploration. (In this test each round is read before the next is
    decided, as on the CPU: every round is a run of its length so far.)"""
    seqs = [0, 1]
    policy = make_policy(DraftLengthConfig(explore_every=4), seqs, FakeClock(lambda L: 1.0, 1.2))
    chosen = rounds(policy, seqs, 20)  # even with every draft accepted
    assert chosen == START + [0, 0, 2, 2] + [0] * (16 - START_ROUNDS)


def test_exploration_recovers_from_a_wrong_early_estimate():
    """Early rounds see a useless draft, later the draft becomes good: the rare probe finds it."""
    rng = np.random.default_rng(4)
    cfg = DraftLengthConfig(explore_every=8, alpha_decay=0.9)
    seqs = [0, 1, 2, 3]
    policy = make_policy(cfg, seqs, FakeClock(lambda L: 1.0 + 0.01 * L, 0.05))
    for r in range(300):
        alpha = 0.0 if r < 30 else 0.9
        lengths = policy.lengths(seqs)
        policy.update(seqs, [geometric(rng, alpha, n) for n in lengths], lengths)
        if r == 29:
            assert policy.choice == 0
    assert policy.choice >= 5


def test_exploration_times_plain_decoding_and_both_neighbours():
    """Every explore_every rounds one round times, in turn, the next length up, the next down and L = 0, so
    no estimate the argmax compares with L* goes stale (here every length is worth a probe: probe_margin 1)."""
    seqs = list(range(8))
    cfg = DraftLengthConfig(explore_every=4, l_limit=8, probe_margin=1.0)
    policy = make_policy(cfg, seqs, FakeClock(lambda L: 1.0 + 0.01 * L, 0.1))
    probes, kinds = [], []  # the exploring rounds, and where each probe went against that round's L*
    for r in range(80):
        lengths = policy.lengths(seqs)
        policy.update(seqs, [min(n, 2) for n in lengths], lengths)  # every sequence takes two drafts
        L, star = lengths[0], policy.choice
        if r >= 40 and star != L:  # an exploring round
            probes.append(r)
            kinds.append({star + 1: "up", star - 1: "down", 0: "plain"}[L])
        elif r >= 40:
            assert star >= 2
    assert np.diff(probes).tolist() == [cfg.explore_every] * (len(probes) - 1)
    assert kinds[:3] in (["up", "down", "plain"], ["down", "plain", "up"], ["plain", "up", "down"])
    assert kinds == (kinds[:3] * 4)[:len(kinds)]  # in turn


def test_probes_skip_lengths_that_could_not_win():
    """A probe times only a length within probe_margin of L*'s predicted rate. Every sequence takes two
    drafts: L* = 2 (3 tokens for 1.22), L = 3 is close (3 for 1.33), L = 1 (2 for 1.11) and plain decoding (1
    for 1) are not, so only L = 3 is probed. When the draft turns poor, drafting's lead shrinks under the
    margin and plain decoding is timed again."""
    rng = np.random.default_rng(0)
    seqs = list(range(8))
    cfg = DraftLengthConfig(explore_every=4, l_limit=8)
    policy = make_policy(cfg, seqs, FakeClock(lambda L: 1.0 + 0.01 * L, 0.1))
    good, poor = [], []
    for r in range(160):
        lengths = policy.lengths(seqs)
        if r < 80:
            policy.update(seqs, [min(n, 2) for n in lengths], lengths)
        else:
            policy.update(seqs, [geometric(rng, 0.15, n) for n in lengths], lengths)
        (good if 40 <= r < 80 else poor if r >= 120 else []).append((lengths[0], policy.choice))
    assert {n for n, star in good if n != star} == {3}  # probes, all of the one length that could win
    assert sum(n != star for n, star in good) >= 40 // cfg.explore_every - 1  # on schedule
    assert all(star == 2 for _, star in good)
    assert any(n == 0 and star > 0 for n, star in poor)  # plain decoding is timed again


def test_a_probed_length_timed_once_is_timed_again_next_round():
    """What the H100 showed at batch 32: L = 1's only sample was a graph capture (20 ms against 5), and the
    policy never drafted again. A probe of a length with fewer than two samples runs two rounds, and the
    bucket keeps the lower sample."""
    seqs = list(range(8))
    cfg = DraftLengthConfig(explore_every=4, probe_lengths=(0, 2))

    class CaptureOnce(FakeClock):  # a capture the clock does not see (a compile would look the same)
        done = False

        def stop(self):
            L, cost = self.L, super().stop()
            if L == 1 and not self.done:  # the first round at L = 1 captures a graph
                self.done, cost = True, cost + 19.0
            return cost

    # a draft round costs 1.5 + 0.3 L, plain decoding 1; each sequence accepts one draft token, never two
    policy = make_policy(cfg, seqs, CaptureOnce(lambda L: 1.0 + 0.5 * (L > 0), 0.3))
    chosen = rounds(policy, seqs, 12, lambda lengths: [min(n, 1) for n in lengths])
    first = chosen.index(1)
    assert chosen[:first] == PROBES + [0] * (first - len(PROBES))  # L = 2 does not pay: plain until a probe
    assert chosen[first + 1] == 1  # timed again at once, not an exploration gap later
    assert policy.costs.describe()["round_ms"][8][1] == pytest.approx(1.8e3)  # the capture forgotten


def test_a_drafting_round_after_plain_ones_is_a_warm_up_and_not_timed():
    """What the H100 showed at batch 8 with the trained draft: the first drafting round after plain ones feeds
    their tokens to the draft first and costs far more than a drafting round in a run of them; timed, it kept
    the policy at plain decoding. Each drafting probe after plain rounds runs twice and only the second is
    timed, so the estimate is a run's cost and the draft that pays is found."""
    seqs = list(range(8))
    cfg = DraftLengthConfig(explore_every=4, probe_lengths=(0, 2))

    class WarmUp(FakeClock):
        previous = 0

        def stop(self):
            L, cost = self.L, super().stop()
            if L and not self.previous:  # the drafter catches up on what plain rounds emitted
                cost += 3.0
            self.previous = L
            return cost

    # in a run, a drafting round costs 1.2 + 0.1 L against 1 for plain decoding; every draft is accepted
    policy = make_policy(cfg, seqs, WarmUp(lambda L: 1.0 + 0.2 * (L > 0), 0.1))
    chosen = rounds(policy, seqs, 12 + START_ROUNDS)
    assert chosen[:len(PROBES)] == PROBES
    assert policy.costs.describe()["round_ms"][8][2] == pytest.approx(1.4e3)  # the warm-up's 4.4 never counted
    assert policy.choice > 0 and chosen[-1] > 0  # drafting pays, and the policy drafts


def test_a_requests_first_rounds_are_no_cost_samples():
    """What the H100 showed at batch 32: every request's first two rounds cost 1.5-2.5x a steady round (the
    draft reads the prompt, the look-ahead pipeline fills). Sampled, they held the estimates of the lengths run
    at requests' starts above the lengths run long; not sampled, every estimate is the steady cost, request
    after request."""
    seqs = list(range(8))
    cfg = DraftLengthConfig(explore_every=0, probe_lengths=(0, 2))

    class SlowStart(FakeClock):
        ended = 0

        def stop(self):
            cost = super().stop()
            self.ended += 1
            return cost + 3.0 * (self.ended <= 2)  # each request has its own clock

    memory = PolicyMemory(CostModel(cfg), cfg.alpha_prior)
    for _ in range(3):
        policy = make_policy(cfg, seqs, SlowStart(lambda L: 1.0 + 0.2 * (L > 0), 0.1), memory=memory)
        rounds(policy, seqs, 8)
        measured = memory.costs.describe()["round_ms"][8]
        assert {0, 2} <= set(measured)
        assert measured == {L: pytest.approx(1e3 * (1.0 + 0.2 * (L > 0) + 0.1 * L)) for L in measured}


def test_probes_of_drafting_back_off_while_plain_decoding_wins_and_the_gap_is_remembered():
    """A drafter that could pay only if its acceptance were much higher: the probes of L = 1 come 4, 8, 16 ..
    rounds apart (up to PLAIN_GAP_MAX x explore_every), and the next request starts from the gap reached."""
    rng = np.random.default_rng(5)
    seqs = list(range(8))
    cfg = DraftLengthConfig(explore_every=4)
    memory = PolicyMemory(CostModel(cfg), cfg.alpha_prior)
    policy = make_policy(cfg, seqs, FakeClock(lambda L: 1.0 + 0.3 * (L > 0), 0.05), memory=memory)
    drafted = []
    for r in range(400):
        lengths = policy.lengths(seqs)
        policy.update(seqs, [geometric(rng, 0.05, n) for n in lengths], lengths)
        if lengths[0] and r >= len(PROBES):  # past the probes of the first rounds
            drafted.append(r)
    drafted = [r for r in drafted if r - 1 not in drafted]  # a new length's probe takes two rounds running
    gaps, cap = np.diff(drafted).tolist(), PLAIN_GAP_MAX * cfg.explore_every
    assert policy.choice == 0 and len(drafted) <= 12  # at a fixed interval of 4: about 100
    settled = gaps[next(i for i, g in enumerate(gaps) if g == 2 * cfg.explore_every):]  # from the first back-off
    assert all(b in (2 * a, cap) for a, b in zip(settled, settled[1:])) and settled[-1] == cap == memory.plain_gap
    memory.alpha = policy.acceptance.pooled()  # as the engine hands it on
    again = make_policy(cfg, seqs, FakeClock(lambda L: 1.0 + 0.3 * (L > 0), 0.05), memory=memory)
    first = None
    for r in range(200):
        lengths = again.lengths(seqs)
        again.update(seqs, [0] * len(seqs), lengths)
        first = r if first is None and lengths[0] else first
    assert first == PLAIN_GAP_MAX * cfg.explore_every  # its first probe: no probes, no short gaps again


def test_memory_skips_the_probes_of_measured_batch_sizes():
    """A policy handed an earlier request's memory decides from its first round: no probe where the costs
    were measured; the earlier request's pooled acceptance is its prior."""
    seqs = [0, 1]
    cfg = DraftLengthConfig(explore_every=0)
    first = make_policy(cfg, seqs, FakeClock(lambda L: 1.0, 0.6))
    chosen = rounds(first, seqs, 10, lambda lengths: [0] * len(seqs))  # a useless, costly draft
    assert chosen[:len(PROBES)] == PROBES and set(chosen[len(PROBES):]) == {0}
    memory = PolicyMemory(first.costs, first.acceptance.pooled())
    second = make_policy(cfg, seqs, FakeClock(lambda L: 1.0, 0.6), memory=memory)
    assert second.acceptance.pooled() == pytest.approx(memory.alpha) and memory.alpha < cfg.alpha_prior
    assert [second.lengths(seqs)[0] for _ in range(4)] == [0, 0, 0, 0]
    # a batch size never measured is probed as before (costs borrowed from the nearest size say nothing of it)
    wide = list(range(16))
    assert not first.costs.known(16) and DraftLengthPolicy(cfg, wide, memory=memory).lengths(wide)[0] == 0


def test_memory_carries_the_acceptance_profile_through_a_poor_first_round():
    """An earlier request's profile is the next one's prior, with memory_strength pseudo-trials: a request's
    first drafting round, after the prompt, accepts less than the rounds after it, and with the guess's
    prior_strength it pulled the batch's rates down and the H100's requests drafted L = 0 .. 2 in their third
    round. Here the earlier request's draft took three of four positions (L* = 3); a first round in which
    six of eight sequences reject the first draft leaves L* at 3 with the memory and drops it without."""
    rng = np.random.default_rng(1)
    seqs = list(range(8))
    cfg = DraftLengthConfig(explore_every=0, l_limit=8)
    clock = lambda: FakeClock(lambda L: 1.0 + 0.05 * (L > 0), 0.1)  # noqa: E731
    earlier = make_policy(cfg, seqs, clock())
    rounds(earlier, seqs, 120, lambda lengths: [by_position(rng, (0.8, 0.75, 0.7, 0.3), n) for n in lengths])
    assert earlier.choice == 3
    memory = PolicyMemory(earlier.costs, cfg.alpha_prior)
    memory.learn(earlier.acceptance)
    np.testing.assert_allclose(memory.profile, earlier.acceptance.profile())

    def after_a_poor_round(memory):
        policy = make_policy(cfg, seqs, clock(), memory=memory)
        lengths = policy.lengths(seqs)
        policy.update(seqs, [0] * 6 + [3, 3], lengths)
        policy.lengths(seqs)
        return policy.choice

    assert after_a_poor_round(memory) == 3
    guess = PolicyMemory(earlier.costs, memory.alpha)  # the pooled rate alone, leaned on with prior_strength
    assert after_a_poor_round(guess) < 3


@pytest.mark.parametrize("extra,seen", [(2600.0, False), (8.0, True)], ids=["compile", "capture"])
def test_a_one_off_in_the_first_timed_draft_round_does_not_condemn_drafting(extra, seen):
    """What the H100 showed at batch 8: the first timed L = 2 round paid for a one-off and the policy, judging
    drafting hopeless from that one sample, decoded plainly for the rest of the run.
      - compile: kernels compiled for a new row count, 2.6 s against 1 plain step; the clock cannot see it,
        but the round costs over `bass.round_costs.OUTLIER_RATIO` x (1 + L) plain steps: dropped;
      - capture: a CUDA graph captured (a shape that no wider batch's graph can run captures its own the
        first time it runs), at a cost that would pass for a steady one; the clock sees it
        (`bass.graphs.captures`) and the round is no sample.
    Either way the next round times L = 2, and the draft that pays is found."""
    seqs = list(range(8))
    cfg = DraftLengthConfig(explore_every=4, probe_lengths=(0, 2))

    class OneOff(FakeClock):
        drafted = 0

        def stop(self):
            L, cost = self.L, super().stop()
            self.drafted += bool(L)
            first_timed = self.drafted == 2 and bool(L)  # (the probe's warm-up round is not timed)
            self.captured = first_timed and seen
            return cost + extra * first_timed

    policy = make_policy(cfg, seqs, OneOff(lambda L: 1.0 + 0.2 * (L > 0), 0.1))
    chosen = rounds(policy, seqs, 12)
    assert chosen[:len(PROBES)] == PROBES and policy.costs.dropped == (not seen)
    assert policy.costs.describe()["round_ms"][8][2] == pytest.approx(1.4e3)
    assert policy.choice > 0 and chosen[-1] > 0  # drafting pays, and the policy drafts


def test_the_policy_counts_the_rounds_that_came_back():
    """A round launched ahead is decided (`lengths`) but never read when the round before it finishes every
    sequence: the policy's account counts the rounds whose results it saw, as the engine's report does."""
    policy = DraftLengthPolicy(DraftLengthConfig(), [0, 1])
    rounds(policy, [0, 1], 5)
    policy.lengths([0, 1])  # launched ahead of the last read, never read
    assert policy.describe()["rounds"] == 5 and policy.rounds == 6


@pytest.mark.parametrize("policy_name", ["fixed", "heuristic", "cost"])
def test_the_trace_records_every_round_whatever_the_policy(policy_name):
    """cfg.trace: per round that came back, its length, batch, clock time, whether it was a cost sample,
    whether it was launched before the round before it ended, how many drafts the batch accepted and, for the
    cost policy, how many its estimates expected; a fixed length's rounds are timed by the same clock as the
    cost policy's, so a benchmark can compare what each pays."""
    seqs = [0, 1, 2]
    policy = DraftLengthPolicy(DraftLengthConfig(policy=policy_name, l0=2, trace=True, explore_every=0), seqs)
    first = policy.lengths(seqs)
    policy.update(seqs, [0, 0, 0], first)
    second = policy.lengths(seqs)
    third = policy.lengths(seqs)  # launched ahead, before the second round is read
    policy.update(seqs, [2, 1, 0], second)
    policy.update(seqs[:2], [0, 2], third[:2])  # a sequence finished in the second round
    trace = policy.describe()["trace"]
    assert [(L, B) for L, B, *_ in trace] == [(max(first), 3), (max(second), 3), (max(third), 2)]
    assert [rnd[4] for rnd in trace] == [False, False, True]  # launched ahead
    assert [rnd[5] for rnd in trace] == [0, 3, 2]  # accepted by the batch
    assert all(ms >= 0 for _, _, ms, *_ in trace) and policy.describe()["policy"] == policy_name
    if policy_name == "fixed":
        assert all(sample for _, _, _, sample, *_ in trace)
    if policy_name != "cost":
        assert all(rnd[6] is None for rnd in trace)
        return
    # the first round, before any outcome: every position at the prior, 3 sequences asked max(first) each
    p, L = policy.cfg.alpha_prior, max(first)
    assert trace[0][6] == pytest.approx(3 * sum(p ** j for j in range(1, L + 1)), abs=1e-3)
    assert all(0 <= rnd[6] <= rnd[0] * rnd[1] for rnd in trace)


def test_no_trace_and_no_clock_unless_asked():
    policy = DraftLengthPolicy(DraftLengthConfig(policy="fixed", l0=2), [0])
    policy.update([0], [1], policy.lengths([0]))
    assert "trace" not in policy.describe() and policy.ended == 0


def test_the_argmax_climbs_one_length_bucket_past_what_it_timed():
    """A cheap draft that is always accepted: the best length is the longest, but the argmax reaches it a
    bucket at a time, each length timed before the next (module docstring, Exploration): an extrapolated
    curve never sends a round to a width no round has run (graphs captured, kernels compiled, mid-run)."""
    from bass.round_costs import L_BUCKETS, bucket

    seqs = list(range(8))
    policy = make_policy(DraftLengthConfig(l_limit=32, explore_every=0), seqs, FakeClock(lambda L: 1.0, 0.01))
    timed, chosen = 0, []
    for r in range(120):
        L = policy.lengths(seqs)[0]
        step = L_BUCKETS[L_BUCKETS.index(bucket(timed, L_BUCKETS)) + 1] if timed < 32 else 32
        assert r < 5 or step >= L, (L, timed)  # past the first probes (0, 0, 2, 2, 2): a bucket up at most
        policy.update(seqs, [L] * len(seqs), [L] * len(seqs))
        timed = max(timed, L)
        chosen.append(L)
    assert chosen[:len(PROBES)] == PROBES and chosen[-1] == 32
    assert sorted(set(chosen)) == [0, *L_BUCKETS[2:]]  # every bucket on the way, in turn


def test_with_rounds_launched_ahead_only_runs_of_a_length_are_timed():
    """What the H100's look-ahead does to a round's time: it holds the launch of the next round, host work
    that grows with the next round's draft and is dearest for a drafting round after plain ones (its drafter
    first feeds what they emitted). A plain round before such a warm-up read 2.58 ms at batch 8 against 1.88
    for regular decoding (`real_bench_2026-11-24_h100_pdl.json`). Timing only rounds followed by a round of
    their length, every estimate is what a run of that length pays: here exactly."""

    def device(L):
        return 1.0 if L == 0 else 1.2 + 0.1 * L

    def launch(L, after):  # the host's launch of the round after: plain 0.6, drafting 1.3 + 0.1 L, after
        if after is None:  # plain rounds 2.0 more (the warm-up's feed)
            return 0.0
        return 0.6 if after == 0 else 1.3 + 0.1 * after + 2.0 * (L == 0)

    steady = {L: max(device(L), launch(L, L)) for L in range(9)}  # 1.0, 1.4, 1.5, ...
    seqs = list(range(8))
    policy = make_policy(DraftLengthConfig(l_limit=8, explore_every=4, trace=True), seqs,
                     PipelinedClock(device, launch))
    chosen = rounds_ahead(policy, seqs, 160)
    assert chosen[:7 + START_ROUNDS] == START + [0, 0, 0, 2, 2, 2, 2]  # each probe length timed twice, a run's rounds
    measured = policy.costs.describe()["round_ms"][8]
    assert len(measured) >= 4 and 0 in measured
    for L, ms in measured.items():
        assert ms == pytest.approx(1e3 * steady[L]), L
    trace = policy.describe()["trace"]
    assert any(ms > 3 for _, _, ms, sample, *_ in trace if not sample)  # the dear rounds were there, untimed
    # every draft accepted: the longest draft, but for the probes: every 4th round, two rounds each
    assert policy.choice == 8 and chosen[-80:].count(8) >= 40


def test_launched_ahead_the_first_round_of_a_new_length_is_no_sample():
    """What the H100 showed at batch 8: launched ahead, a round of a length whose proposal the host runs step by
    step holds its launch in the round before it (excluded: followed by another length), and its own time is
    then short by as much, since its device work ran on that round's clock: L = 14's first rounds read 2.36
    and 2.40 ms against 3.84 for its later ones, and the policy drafted L = 14 (`bass.draft_length`, Timing).
    Here every new length's launch moves 1.4 ms from a round to the one before it; every estimate must still
    be the steady cost of a run of its length."""

    def steady(L):
        return 1.0 if L == 0 else 1.2 + 0.1 * L

    class Carry(PipelinedClock):
        credit = 0.0  # what the round before took of this round's time

        def stop(self):
            L = self.lengths.popleft()
            after = self.lengths[0] if self.lengths else None
            moved = 1.4 if after not in (None, 0, L) else 0.0  # the launch of a new drafting length
            cost, self.credit = steady(L) - self.credit + moved, moved
            return cost

    seqs = list(range(8))
    policy = make_policy(DraftLengthConfig(l_limit=8, explore_every=4), seqs, Carry(steady, None))
    chosen = rounds_ahead(policy, seqs, 160)
    measured = policy.costs.describe()["round_ms"][8]
    assert len({L for L in measured if L > 0}) >= 3  # it climbed through several lengths, each a new launch
    for L, ms in measured.items():
        assert ms == pytest.approx(1e3 * steady(L)), L
    assert policy.choice == 8 and chosen[-80:].count(8) >= 40  # every draft accepted: the longest pays


@pytest.mark.parametrize("stale_probes", [True, False])
def test_a_length_timed_dear_is_timed_again_once_its_estimate_is_stale(monkeypatch, stale_probes):
    """The trap of the probe screen (`bass.draft_length`, Exploration), from what an H100 memory held at batch 8:
    plain decoding 2.56 ms, L = 1 1.9, L = 2 7.55, where a round costs 1.7 + 0.12 L. The monotone fit makes every
    draft past L = 1 dear, L* = 1, and neither L = 2 nor plain decoding passes the screen. Once L = 2's estimate
    is older than the cost horizon it is probed anyway, reads its true cost, and the policy climbs to the long
    drafts a 0.9 acceptance pays for; without that exemption it drafts L = 1 for good."""
    from bass.round_costs import CostModel

    if not stale_probes:
        monkeypatch.setattr(CostModel, "stale", lambda self, L, B: False)
    rng = np.random.default_rng(7)
    seqs = list(range(8))
    cfg = DraftLengthConfig(l_limit=16)
    memory = PolicyMemory(CostModel(cfg), 0.9)
    for L, ms in ((0, 2.56), (1, 1.9), (2, 7.55)):
        for _ in range(2):
            memory.costs.observe(L, 8, ms)
    chosen = []
    for _ in range(4):  # requests of 150 rounds, the memory carried from one to the next
        policy = make_policy(cfg, seqs, FakeClock(lambda L: 1.7 + 0.02 * L, 0.1), memory=memory)
        for _ in range(150):
            lengths = policy.lengths(seqs)
            policy.update(seqs, [geometric(rng, 0.9, n) for n in lengths], lengths)
            chosen.append(lengths[0])
        memory.learn(policy.acceptance)
    assert set(chosen[:cfg.cost_horizon]) <= {0, 1}  # the trap, while L = 2's estimate is fresh
    if stale_probes:
        assert 2 in chosen and min(chosen[-50:]) >= 4
    else:
        assert set(chosen) <= {0, 1}
