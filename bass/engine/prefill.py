"""A request's prompts prefilled in chunks between the running batch's rounds, so that one long prompt holds no
other visitor: its K/V fills its own cache CHUNK tokens per prompt at a time, the batch's rounds (and the
prefills of short prompts that join meanwhile) run between two chunks, and its Stop is seen before each chunk.
Once its last chunk is in, the request joins the batch as a short one does (`bass.engine.batch`).

A chunk is one forward over the next tokens of every prompt (q_len: what each has left, at most the chunk), on
a cache that already holds the earlier chunks: the same ragged attention as a verify of many tokens, so the K/V,
and the last token's logits, are those of one forward over the whole prompt up to rounding. A prompt at most one
chunk long takes the one-forward path, through the prefill's CUDA graphs where its width has one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from bass.runtime.cache import KVCache
from bass.runtime.prefill_graphs import prefill
from bass.runtime.transfer import ints_to_device, padded_ids

# prompt tokens of one chunk: on a GPU a few rounds' time (a 512-token forward of the embedded target is about as
# long as a verify of 64 rows); on a CPU, whose forward costs a few hundredths of a second a token, short enough
# that a Stop and the other visitors' rounds come within about a second
CHUNK_TOKENS = {"cuda": 512, "cpu": 32}


class Prefilled(NamedTuple):
    """A prefill's outputs: what `bass.runtime.prefill_graphs.prefill` returns."""

    logits: torch.Tensor  # [G, 1, V] each prompt's last token's
    cache: KVCache  # G sequences holding the prompts' K/V
    features: torch.Tensor  # [G, T, H] the target's final hidden states of every prompt position


def chunk_tokens(device: torch.device) -> int:
    return CHUNK_TOKENS.get(device.type, CHUNK_TOKENS["cpu"])


class ChunkedPrefill:
    """The prefill of prompts `ids` by `model`, one chunk per `step` (module docstring)."""

    def __init__(self, model: torch.nn.Module, ids: list[list[int]], attn: Callable, chunk: int):
        self.model, self.ids, self.attn, self.chunk = model, ids, attn, chunk
        self.cache = model.new_cache(len(ids), max(map(len, ids)))
        self.done = [0] * len(ids)  # tokens of each prompt in the cache
        self._logits: torch.Tensor | None = None  # [G, 1, V]: a prompt's row set by the chunk that ends it
        self._features: list[torch.Tensor] = []  # [G, c, H] per chunk

    @property
    def total(self) -> int:
        return sum(map(len, self.ids))

    @property
    def finished(self) -> bool:
        return all(d == len(p) for d, p in zip(self.done, self.ids, strict=True))

    @torch.inference_mode()
    def step(self) -> None:
        """Prefill the next chunk of every prompt not finished."""
        rows = [p[d:d + self.chunk] for p, d in zip(self.ids, self.done, strict=True)]
        device = self.cache.suffix_len.device
        q_len = ints_to_device([len(r) for r in rows], device)
        logits = self.model(padded_ids(rows, device=device), self.cache, q_len, self.attn, last_only=True)
        ends = ints_to_device([int(len(r) > 0 and d + len(r) == len(p)) for r, d, p in zip(rows, self.done, self.ids,
                                                                                            strict=True)], device)
        self._logits = logits if self._logits is None else torch.where(ends[:, None, None].bool(), logits,
                                                                        self._logits)
        self._features.append(self.model.hidden[:, :max(map(len, rows))])
        self.done = [d + len(r) for d, r in zip(self.done, rows, strict=True)]

    def result(self) -> Prefilled:
        """The whole prefill's outputs, once `finished`: each prompt's features at its own positions (a prompt that
        ended in an earlier chunk has padding after it, as a batch of prompts of different lengths has)."""
        return Prefilled(self._logits, self.cache, torch.cat(self._features, 1))


def prefill_at_once(model: torch.nn.Module, graphs, ids: list[list[int]], attn: Callable) -> Prefilled:
    """The one-forward prefill (`bass.runtime.prefill_graphs.prefill`: through CUDA graphs where the width has one)."""
    return Prefilled(*prefill(model, graphs, ids, attn))
