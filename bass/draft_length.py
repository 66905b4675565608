"""Draft-length policies: cost-aware (the default), the paper's heuristic, a fixed length, a per-sequence variant.

Cost-aware policy (DESIGN.md §7)
--------------------------------
The objective, Σ_b E[tokens_b | L] / c(L, B) from per-sequence acceptance estimates, and those estimates are
`bass.acceptance`'s (its docstring: the model and the estimator). L* is its argmax, or with a length margin m
(`DraftLengthConfig.length_margin`) the shortest L within m of the argmax's rate.

Costs (`bass.round_costs`): c(L, B) is measured on every round, per L bucket and batch bucket, without
adding a host synchronisation, and fitted monotone in L.

Memory. The costs are the device's, not the request's: an engine hands each cost-policy request the
costs its earlier requests of the same kind measured (same drafter, backend, look-ahead, greedy or not,
`DraftLengthConfig.remember`) and the acceptance they ended with as the prior (`PolicyMemory`): the pooled ᾱ
and the profile ᾱ_i, which the batch's counts then lean on with memory_strength pseudo-trials (prior_strength
is for a guess). So a short request does not pay the probes again, and one round does not overturn what
earlier requests measured: a request's first drafting round follows the prompt, drafts the first line of the
body, and accepts far less than the rounds after it (on the H100 at k = 8, L = 3: 1 or 2 of 24 drafts in 4 of
8 requests, about 11 later on, `real_bench_2026-11-25_h100_probes.json`, `traces`). With the guess's 4
pseudo-trials against its 8 trials such a round pulled ᾱ_1 from about 0.72 to 0.32, and the traced requests
drafted L = 0, 1 or 2 in their third round, 6 of 8 of them (`real_bench_2026-11-25_h100_sparseq.json`).
Every round still updates the shared estimates. The memory also counts earlier requests' first rounds apart, and a
request's first round drafts for them (`bass.acceptance`, Opening round; `DraftLengthConfig.opening`).

Timing. A round's time is a cost sample only inside a run of rounds of its length: not the first drafting
round after plain ones or, launched ahead, after a round of another length, and not a round followed by one of
another length decided before it was read.
  - The first drafting round after plain ones is a warm-up: its drafter first feeds what the plain rounds
    emitted (a wider step, a graph of another width), which no steady run of drafting rounds pays. Timed,
    those rounds kept the trained draft at plain decoding at batch 8 on the H100 (L = 2 read 5.05 ms
    against 3.3 for a pipelined L = 1 round, `real_bench_2026-11-24_h100_policy*.json`).
  - With look-ahead (`bass.pipeline`), the host launches round r + 1 between round r - 1's end and round
    r's, so round r's time holds that launch: host work that grows with r + 1's draft and is dearest for a
    warm-up. A plain round before a warm-up read 2.58 ms at batch 8 against 1.88 for regular decoding
    (`real_bench_2026-11-24_h100_pdl.json`, `policy_state`): each plain probe amid drafting rounds did.
    The round after it is then short by as much: its device work ran while round r's clock did. So the first
    round of a new drafting length launched ahead is no sample either. Where a length's launch is host work
    (its proposal run step by step until its graph is captured between requests), that round read the
    cheapest: in batch bucket 8 on the H100, the rounds before two first rounds of L = 14 read 4.67 and 4.97
    ms (L = 3 and 2), and those first rounds 2.36 and 2.40, sampled, against a median of 3.84 for L = 14
    rounds after one of their length. The row ended with L = 14 costed at 3.40 ms, and its median pass
    drafted L = 14 in 17 rounds, accepting 2.14 drafts a sequence in 3.83 ms where its L = 3 rounds took
    1.56 in 2.21 (`real_bench_2026-11-28_h100bn.json`, the first cost-policy row at k = 8, `policy_state`
    and `traces`).
  - A request's first START_ROUNDS rounds are warm-ups too: the drafter's first step reads the whole prompt,
    and the look-ahead pipeline fills. On the H100 at batch 32 they read 4.2–7.9 ms against 2.8 for a steady
    L = 1 round; taken as samples at the start of every request, they held the memory's L = 1 and L = 2
    estimates at 4.18 and 4.90 ms while L = 4, run long in steady state, read 4.52, and the policy drafted
    L = 4 (0.93x regular, `real_bench_2026-11-24_h100_borrow.json`, `policy_state` and `traces`).
So a probe of length L runs a warm-up first if it follows plain rounds (or, launched ahead, another length),
then its timed rounds, then, where the next round is decided before the last timed one is read, one more round
of L; a request's probes begin with START_ROUNDS more rounds of their first length.

Exploration. The first rounds time each of probe_lengths twice in such runs (default L = 0, 0, 0, 0, 0, 2, 2,
2, 2 with look-ahead, L = 0, 0, 0, 0, 2, 2, 2 without, the first two the request's warm-ups, where a length's
rounds stop once it is timed twice), which times plain decoding and a draft (a bucket's estimate keeps the
lower of its first two samples, so one descheduled round does not condemn a length); they are skipped where
the batch's bucket was measured before (memory). A drafting probe is skipped when it is hopeless: when even
α_b = 1 for every sequence would not make any L > 0 beat L = 0 at the measured costs (a draft step as slow as
a plain step). Plain decoding, the anchor of "never slower than regular", is timed twice in every batch bucket
met. Afterwards, every explore_every rounds, one round times another length, in turn the next bucket up, the
next bucket down and plain decoding. So the estimates the argmax compares against L* stay as fresh as its own:
a cost measured once and never again misled the policy at batch 32 on the H100 (`bass.round_costs`). A probe
beside L* costs a few per cent of one round in explore_every. It times only a length that could win: one whose
predicted tokens per second is at least (1 − probe_margin) of L*'s, or a drafting length beside L* whose estimate
has gone stale (`CostModel.stale`: no sample within the cost horizon). The screen alone could trap the policy:
in an H100 run at k = 8 one memory held L = 2 at batch 8 at 7.5 ms (2.07 in the run's first cost-policy row) and
plain decoding at 2.56 (1.69), the monotone fit made every draft past L = 1 dear, and no probe passed the screen
again, so its two rows drafted L = 1 in every round at batch 8 (127 of 127 in their traced passes), 1.16-1.17
ms/token/seq against 0.92 for the run's other cost-policy rows (`real_bench_2026-11-27_h100ar_margin.json`, the
look-ahead pair's and the margin pair's `policy_state` and `traces`). Re-timed once stale, such an estimate is
what the probe reads (a bucket keeps only its two newest samples past the horizon).
Plain decoding far behind a good draft is the dear case: on the H100 at k = 8 each request's plain probe ran two
rounds of 1.7 ms for one token each where a round at L* = 3 took 2.34 ms for 2.3
(`real_bench_2026-11-25_h100_sparseq.json`, `traces`), to refresh an estimate that could not have changed the
choice; it is probed again once the draft's predicted lead shrinks under the margin.
(The screen and memory's profile together, against neither, interleaved in two H100 runs at
k = 8: 1.011–1.016 ms/token/seq against 1.018–1.040, and 1.006–1.020 against 1.026–1.038, every pass faster,
`real_bench_2026-11-25_h100_probes*.json`, the rows of pair "policy".) While L* = 0 the probe is L = 1 (unless
hopeless), so that an early wrong estimate cannot lock in plain decoding for good; such a probe is dear (a
drafter that cannot follow breaks the look-ahead pipeline: the n-gram's L = 1 rounds cost 2.5x a plain step at
batch 32 on the H100), so each one that finds plain decoding still best doubles the gap to the next, up to
PLAIN_GAP_MAX x explore_every, and the gap is remembered across requests (`PolicyMemory.plain_gap`); probing
every 16 rounds without that back-off cost n-gram BASS 7 % against regular decoding on the H100
(`real_bench_2026-11-23_h100_cycle2*.json`). A probed length timed fewer than twice is timed two rounds
running, as the first probes are: with one sample, a CUDA graph captured in its first round (20 ms for L = 1
at batch 32 on the H100, against 5) kept the policy at plain decoding for a whole k = 32 run, 0.97x where
fixed L = 1 made 1.18x (`real_bench_2026-11-23_h100_backoff*.json`). Unmeasured lengths are also explored by
the argmax itself, through the optimistic extrapolation, one length bucket at a time: L* never goes past the
bucket above the longest length timed at this batch (`CostModel.reach`). A curve extrapolated from L <= 3 made
drafts of 14 and 32 look best at batch 32 on the H100; each such leap captured graphs and compiled kernels for
a width never run before, in a timed pass (11.7 and 17.4 ms rounds against 3.4 for L = 1; graphs captured,
kernels perhaps compiled), and one pass of the k = 32 run took 3.33 ms/token against 2.07 and 2.28 for the
others (`real_bench_2026-11-24_h100_pdl_k32.json`; the leaps are the likeliest cause, not traced round by
round). Climbing a bucket at a time, each step is timed before the next. `describe()` reports what was
measured and decided.

Heuristic (BASS, Algorithm 1; DESIGN.md §3), updated after every round from x_max, the most draft tokens
any live sequence accepted, with s = 0 initially:

    if x_max == L:  L <- min(L + l_incre, l_limit);               s <- 0
    else:           L <- max(1, x_max, L - ceil(L / l_mod) - s);  s <- 1

It grows quickly while some sequence takes the whole draft and shrinks slowly, a little faster on
consecutive misses, never below what the best sequence just used. The per-sequence policy runs the
same rule on each sequence's own accepted count (x = a_b), useful when proposals vary per sequence.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bass.acceptance import (
    AcceptanceEstimator,
    expected_accepted,
    expected_tokens,
    position_outcomes,
    shortest_within,
    tokens_from_reach,
)
from bass.config import DraftLengthConfig
from bass.round_costs import L_BUCKETS, CostModel, RoundClock, bucket

PLAIN_GAP_MAX = 16  # while plain decoding wins, probes of drafting back off to one in 16 x explore_every rounds
START_ROUNDS = 2  # a request's first rounds are no cost samples (module docstring, Timing)


def heuristic_step(L: int, s: int, x_max: int, cfg: DraftLengthConfig) -> tuple[int, int]:
    """One application of the rule above: (L, s, x_max) -> (new L, new s)."""
    if x_max >= L:
        return min(L + cfg.l_incre, cfg.l_limit), 0
    return max(1, x_max, L - math.ceil(L / cfg.l_mod) - s), 1


@dataclass
class PolicyMemory:
    """What a cost policy learnt that outlives its request: the device's costs (mutated in place by the
    policies that share it), the drafter's pooled acceptance and per-position profile, the next request's
    prior (`profile` None until a request has ended), and how many rounds apart its probes of drafting are
    while plain decoding wins (0: explore_every)."""

    costs: CostModel
    alpha: float
    plain_gap: int = 0
    profile: np.ndarray | None = None
    calibration: tuple[np.ndarray, np.ndarray] | None = None  # (O_j, P_j) of `bass.acceptance`, Calibration
    opening: np.ndarray | None = None  # [2, l_limit] (S°_i, T°_i) of requests' first rounds (Opening round)

    def learn(self, acceptance: AcceptanceEstimator) -> None:
        """Keep what a request's rounds ended with as the next request's prior."""
        self.alpha, self.profile, self.calibration = acceptance.memory()

    def count_first_round(self, asked: Sequence[int], accepted: Sequence[int], cfg: DraftLengthConfig) -> None:
        """Count a request's first round (`bass.acceptance`, Opening round), earlier ones discounted by γ. A first
        round that drafted nothing counts nothing but still discounts the others: first rounds the estimate sent
        to plain decoding drift back toward the batch's rate, and are drafted again once it pays."""
        got = position_outcomes(asked, accepted, cfg.l_limit)
        if self.opening is not None:
            self.opening = cfg.alpha_decay * self.opening + got
        elif got.any():
            self.opening = got

    def estimator(self, cfg: DraftLengthConfig) -> AcceptanceEstimator:
        """A request's acceptance estimate, starting from what the earlier ones ended with."""
        return AcceptanceEstimator(cfg, self.alpha, self.profile, self.calibration)


