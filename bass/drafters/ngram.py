"""Prompt lookup: the continuation of the most recent earlier occurrence of the last n tokens (n from ngram_max
down to ngram_min) in prompt + generated text; nothing if none matches. Deterministic, so its draft distribution
is one-hot."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bass.drafters.base import Drafter, Proposal
from bass.runtime.transfer import ints_to_device, padded_ids


class NgramDrafter(Drafter):
    name = "ngram"
    has_probabilities = False  # a lookup: each proposal is one-hot

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1):
        self.ngram_max, self.ngram_min = ngram_max, ngram_min

    def lookup(self, history: Sequence[int], max_len: int) -> list[int]:
        """The continuation of the latest earlier match of the longest matching suffix n-gram."""
        h = np.asarray(history, dtype=np.int64)
        for n in range(min(self.ngram_max, len(h) - 1), self.ngram_min - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(h[:-1], n)  # earlier n-grams only
            hits = np.flatnonzero((windows == h[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n
                return h[start:start + max_len].tolist()
        return []

    def propose(self, histories, lengths, params, u, target_cache):
        device = target_cache.suffix_len.device
        drafts = [self.lookup(h, n) if n > 0 else [] for h, n in zip(histories, lengths, strict=True)]
        return Proposal(padded_ids(drafts, device=device), ints_to_device([len(d) for d in drafts], device), None)
