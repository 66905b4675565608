"""Draft-length policies: a fixed length (the default), the paper's heuristic, a per-sequence variant.

Fixed. Every round drafts l0 tokens for every live sequence (`DraftLengthConfig.l0`, 3 by default). Its length
does not depend on any round's outcome, so the round loop may decide it before the round before is read
(`decides_ahead`, `bass.decode.pipeline`'s look-ahead).

Heuristic (BASS, Algorithm 1; DESIGN.md §3), updated after every round from x_max, the most draft tokens
any live sequence accepted, with s = 0 initially (the paper starts at l0 = 7: `DraftLengthConfig("heuristic",
l0=7)`):

    if x_max == L:  L <- min(L + l_incre, l_limit);               s <- 0
    else:           L <- max(1, x_max, L - ceil(L / l_mod) - s);  s <- 1

It grows quickly while some sequence takes the whole draft and shrinks slowly, a little faster on
consecutive misses, never below what the best sequence just used. The per-sequence policy runs the
same rule on each sequence's own accepted count (x = a_b), useful when proposals vary per sequence.
Both read the round just before, so they are never asked a round early.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bass.config import DraftLengthConfig


def heuristic_step(L: int, s: int, x_max: int, cfg: DraftLengthConfig) -> tuple[int, int]:
    """One application of the rule above: (L, s, x_max) -> (new L, new s)."""
    if x_max >= L:
        return min(L + cfg.l_incre, cfg.l_limit), 0
    return max(1, x_max, L - math.ceil(L / cfg.l_mod) - s), 1


class DraftLengthPolicy:
    """Draft lengths for the live sequences, keyed by their stable sequence index.

    The round loop calls `lengths` when a round starts and `update` when it is over.
    """

    def __init__(self, cfg: DraftLengthConfig, seqs: Sequence[int]):
        self.cfg = cfg
        self._shared = (cfg.l0, 0)
        self._own = {q: (cfg.l0, 0) for q in seqs}

    @property
    def decides_ahead(self) -> bool:
        """Whether `lengths` may be asked a round early, before the last round's acceptance is in: only a fixed
        length ignores it; the heuristic is defined by the round just before."""
        return self.cfg.policy == "fixed"

    def lengths(self, seqs: Sequence[int]) -> list[int]:
        """The draft length each of `seqs` gets this round."""
        if self.cfg.policy == "per-sequence":
            return [self._own.get(q, (self.cfg.l0, 0))[0] for q in seqs]  # (a row that joined: l0)
        return [self.cfg.l0 if self.cfg.policy == "fixed" else self._shared[0]] * len(seqs)

    def update(self, seqs: Sequence[int], accepted: Sequence[int]) -> None:
        """Feed back how many draft tokens each live sequence accepted this round."""
        if not seqs:
            return
        if self.cfg.policy == "per-sequence":
            for q, a in zip(seqs, accepted, strict=True):
                self._own[q] = heuristic_step(*self._own.get(q, (self.cfg.l0, 0)), a, self.cfg)
        elif self.cfg.policy == "heuristic":
            self._shared = heuristic_step(*self._shared, max(accepted), self.cfg)

    def describe(self) -> dict:
        """The policy and its current shared length, for logs and benchmarks."""
        return {"policy": self.cfg.policy, "L": self._shared[0] if self.cfg.policy == "heuristic" else self.cfg.l0}
