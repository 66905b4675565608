"""Draft-length policies: the paper's heuristic (shared by the batch), a fixed length, a per-sequence variant.

The heuristic (BASS, Algorithm 1; DESIGN.md §3), updated after every round from x_max, the most draft
tokens any live sequence accepted, with s = 0 initially:

    if x_max == L:  L <- min(L + l_incre, l_limit);               s <- 0
    else:           L <- max(1, x_max, L - ceil(L / l_mod) - s);  s <- 1

It grows quickly while some sequence takes the whole draft and shrinks slowly, a little faster on
consecutive misses, never below what the best sequence just used. The per-sequence policy runs the
same rule on each sequence's own accepted count (x = a_b), useful when proposals vary per sequence.
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
    """Draft lengths for the live sequences, keyed by their stable sequence index."""

    def __init__(self, cfg: DraftLengthConfig, seqs: Sequence[int]):
        self.cfg = cfg
        self._shared = (cfg.l0, 0)
        self._own = {q: (cfg.l0, 0) for q in seqs}

    def lengths(self, seqs: Sequence[int]) -> list[int]:
        """The draft length each of `seqs` gets this round."""
        if self.cfg.policy == "per-sequence":
            return [self._own[q][0] for q in seqs]
        return [self.cfg.l0 if self.cfg.policy == "fixed" else self._shared[0]] * len(seqs)

    def update(self, seqs: Sequence[int], accepted: Sequence[int]) -> None:
        """Feed back how many draft tokens each live sequence accepted this round."""
        if not seqs or self.cfg.policy == "fixed":
            return
        if self.cfg.policy == "per-sequence":
            for q, a in zip(seqs, accepted, strict=True):
                self._own[q] = heuristic_step(*self._own[q], a, self.cfg)
        else:
            self._shared = heuristic_step(*self._shared, max(accepted), self.cfg)
