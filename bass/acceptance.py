"""What a round of draft length L is expected to emit, and the acceptance estimates it is computed from: the
objective of the cost-aware draft-length policy (`bass.draft_length`, DESIGN.md §7).

Model. Sequence b accepts draft position i, given that it reached it, with probability α_{b,i}, so with L
draft tokens it emits a_b + 1 tokens where P(a_b >= j) = Π_{i<=j} α_{b,i}, and

    E[tokens_b | L] = 1 + Σ_{j=1..L} Π_{i=1..j} α_{b,i}      (Leviathan et al.'s i.i.d. case, α_{b,i} = α_b:
                                                               (1 − α_b^(L+1)) / (1 − α_b))

A round with draft length L at batch B costs c(L, B), measured whole (drafting, the verify, the host copy,
bookkeeping; `bass.round_costs`), so c(0, B) is exactly one step of regular decoding. Each round we pick

    L* = argmax_{L in 0..l_limit}  Σ_b E[tokens_b | L]  /  c(L, B)

ties going to the shorter L. L = 0 is plain decoding, so as long as the estimates are right BASS is never
slower than regular decoding. One L for the batch: the batched verify is padded to the longest draft, so
its cost depends on max_b l_b, while E[tokens_b] only grows with l_b; given L, l_b = L for every b is
optimal, and a per-sequence choice would buy nothing.

Acceptance estimate. We count "asked" positions, not proposed ones: a drafter may return fewer tokens
than asked (an n-gram match runs out), and a position that was not proposed ends the round exactly like
a rejection (the target's token is emitted, nothing after it). A round with l_b > 0 asked and a_b
accepted is a_b successes and, if a_b < l_b, one failure; positions after the first failure are never
tested, so accepted / proposed would be biased low (it counts them as failures). Per sequence we keep
discounted counts (S_b, T_b) ← (γ S_b + a_b, γ T_b + a_b + [a_b < l_b]), γ = alpha_decay, and the same
pooled over the batch, and shrink toward the pool (empirical Bayes, a Beta prior of strength m):

    ᾱ = (S + m · alpha_prior) / (T + m),        α_b = (S_b + m · ᾱ) / (T_b + m)

so a sequence with little evidence borrows the batch's rate. Acceptance is not constant along the draft (a
model draft drifts: the trained draft's first position is accepted about 0.69 of the time at T 0.8, its
second 0.55, by fixed L = 1 and L = 2 at k = 32 on the H100), so the batch's counts are also kept per
position, (S_i, T_i) over the rounds that reached position i, discounted alike, and each position's rate is
shrunk toward the rate of the position before it (the first toward ᾱ):

    ᾱ_i = (S_i + m · ᾱ_{i-1}) / (T_i + m),        α_{b,i} = min(1, ᾱ_i · α_b / ᾱ)

A position never reached borrows the one before it, so no position is more hopeful than what precedes it (an
earlier per-position profile chose longer drafts and measured worse on the H100,
`real_bench_2026-11-23_h100_position_policy.*`). A sequence scales the profile by its own rate against the
batch's. With one rate for every position, the k = 32 runs estimated α ≈ 0.40 from rounds at L = 2 .. 4, L = 1
looked no better than plain decoding, and the policy decoded plainly: 0.99x where fixed L = 1 made 1.22x
(`real_bench_2026-11-24_h100_trace_k32.json`, `policy_state`); the discount lets both follow the text.

A first request starts from the guess alpha_prior; later ones from what earlier requests of their kind ended
with, ᾱ and the profile ᾱ_i in place of the shrinkage targets above, leaned on with memory_strength
pseudo-trials instead of m (`bass.draft_length`, Memory).

Calibration. The estimates are read to choose L, and the rounds that choose a long L are those whose estimates
ran high, so what those rounds then accept regresses toward the mean: the model over-promises exactly the
lengths it picks for their promise. On the H100 at k = 8 the cost policy's rounds at L = 5 .. 7 accepted 0.75 to
0.95 of the drafts predicted, its rounds at L = 3 1.01 to 1.12 (`real_bench_2026-11-27_h100as.json`, `traces`),
and it drafted L ≈ 4.5 to 4.9 where fixed L = 3 decoded 4 to 9 % faster in the same run. So each position's
prediction is checked against what followed: before a round's outcome updates the counts, the reach it
predicted for each asked position j, R_{b,j} = Π_{i<=j} α_{b,i}, is added to P_j and the outcome [a_b >= j] to
O_j (both discounted by γ per round, and kept from request to request as the profile is), and the objective
reads the reach scaled by their ratio,

    κ_j = (O_j + c) / (P_j + c),        R'_{b,j} = min(R'_{b,j-1}, κ_j R_{b,j})   (R'_{b,0} = 1)

with c = calibration_strength pseudo-counts at κ = 1 (calibrate=False: κ = 1). Interleaved on another H100 it
learnt κ ≈ 1.01-1.15 at positions 1-3 and mostly below 1 past them, and read level with the uncalibrated policy
and with fixed L = 3 (0.907, 0.902 and 0.909 ms/token/seq, `real_bench_2026-11-27_h100at_calibration.json`, the
pair "calibration"): the predictions match what follows (accepted over predicted 0.99-1.00, against 1.02), the
speed did not move.

Opening round. A request's first round follows the prompt and drafts the start of the body, the completion's
least predictable text. Over eleven H100 runs at k = 8 such rounds accepted about one draft per sequence at every
length (1.06 at L = 3, 0.99-1.00 at L = 6 and 7), where the estimate, carried from the end of the request before,
predicted 1.5-2.8, and they cost 3.5 ms at L = 3 against 4.3-4.4 at L = 6 and 7
(`bench/results/policy_gap_2026-11-28_as_to_bl.txt`, the first rounds). So the first rounds of earlier requests of
the kind are counted apart, per position, (S°_i, T°_i) as the batch's counts are and discounted by γ per request
(`PolicyMemory.opening`), and a request's first round reads its reach from them alone, every sequence alike, each
position shrunk toward the one before it, the first toward the batch's ᾱ_1, with m = prior_strength pseudo-trials
(as the batch's profile is: a position no first round reached is no more hopeful than the one before it):

    ᾱ°_1 = (S°_1 + m · ᾱ_1) / (T°_1 + m),   ᾱ°_i = (S°_i + m · ᾱ°_{i-1}) / (T°_i + m),   R°_j = Π_{i<=j} ᾱ°_i

(uncalibrated: κ_j learns the rounds after it). The rounds after it read the estimates above, which the first
round's outcome updates as before; with look-ahead the second round is decided before the first is read. On
another H100 (`real_bench_2026-11-28_h100bm_opening.json`, `traces`) the first rounds of the three default rows
drafted L = 2.5-3 on average in 3.24-3.36 ms, predicting 1.04-1.24 drafts per sequence where they took
1.00-1.08; interleaved with them, the policy without it drafted L = 5.25 in 3.65 ms, predicting 2.37 where they
took 1.00. The 0.3 ms it saved of a request's 115 or so is below the noise: ms/token/seq read 0.889 with it and
0.886 without.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bass.config import DraftLengthConfig


# ---- the objective ---------------------------------------------------------------------------------
def expected_tokens(alphas: Sequence[float] | np.ndarray, l_max: int) -> np.ndarray:
    """[l_max + 1]: Σ_b E[tokens_b | L] for L = 0 .. l_max (module docstring, Model).

    alphas: [B] one rate per sequence for every position, or [B, >= l_max] α_{b,i} per position i = 1 ...
    """
    a = np.asarray(alphas, dtype=np.float64)
    a = np.repeat(a.reshape(-1, 1), l_max, 1) if a.ndim == 1 else a[:, :l_max]  # [B, l_max]
    return tokens_from_reach(np.cumprod(a, axis=1))


def tokens_from_reach(reach: np.ndarray) -> np.ndarray:
    """[l_max + 1]: Σ_b E[tokens_b | L] = Σ_b (1 + Σ_{j <= L} P(a_b >= j)) for L = 0 .. l_max, from reach [B, l_max]
    P(a_b >= j), j = 1 .. l_max (Model; the calibrated reach, Calibration)."""
    B = reach.shape[0]
    return np.concatenate([[float(B)], B + np.cumsum(reach.sum(0))])


def expected_accepted(reach: np.ndarray, asked: Sequence[int]) -> float:
    """Σ_b E[a_b | l_b] = Σ_b Σ_{j <= l_b} P(a_b >= j): the drafts a batch is expected to accept when sequence b
    is asked for asked[b]. reach: [B, >= max(asked)] P(a_b >= j) for j = 1 .. (Model: Π_{i <= j} α_{b,i})."""
    return float(sum(np.asarray(reach, dtype=np.float64)[b, :n].sum() for b, n in enumerate(asked)))


def best_length(tokens: Sequence[float] | np.ndarray, round_cost: Sequence[float] | np.ndarray,
                margin: float = 0.0) -> int:
    """L* = argmax_L tokens[L] / round_cost[L], L = 0 .. len(round_cost) - 1, where tokens[L] = Σ_b E[tokens_b | L]
    (`expected_tokens`, or the calibrated `AcceptanceEstimator.expected_tokens`); with a margin m, the shortest L
    within m of it (`shortest_within`).

    Ties go to the shorter length (np.argmax returns the first maximum).
    """
    c = np.asarray(round_cost, dtype=np.float64)
    return shortest_within(np.asarray(tokens, dtype=np.float64)[:len(c)] / np.maximum(c, 1e-12), margin)


def shortest_within(rate: np.ndarray, margin: float = 0.0) -> int:
    """The shortest L whose predicted rate is at least (1 − margin) · max_L rate[L]: the argmax at margin 0.

    A margin makes a longer draft earn its place (`DraftLengthConfig.length_margin`): near a flat optimum the
    shorter length gives up at most the margin by the estimates, and risks less where they are wrong.
    """
    rate = np.asarray(rate, dtype=np.float64)
    best = int(np.argmax(rate))
    near = np.flatnonzero(rate >= (1.0 - margin) * rate[best]) if margin > 0 else ()
    return int(near[0]) if len(near) else best  # (none: a NaN rate, which the argmax reports as before)


def position_outcomes(asked: Sequence[int], accepted: Sequence[int], size: int) -> np.ndarray:
    """[2, size] (S_j, T_j) of one round: per draft position j = 1 .., how many sequences accepted it and how many
    reached it, a_b successes and, if a_b < n_b, one failure (module docstring, Acceptance estimate)."""
    cols = np.arange(size)[None, :]  # [1, size]
    a = np.asarray(accepted)[:, None]  # [B, 1]
    reached = a + (a < np.asarray(asked)[:, None])
    return np.stack([(cols < a).sum(0), (cols < reached).sum(0)]).astype(np.float64)


def opening_reach(counts: np.ndarray, first: float, l_max: int, m: float) -> np.ndarray:
    """[l_max] R°_j = Π_{i<=j} ᾱ°_i, the reach of a request's first round (module docstring, Opening round), from
    the counts [2, >= l_max] of earlier requests' first rounds, position 1 shrunk toward the batch's ᾱ_1 (`first`)."""
    succ, trials = counts[0, :l_max].tolist(), counts[1, :l_max].tolist()  # (fewer where l_max > l_limit)
    rates, before = np.empty(len(succ)), first
    for i, (s, t) in enumerate(zip(succ, trials, strict=True)):
        before = rates[i] = (s + m * before) / (t + m)
    return np.minimum(1.0, np.cumprod(rates))


# ---- estimators ------------------------------------------------------------------------------------
class AcceptanceEstimator:
    """Per-sequence acceptance α_b from discounted (successes, trials), shrunk to the batch's pooled rate.

    `prior` / `profile`: the pooled rate and the per-position profile an earlier request of this kind ended
    with (`PolicyMemory`), which the batch's rates lean on with memory_strength pseudo-trials; without them,
    alpha_prior with prior_strength (module docstring, Acceptance estimate)."""

    def __init__(self, cfg: DraftLengthConfig, prior: float | None = None, profile: np.ndarray | None = None,
                 calibration: tuple[np.ndarray, np.ndarray] | None = None):
        """`calibration`: an earlier request's (O_j, P_j) (module docstring, Calibration); the three as `memory()`
        returns them."""
        self.cfg = cfg
        self.prior = cfg.alpha_prior if prior is None else prior  # the pooled prior mean
        self.prior_profile = None if profile is None else np.asarray(profile, dtype=np.float64)  # [l_limit]
        self.batch_strength = cfg.prior_strength if profile is None else cfg.memory_strength
        self.succ: dict[int, float] = {}
        self.trials: dict[int, float] = {}
        self.pool_succ = self.pool_trials = 0.0
        self.pos_succ = np.zeros(cfg.l_limit)  # [l_limit] per draft position: the batch's discounted counts
        self.pos_trials = np.zeros(cfg.l_limit)
        self._profile: np.ndarray | None = None  # `profile()` until the next observation (read on every round)
        # `expected_tokens` of the last batch asked, until the next observation: a plain round observes nothing,
        # so a policy at L* = 0 would otherwise recompute the same curve on the host every round
        self._tokens: tuple[tuple[tuple[int, ...], int], np.ndarray] | None = None
        # per position: outcomes O_j and predicted reach P_j of the rounds that asked for it (Calibration)
        self.cal_obs, self.cal_pred = (np.zeros(cfg.l_limit), np.zeros(cfg.l_limit)) if calibration is None else \
            (np.array(calibration[0], dtype=np.float64), np.array(calibration[1], dtype=np.float64))

    def memory(self) -> tuple:
        """What the next request of this kind starts from (`PolicyMemory`): this constructor's arguments after
        `cfg`, (ᾱ, ᾱ_i, (O_j, P_j))."""
        return self.pooled(), self.profile().copy(), (self.cal_obs.copy(), self.cal_pred.copy())

    def observe(self, seqs: Sequence[int], asked: Sequence[int], accepted: Sequence[int]) -> None:
        """One round: sequence seqs[i] was asked for asked[i] positions and accepted accepted[i]."""
        g = self.cfg.alpha_decay
        drafted = [(q, n, a) for q, n, a in zip(seqs, asked, accepted, strict=True) if n > 0]
        if not drafted:
            return
        if self.cfg.calibrate:  # what the estimates before this outcome predicted of it
            self._check([q for q, _, _ in drafted], [n for _, n, _ in drafted], [a for _, _, a in drafted])
        self._profile = self._tokens = None
        self.pool_succ *= g
        self.pool_trials *= g
        self.pos_succ *= g
        self.pos_trials *= g
        for q, n, a in drafted:
            t = a + (a < n)  # a successes, then the first failure unless all asked positions were taken
            self.succ[q] = g * self.succ.get(q, 0.0) + a
            self.trials[q] = g * self.trials.get(q, 0.0) + t
            self.pool_succ += a
            self.pool_trials += t
            self.pos_succ[:a] += 1  # positions 1 .. a accepted, position a + 1 reached and rejected
            self.pos_trials[:t] += 1

    def _check(self, seqs: list[int], asked: list[int], accepted: list[int]) -> None:
        """Add a round's predicted reach and outcomes per asked position to (P_j, O_j) (Calibration)."""
        g, cols = self.cfg.alpha_decay, np.arange(self.cfg.l_limit)
        asked_to = cols[None, :] < np.asarray(asked)[:, None]  # [B, l_limit] positions j = 1 .. n_b
        self.cal_pred *= g
        self.cal_obs *= g
        self.cal_pred += (np.cumprod(self.position_alphas(seqs), axis=1) * asked_to).sum(0)
        self.cal_obs += ((cols[None, :] < np.asarray(accepted)[:, None]) & asked_to).sum(0)

    def calibration(self) -> np.ndarray:
        """[l_limit] κ_j, what the rounds that asked for position j accepted there over what was predicted,
        shrunk to 1 with calibration_strength pseudo-counts (all 1 with calibrate=False)."""
        if not self.cfg.calibrate:
            return np.ones(self.cfg.l_limit)
        c = self.cfg.calibration_strength
        return (self.cal_obs + c) / (self.cal_pred + c)

    def reach(self, seqs: Sequence[int], l_max: int) -> np.ndarray:
        """[B, l_max] R'_{b,j}: the calibrated P(a_b >= j), j = 1 .. l_max, never rising along the draft."""
        raw = np.cumprod(self.position_alphas(seqs)[:, :l_max], axis=1) * self.calibration()[None, :l_max]
        return np.minimum.accumulate(np.minimum(raw, 1.0), axis=1)

    def expected_tokens(self, seqs: Sequence[int], l_max: int) -> np.ndarray:
        """[l_max + 1] Σ_b E[tokens_b | L] for L = 0 .. l_max from the calibrated reach (Model, Calibration);
        read-only, the same array until an observation changes the estimates or another batch is asked."""
        key = (tuple(seqs), l_max)
        if self._tokens is None or self._tokens[0] != key:
            tokens = tokens_from_reach(self.reach(seqs, l_max))
            tokens.flags.writeable = False
            self._tokens = key, tokens
        return self._tokens[1]

    def expected_accepted(self, seqs: Sequence[int], asked: Sequence[int]) -> float:
        """Σ_b E[a_b | l_b = asked[b]] from the calibrated reach (`expected_accepted`)."""
        return expected_accepted(self.reach(seqs, max(asked, default=0)), asked)

    def opening(self, counts: np.ndarray, B: int, l_max: int) -> np.ndarray:
        """[B, min(l_max, l_limit)] the reach of a request's first round from earlier first rounds' counts [2,
        l_limit], the same for every sequence (module docstring, Opening round)."""
        reach = opening_reach(counts, float(self.profile()[0]), l_max, self.cfg.prior_strength)
        return np.broadcast_to(reach, (B, len(reach)))

    def pooled(self) -> float:
        """ᾱ, the batch's rate under the prior."""
        m = self.batch_strength
        return (self.pool_succ + m * self.prior) / (self.pool_trials + m)

    def alphas(self, seqs: Sequence[int]) -> np.ndarray:
        """α_b for each of `seqs`, over every position."""
        m, pool = self.cfg.prior_strength, self.pooled()
        return np.array([(self.succ.get(q, 0.0) + m * pool) / (self.trials.get(q, 0.0) + m) for q in seqs])

    def profile(self) -> np.ndarray:
        """[l_limit] ᾱ_i, the batch's rate at draft position i = 1 .., each shrunk toward the one before (or
        toward an earlier request's ᾱ_i, from memory)."""
        if self._profile is None:
            m, out, before = self.batch_strength, np.empty(len(self.pos_succ)), self.pooled()
            known = self.prior_profile
            for i, (s, t) in enumerate(zip(self.pos_succ.tolist(), self.pos_trials.tolist(), strict=True)):
                prior = before if known is None or i >= len(known) else known[i]
                before = out[i] = (s + m * prior) / (t + m)
            out.flags.writeable = False  # shared by every read until the next observation
            self._profile = out
        return self._profile

    def position_alphas(self, seqs: Sequence[int]) -> np.ndarray:
        """[B, l_limit] α_{b,i}: the batch's profile scaled by each sequence's rate against the batch's."""
        scale = self.alphas(seqs) / max(self.pooled(), 1e-9)  # [B]
        return np.minimum(1.0, scale[:, None] * self.profile()[None, :])