def _warms_up(before: int, L: int, ahead: bool) -> bool:
    """Whether a round of length L after one of `before` is a warm-up, no cost sample (module docstring, Timing):
    the first drafting round after plain ones, and one launched ahead after a round of another length."""
    return L > 0 and (before == 0 or (ahead and before != L))


class DraftLengthPolicy:
    """Draft lengths for the live sequences, keyed by their stable sequence index.

    The round loop calls `lengths` when a round starts and `update` when it is over; the "cost" policy times
    the round between the two.
    """

    def __init__(self, cfg: DraftLengthConfig, seqs: Sequence[int], *, clock: RoundClock | None = None,
                 memory: PolicyMemory | None = None):
        """`memory`: what earlier requests measured; this policy goes on updating its costs."""
        self.cfg = cfg
        self._shared = (cfg.l0, 0)
        self._own = {q: (cfg.l0, 0) for q in seqs}
        # the cost policy's state
        self.acceptance = AcceptanceEstimator(cfg) if memory is None else memory.estimator(cfg)
        self.costs = CostModel(cfg) if memory is None else memory.costs
        self.clock = clock or RoundClock()
        self.rounds = 0  # rounds started by `lengths`
        self.ended = 0  # rounds whose results came back (`update`): a round launched ahead may never be read
        self.choice = 0  # the last argmax L*
        self._opened = False  # the first round's L came from earlier first rounds (`rates`, opening)
        self._prepared: int | None = None  # the first round's L, decided before the round (`prepare`)
        self.last = 0  # the length handed out last (a probe or L*)
        self.probes = 0
        self._turn = 0  # the rotation of probes beside L*: up, down, plain
        self.memory = memory
        self._gap = (memory.plain_gap if memory is not None else 0) or cfg.explore_every  # to the next probe
        self._next_probe = self._gap
        self._queue: list[int] = []  # the rest of a probe's rounds, before the argmax has the next round
        self._open: deque[tuple[int, bool]] = deque()  # per started, unread round: (its length, a warm-up)
        # the first rounds: each probe length timed twice, a drafting one after its warm-up, and each followed
        # by a round of its length (module docstring, Timing)
        self._schedule = deque(list(cfg.probe_lengths[:1]) * START_ROUNDS
                               + [L for L in cfg.probe_lengths for _ in range(4 if L > 0 else 3)])
        self._seqs: list[int] = list(seqs)  # the batch of the last decision
        # cfg.trace: per ended round (L, B, ms, a cost sample, launched before the round before it ended, drafts
        # accepted by the whole batch, and the cost policy's prediction of that number: `_predicted`; None for
        # the other policies)
        self.trace: list[tuple[int, int, float, bool, bool, int, float | None]] | None = [] if cfg.trace else None

    # ---- the cost policy's decision ------------------------------------------------------------------
    def rates(self, seqs: Sequence[int], perfect: bool = False, opening: bool = False) -> np.ndarray | None:
        """Predicted tokens per second for L = 0 .. l_limit at this batch, or None before costs are known.

        perfect=True assumes every draft token is accepted (α_b = 1): an upper bound on what drafting buys.
        opening=True reads a request's first round from earlier requests' first rounds, where the memory has any
        (`bass.acceptance`, Opening round).
        """
        B, l_max = len(seqs), self.cfg.l_limit
        cost = self.costs.round_curve(B, l_max)
        if cost is None:
            return None
        if perfect:
            tokens = expected_tokens(np.ones(B), l_max)
        elif opening and self._opening_counts() is not None:
            tokens = tokens_from_reach(self.acceptance.opening(self._opening_counts(), B, l_max))
        else:
            tokens = self.acceptance.expected_tokens(seqs, l_max)
        return tokens / np.maximum(cost, 1e-12)

    def _opening_counts(self) -> np.ndarray | None:
        """The memory's counts of earlier first rounds, where this policy reads them (`DraftLengthConfig.opening`)."""
        return self.memory.opening if self.cfg.opening and self.memory is not None else None

    def _hopeless(self, seqs: Sequence[int]) -> bool:
        """Even perfect acceptance would not pay for drafting at the measured costs: skip a probe."""
        rate = self.rates(seqs, perfect=True)
        return rate is not None and int(np.argmax(rate)) == 0

    def _cost_length(self, seqs: Sequence[int]) -> int:
        r, cfg = self.rounds, self.cfg
        B = len(seqs)
        while self._schedule and self.costs.samples(self._schedule[0], B) >= 2:
            self._schedule.popleft()  # timed twice already (rounds read before the next is decided need no more)
        if self._schedule and not self.costs.known(B):
            # each timed twice: one slow round must not decide a length's fate, unless the first showed
            # drafting cannot pay; an earlier request's rounds at this batch size measured them already (`memory`)
            L = self._schedule.popleft()
            if L > 0 and self.costs.samples(L, B) and self._hopeless(seqs):
                self._schedule.clear()
                return 0
            return L
        if self.costs.samples(0, len(seqs)) < 2:
            # plain decoding is the anchor of "never slower than regular": time it twice at every batch
            # bucket, so one descheduled round cannot make it look slow for good
            return 0
        if r == 0:  # (with look-ahead the second round is decided before the first is read: keep the flag)
            self._opened = self._opening_counts() is not None
        rate = self.rates(seqs, opening=r == 0 and self._opened)
        if rate is None:  # costs at this batch never measured (e.g. probes disabled): measure
            return cfg.probe_lengths[-1] if cfg.probe_lengths else min(cfg.l0, cfg.l_limit)
        reach = L_BUCKETS[min(L_BUCKETS.index(bucket(self.costs.reach(len(seqs)), L_BUCKETS)) + 1,
                              len(L_BUCKETS) - 1)]  # a bucket past the longest length timed (docstring)
        self.choice = shortest_within(rate[:reach + 1], cfg.length_margin)
        if self._queue:  # the rest of a probe
            return self._queue.pop()
        if cfg.explore_every and r >= self._next_probe:
            L = self._probe(seqs, rate)
            if self.choice == L:  # nothing beside L* could win: no probe this time
                return L
            # its rounds (module docstring, Timing): a warm-up after plain rounds or, launched ahead, another
            # length; timed twice if it was timed fewer than twice (its first round may capture a CUDA graph: 20
            # ms for L = 1 at batch 32 on the H100, and a bucket keeps the lower of its first two samples); then,
            # where the next round is launched within this one's time, one more of its length
            timed = 1 + (L > 0 and self.costs.samples(L, len(seqs)) < 2)
            self._queue = [L] * (timed - 1 + _warms_up(self.last, L, bool(self._open)) + bool(self._open))
            return L
        return self.choice

    def _probe(self, seqs: Sequence[int], rate: np.ndarray) -> int:
        """The length an exploring round times (module docstring, Exploration), L* itself where no length
        beside it could win at the current estimates; sets the next one's round."""
        cfg, r = self.cfg, self.rounds
        # a probe of drafting while plain decoding wins is the dearest kind (a look-ahead pipeline broken for a
        # drafter that cannot follow): each one that finds plain decoding still best doubles the gap
        self._gap = min(2 * self._gap, PLAIN_GAP_MAX * cfg.explore_every) if self.choice == 0 else cfg.explore_every
        self._next_probe = r + self._gap
        if self.memory is not None:
            self.memory.plain_gap = self._gap
        if self.choice == 0:
            self.probes += 1
            return 0 if self._hopeless(seqs) else 1
        i = L_BUCKETS.index(bucket(self.choice, L_BUCKETS))
        beside = list(dict.fromkeys((L_BUCKETS[min(i + 1, len(L_BUCKETS) - 1)], L_BUCKETS[i - 1], 0)))
        floor = (1 - cfg.probe_margin) * rate[self.choice]  # a length this far behind L* is not worth a round
        for _ in beside:  # in turn, past the ones that could not win, unless their estimate is stale
            self._turn += 1
            L = beside[self._turn % len(beside)]
            # (a bucket up may pass l_limit, which caps it)
            if rate[min(L, len(rate) - 1)] >= floor or (L > 0 and self.costs.stale(L, len(seqs))):
                self.probes += 1
                return L
        return self.choice

    # ---- the interface of the round loop -------------------------------------------------------------
    @property
    def may_choose_plain(self) -> bool:
        """Whether a round may get L = 0 (plain decoding), which the loop can launch a round ahead: only
        the cost policy's (the heuristic and fixed lengths are at least 1)."""
        return self.cfg.policy == "cost"

    @property
    def decides_ahead(self) -> bool:
        """Whether `lengths` may be asked a round early, before the last round's acceptance is in: the cost
        policy's estimates lag a round anyway, and fixed lengths ignore it; the paper's heuristic is defined
        by the round just before."""
        return self.cfg.policy in ("cost", "fixed")

    def prepare(self, seqs: Sequence[int]) -> None:
        """Decide the first round's length now, before the round starts: the engine asks while the device runs
        the prefill and the host would only wait for it. Decided in the round, the cost policy's first length
        (read from earlier first rounds) was host work that nothing hid, before the first launch: 0.64 ms of an
        H200 host's time under the profiler, against 0.05 for fixed L = 3's (`bench/opening.py`,
        `bench/results/opening_2026-12-02_h200_before_traced.txt`). The first
        `lengths` hands it to the sequences live then: a sequence that finished on its first token leaves the
        batch after the decision (a batch one smaller, rarely another bucket). A no-op for the other policies,
        whose lengths cost nothing, and once a round has started."""
        if self.cfg.policy == "cost" and self.rounds == 0 and self._prepared is None:
            self._prepared = self._cost_length(seqs)

    def lengths(self, seqs: Sequence[int]) -> list[int]:
        """The draft length each of `seqs` gets this round (for "cost", this also starts the round's clock)."""
        if self.cfg.policy == "cost":
            ahead = bool(self._open)  # decided before the round before it is read: launched ahead of it
            L, self._prepared = (self._cost_length(seqs) if self._prepared is None else self._prepared), None
            before, self.last = self.last, min(L, self.cfg.l_limit)
            self._open.append((self.last, self.rounds < START_ROUNDS or _warms_up(before, self.last, ahead)))
            self._seqs = list(seqs)
            self.rounds += 1
            self.clock.start()
            return [self.last] * len(seqs)
        if self.cfg.policy == "per-sequence":
            out = [self._own.get(q, (self.cfg.l0, 0))[0] for q in seqs]  # (a row that joined: l0)
        else:
            out = [self.cfg.l0 if self.cfg.policy == "fixed" else self._shared[0]] * len(seqs)
        if self.trace is not None:
            self._open.append((max(out, default=0), False))
            self.rounds += 1
            self.clock.start()
        return out

    @property
    def _clocked(self) -> bool:
        return self.cfg.policy == "cost" or self.trace is not None

    def relaunched(self) -> None:
        """The round decided last (a round ahead, by `lengths`) starts only now: its clock restarts."""
        if self._clocked:
            self.clock.restart()

    def update(self, seqs: Sequence[int], accepted: Sequence[int], asked: Sequence[int] | None = None) -> None:
        """Feed back how many draft tokens each live sequence accepted this round, of `asked` (its l_b)."""
        if not seqs or (self.cfg.policy == "fixed" and self.trace is None):
            return
        asked = list(asked) if asked is not None else [self.last] * len(seqs)
        predicted = self._predicted(seqs, asked) if self.trace is not None and self.cfg.policy == "cost" else None
        if self.cfg.policy == "cost":
            if self.ended == 0 and self.cfg.opening and self.memory is not None:
                self.memory.count_first_round(asked, accepted, self.cfg)  # a request's first round (Opening round)
            self.acceptance.observe(seqs, asked, accepted)
        elif self.cfg.policy == "per-sequence":
            for q, a in zip(seqs, accepted, strict=True):
                self._own[q] = heuristic_step(*self._own.get(q, (self.cfg.l0, 0)), a, self.cfg)
        elif self.cfg.policy == "heuristic":
            self._shared = heuristic_step(*self._shared, max(accepted), self.cfg)
        if not self._clocked:
            return
        round_s = self.clock.stop()
        if round_s is None:  # (regular decoding starts no round: it asks for no length)
            return
        self.ended += 1
        # a cost sample is a round in a run of its length (module docstring, Timing): not a warm-up, not followed
        # by a round of another length launched within its time, and no CUDA graph captured while it ran (tens
        # of ms: a shape that no wider batch's graph can run captures its own, mid-run, `bass.graphs`)
        L, warm_up = self._open.popleft()
        after = self._open[0][0] if self._open else L  # the next round's length, if it is decided already
        sample = not warm_up and after == L and not self.clock.captured
        if sample and self.cfg.policy == "cost":
            self.costs.observe(max(asked), len(seqs), round_s)
        if self.trace is not None:
            self.trace.append((max(asked), len(seqs), round(round_s * 1e3, 4), sample, self.clock.overlapped,
                               int(sum(accepted)), None if predicted is None else round(predicted, 3)))

    def _predicted(self, seqs: Sequence[int], asked: Sequence[int]) -> float:
        """The drafts the estimates before this round's outcome expect the batch to accept of what it was asked
        (`AcceptanceEstimator.expected_accepted`, calibrated), so that a trace holds the objective's numerator
        against what the round did (`bench/round_trace.py`, calibration); a first round read from earlier first
        rounds, what those predicted."""
        if self.ended == 0 and self._opened:
            return expected_accepted(self.acceptance.opening(self._opening_counts(), len(seqs), max(asked)), asked)
        return self.acceptance.expected_accepted(seqs, asked)

    def describe(self, seqs: Sequence[int] | None = None) -> dict:
        """What the policy measured and decided, for logs and benchmarks (times in ms)."""
        out: dict = {"policy": self.cfg.policy}
        if self.trace is not None:
            out["trace"] = list(self.trace)
        if self.cfg.policy != "cost":
            out["L"] = self._shared[0] if self.cfg.policy == "heuristic" else self.cfg.l0
            return out
        seqs = list(seqs) if seqs is not None else self._seqs
        out.update(L=self.choice, rounds=self.ended, probes=self.probes,
                   alpha_pooled=round(self.acceptance.pooled(), 4),
                   alpha_positions=[round(float(a), 4) for a in self.acceptance.profile()[:8]],
                   calibration=[round(float(k), 4) for k in self.acceptance.calibration()[:8]],
                   **({} if self._opening_counts() is None else {"opening_reach": [round(float(a), 4) for a in (
                       self.acceptance.opening(self._opening_counts(), 1, 8)[0])]}),
                   alpha={q: round(float(a), 4) for q, a in zip(seqs, self.acceptance.alphas(seqs), strict=True)},
                   **self.costs.describe())
        rate = self.rates(seqs) if seqs else None
        if rate is not None:  # predicted speed of L* over plain decoding, at the current estimates
            out["predicted_speedup"] = round(float(rate[self.choice] / rate[0]), 4)
        return out
