"""Draft-length policies: by the batch's rows from a measured cost table (the default on a GPU), a fixed length
(the default elsewhere), the paper's heuristic, a per-sequence variant.

By the batch ("auto" with a `CostTable`). A round of B rows at draft length L costs c(B, L) seconds on this
device, measured when the engine captured its graphs (`bass.engine.warmup`): the chained draft's L steps and
the verify of L + 1 tokens per row, or for L = 0 the plain step alone (no draft forward, no rejection rule).
It emits E(L) tokens per running row, where with α_i the running rate at which a row that reached draft
position i accepts it (`Acceptance`),

    E(L) = 1 + Σ_{j=1..L} Π_{i=1..j} α_i,

so each round takes the length of most tokens per second:

    L*(B) = argmax_{L in 0 .. L_max}  E(L) / c(bucket(B), L).

B counts the rows the forward really runs (finished rows riding along included: they are padding the graph
computes anyway), and changes as requests join and leave. Small batches are bound by reading the weights, so
a wider verify costs little more than a plain step and L grows; large ones turn compute-bound, c grows with
B (L + 1), and L falls, to 0 where speculation stops paying. Only what was read decides, so the loop may ask
a round early (`decides_ahead`).

Fixed. Every round drafts l0 tokens for every live sequence (`DraftLengthConfig.l0`, 3 by default; 0 turns
speculation off). Its length depends on no round's outcome (`decides_ahead`).

Heuristic (BASS, Algorithm 1; docs/design.md, draft length), updated after every round from x_max, the most
draft tokens any live sequence accepted, with s = 0 initially (the paper starts at l0 = 7:
`DraftLengthConfig("heuristic", l0=7)`):

    if x_max == L:  L <- min(L + l_incre, l_limit);               s <- 0
    else:           L <- max(1, x_max, L - ceil(L / l_mod) - s);  s <- 1

It grows quickly while some sequence takes the whole draft and shrinks slowly, a little faster on
consecutive misses, never below what the best sequence just used. The per-sequence policy runs the
same rule on each sequence's own accepted count (x = a_b), useful when proposals vary per sequence.
Both read the round just before, so they are never asked a round early.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bass.config import DraftLengthConfig
from bass.decode.sequences import Sequence as Row
from bass.runtime.graphs import BATCH_BUCKETS, bucket

L_MAX = 4  # the longest draft the cost table prices: beyond it the embedded draft's acceptance adds little


@dataclass(frozen=True)
class CostTable:
    """Seconds a round costs on one device: `round_s[(rows, L)]` for each batch bucket measured and L in
    0 .. L_MAX (L = 0: a plain step)."""

    round_s: Mapping[tuple[int, int], float]
    device: str = ""

    def __post_init__(self) -> None:
        bad = [k for k, v in self.round_s.items() if not (v > 0 and math.isfinite(v))]
        if bad or not self.round_s:
            raise ValueError(f"a cost table needs a positive time for every entry, got {dict(self.round_s)}")

    def lengths(self, rows: int) -> list[int]:
        """The draft lengths priced for a batch of `rows` rows (its bucket's, or the widest bucket's)."""
        b = self._bucket(rows)
        return sorted(L for r, L in self.round_s if r == b)

    def cost(self, rows: int, L: int) -> float:
        return self.round_s[(self._bucket(rows), L)]

    def best(self, rows: int, expected: Sequence[float]) -> int:
        """L*(rows): the priced length of most expected tokens per second, expected[L] = E(L) (module docstring);
        the shorter on a tie."""
        return max(self.lengths(rows), key=lambda L: (expected[L] / self.cost(rows, L), -L))

    def _bucket(self, rows: int) -> int:
        measured = sorted({r for r, _ in self.round_s})
        b = bucket(rows, BATCH_BUCKETS) or rows
        return next((r for r in measured if r >= b), measured[-1])

    def to_dict(self) -> dict:
        return {"device": self.device, "round_ms": {f"{r}x{L}": 1e3 * s for (r, L), s in sorted(self.round_s.items())}}


class Acceptance:
    """α_i, the rate at which a row that reached draft position i accepts it, i = 1 .. L_MAX, as decayed counts
    over the rounds read (`decay` per round), starting from `prior` with the weight of `weight` rows. A position
    no round reached keeps its estimate, so after rounds without drafts speculation resumes where it was."""

    def __init__(self, prior: float = 0.7, weight: float = 8.0, decay: float = 0.9):
        self.decay = decay
        self.reached = np.full(L_MAX, weight)
        self.passed = np.full(L_MAX, weight * prior)

    def update(self, accepted: Sequence[int], asked: Sequence[int]) -> None:
        """One round: row b was asked asked[b] drafts and accepted accepted[b] of them."""
        a, n = np.asarray(accepted), np.asarray(asked)
        if not n.any():
            return
        # rows whose deepest position reached (passed) is j, j = 0 .. L_MAX; then, per position i, those at i or
        # deeper: a row reached positions 1 .. min(a + 1, n) and passed 1 .. a
        deepest = np.bincount(np.minimum(np.minimum(a + 1, n), L_MAX), minlength=L_MAX + 1)
        passed = np.bincount(np.minimum(a, L_MAX), minlength=L_MAX + 1)
        self.reached = self.decay * self.reached + np.cumsum(deepest[::-1])[::-1][1:]
        self.passed = self.decay * self.passed + np.cumsum(passed[::-1])[::-1][1:]

    @property
    def rates(self) -> np.ndarray:
        """[L_MAX] α_1 .. α_L_MAX (0 at a position no row reached and no prior weighs)."""
        return np.divide(self.passed, self.reached, out=np.zeros(L_MAX), where=self.reached > 0)

    def expected(self) -> list[float]:
        """E(L) for L = 0 .. L_MAX: tokens a row emits per round (module docstring)."""
        return [1.0, *(1.0 + np.cumsum(np.cumprod(self.rates))).tolist()]


class DraftLengthPolicy:
    """Draft lengths for a batch's rows. The round loop calls `lengths` when a round starts and `update` when it
    has read it."""

    def __init__(self, cfg: DraftLengthConfig, table: CostTable | None = None):
        self.cfg = cfg
        self.table = table if cfg.policy == "auto" else None
        self.acceptance = Acceptance()
        self._shared = (cfg.l0, 0)  # the heuristic's (L, s)
        self._own: dict[int, tuple[int, int]] = {}  # per-sequence: uid -> (L, s)
        self._chosen: list[int] = []  # the batch's L of each round asked (`describe`)

    @property
    def decides_ahead(self) -> bool:
        """Whether `lengths` may be asked a round early, before the last round's acceptance is in: the fixed
        length ignores it and the table's rule reads only what was read; the heuristic is defined by the round
        just before."""
        return self.cfg.policy in ("fixed", "auto")

    def lengths(self, live: Sequence[Row]) -> list[int]:
        """The draft length of each row this round (0 for a finished row riding along)."""
        policy = self.cfg.policy
        if policy == "per-sequence":
            out = [self._own.get(s.uid, (self.cfg.l0, 0))[0] for s in live]  # (a row that joined: l0)
        else:
            if self.table is not None:
                L = self.table.best(len(live), self.acceptance.expected())
            else:
                L = self._shared[0] if policy == "heuristic" else self.cfg.l0
            out = [L] * len(live)
            self._chosen.append(L)
        return [0 if s.finished else n for s, n in zip(live, out, strict=True)]

    def update(self, rows: Sequence[Row], accepted: Sequence[int], asked: Sequence[int]) -> None:
        """Feed back how many of the drafts it was asked for each running row accepted this round."""
        if not rows:
            return
        if self.table is not None:
            self.acceptance.update(accepted, asked)
        if self.cfg.policy == "per-sequence":
            for s, a in zip(rows, accepted, strict=True):
                self._own[s.uid] = heuristic_step(*self._own.get(s.uid, (self.cfg.l0, 0)), a, self.cfg)
        elif self.cfg.policy == "heuristic":
            self._shared = heuristic_step(*self._shared, max(accepted), self.cfg)

    def describe(self) -> dict:
        """The policy, its current or last length, the mean length of the rounds it chose, and the acceptance."""
        L = self._chosen[-1] if self._chosen else self._shared[0]
        return {"policy": "table" if self.table is not None else self.cfg.policy, "L": L,
                "mean_L": float(np.mean(self._chosen)) if self._chosen else float(L),
                "alpha": [round(a, 3) for a in self.acceptance.rates.tolist()]}


def heuristic_step(L: int, s: int, x_max: int, cfg: DraftLengthConfig) -> tuple[int, int]:
    """One application of the rule above: (L, s, x_max) -> (new L, new s)."""
    if x_max >= L:
        return min(L + cfg.l_incre, cfg.l_limit), 0
    return max(1, x_max, L - math.ceil(L / cfg.l_mod) - s), 1
