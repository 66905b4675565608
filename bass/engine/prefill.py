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

# the most prompt tokens of one chunk: on a GPU a few rounds' time (a 512-token forward of the embedded target is
# about as long as a verify of 64 rows); on a CPU about a second and a half of the embedded target's prefill
# (90 tokens a second on 2 cores), so a Stop is seen that often, and wider than the reference attention's
# row-at-a-time width (`kernels.reference.SOLO_ROWS`): a HumanEval prompt in chunks of 32 cost 1.2-1.3x its
# one-forward prefill, in chunks of 128 1.0-1.1x. `ChunkPacer` takes fewer while others decode.
CHUNK_TOKENS = {"cuda": 512, "cpu": 128}
MIN_CHUNK_TOKENS = 4  # a prompt always moves on, however slow its chunks
PREFILL_SHARE = 0.5  # while rows decode, chunks take at most this much of the time the rounds take


class Prefilled(NamedTuple):
    """A prefill's outputs: what `bass.runtime.prefill_graphs.prefill` returns."""

    logits: torch.Tensor  # [G, 1, V] each prompt's last token's
    cache: KVCache  # G sequences holding the prompts' K/V
    features: torch.Tensor  # [G, T, H] the target's final hidden states of every prompt position


def chunk_tokens(device: torch.device) -> int:
    return CHUNK_TOKENS.get(device.type, CHUNK_TOKENS["cpu"])


class ChunkedPrefill:
    """The prefill of prompts `ids` by `model`, one chunk per `step` (module docstring)."""

    def __init__(self, model: torch.nn.Module, ids: list[list[int]], attn: Callable):
        self.model, self.ids, self.attn = model, ids, attn
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
    def step(self, tokens: int) -> None:
        """Prefill the next `tokens` of every prompt not finished."""
        rows = [p[d:d + tokens] for p, d in zip(self.ids, self.done, strict=True)]
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


class ChunkPacer:
    """When, and how many tokens, the next chunk of a long prompt takes, so that the visitors decoding meanwhile
    keep two thirds of their pace or more. While rows decode, the chunks get at most PREFILL_SHARE (s = 1/2) of
    the time the rounds get, so a visitor's decode takes at most 1 + s times as long:

        credit += s · round_s after each round;  a chunk runs only while credit >= 0;  credit -= its time
        tokens  = clamp(s · round_s / s_per_token, MIN_CHUNK_TOKENS, cap)

    with s_per_token the last chunk's measured time per token (it grows as the prompt's cache fills) and round_s
    the batch's last round (the time between two admits, less the chunks run in it). A chunk of even a few tokens
    costs a whole forward, about a round, so the credit is what holds the share. With no row decoding,
    a chunk at every admit, of the cap: nobody is held. The cap, `CHUNK_TOKENS` of the device, bounds the time a
    Stop waits. On a GPU the times measured are the launches' (the device runs behind the host), so chunks stay at
    the cap there, every round."""

    def __init__(self, cap: int):
        self.cap = cap
        self.s_per_token: float | None = None
        self.round_s: float | None = None
        self.credit_s = 0.0
        self._admitted: float | None = None  # perf_counter() of the last admit
        self._chunks_s = 0.0  # chunk time since then

    def tokens(self, decoding: bool) -> int:
        """The next chunk's tokens; 0: none this round."""
        if not decoding:
            self.credit_s = 0.0
            return self.cap
        if self.credit_s < 0:
            return 0
        if self.s_per_token is None or self.round_s is None:
            return self.cap
        budget_s = PREFILL_SHARE * self.round_s
        return max(MIN_CHUNK_TOKENS, min(self.cap, round(budget_s / max(self.s_per_token, 1e-9))))

    def admitted(self, now: float) -> None:
        """A round ended and the batch admits: the round's time is what passed since the last admit, less chunks."""
        if self._admitted is not None:
            self.round_s = max(0.0, now - self._admitted - self._chunks_s)
            share = PREFILL_SHARE * self.round_s
            self.credit_s = min(self.credit_s + share, share)  # no saving up for a burst
        self._admitted, self._chunks_s = now, 0.0

    def chunk_done(self, tokens: int, seconds: float) -> None:
        self.s_per_token = seconds / max(tokens, 1)
        self._chunks_s += seconds
        self.credit_s -= seconds


def prefill_at_once(model: torch.nn.Module, graphs, ids: list[list[int]], attn: Callable) -> Prefilled:
    """The one-forward prefill (`bass.runtime.prefill_graphs.prefill`: through CUDA graphs where the width has one)."""
    return Prefilled(*prefill(model, graphs, ids, attn))
