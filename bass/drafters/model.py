"""A separate draft model of the target's vocabulary with its own KV cache (the paper's setting).

Cache bookkeeping: after a round the draft cache holds the accepted tokens but never the last emitted one
(correction or bonus), and when all L drafts were accepted it also lacks d_L. The next round therefore starts by
feeding the 1 or 2 pending tokens of each sequence (a ragged step)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from bass.decode.rules import DraftRule, draft_rule, run_then
from bass.drafters.base import Drafter, Proposal
from bass.drafters.chain import chained_proposal, draft_chain
from bass.runtime.cache import CacheArena, KVCache
from bass.runtime.prefill_graphs import PrefillGraphs, prefill
from bass.runtime.transfer import ints_to_device, padded_ids
from kernels import capturable


def _model_proposal(draft: torch.nn.Module, rule: DraftRule, attn: Callable, cache: KVCache, tokens: torch.Tensor,
                    counts: torch.Tensor, lens: torch.Tensor, u: torch.Tensor) -> Proposal:
    """A whole proposal of a draft model (`draft_chain` on the model itself, each step followed by its rule):
    what `ModelDrafter` captures as one graph. tokens [B, T], counts [B], lens [B], u [B, L]."""
    return draft_chain(lambda tok, q_len, last_only, u_i, out: rule(
        draft(tok, cache, q_len, attn, last_only=last_only), u_i, out), tokens, counts, lens, u)


class ModelDrafter(Drafter):
    """A draft model of the target's vocabulary: each proposal feeds the tokens it has not seen (the last
    round's accepted ones), then samples L more, as one graph where its forward has one (`chained_proposal`)."""

    name = "model"

    def __init__(self, model: torch.nn.Module, attn: Callable, target_vocab: int, *,
                 forward: Callable | None = None, arena: CacheArena | None = None,
                 prefills: PrefillGraphs | None = None, chained: bool = True):
        self.model, self.attn, self.target_vocab, self.chained = model, attn, target_vocab, chained
        self.forward = forward or model  # a GraphedModel on CUDA
        self.prefills = prefills  # its prefill's CUDA graphs (`bass.runtime.prefill_graphs`), with static shapes
        self.arena = arena or CacheArena(persistent=False)
        self.cache: KVCache | None = None
        self.in_cache: list[int] = []  # tokens of each sequence whose K/V the draft cache holds
        self.prompt_lens: list[int] = []

    @torch.inference_mode()
    def prefill(self, prompts, samples, capacity, features=None):
        self.cache, self.prompt_lens, self.in_cache = None, [], []
        self.admit(prompts, samples, capacity, features, list(range(len(prompts))), ())

    @torch.inference_mode()
    def admit(self, prompts, samples, capacity, features, slots, histories):
        lens = [len(p) for p in prompts]
        _, cache, _ = prefill(self.model, self.prefills, prompts, self.attn)
        # (the host knows every length: no wait for the device)
        self.cache = self.arena.admit(self.cache, cache, samples, capacity, max(lens), slots)
        new = [n for n in lens for _ in range(samples)]
        self.prompt_lens += new
        self.in_cache += new

    @torch.inference_mode()
    def propose(self, histories, lengths, params, u, target_cache):
        device = self.cache.suffix_len.device
        pending = [h[n:] for h, n in zip(histories, self.in_cache, strict=True)]

        # q over the target's vocabulary, whatever the draft's
        rule = draft_rule(self.proposal_params(params), self.target_vocab)

        def step(tokens, q_len, last_only, u_i, out):  # a step's graph keeps its own outputs: draft_chain copies
            return run_then(self.forward, rule, (u_i,), tokens, self.cache, q_len, self.attn, last_only=last_only)

        tokens, counts = padded_ids(pending, device=device), ints_to_device([len(p) for p in pending], device)
        lens, L = ints_to_device(lengths, device), u.shape[1]
        chained = None
        # (one pool: the loop reads a proposal before this drafter's next; a backend that reads lengths on the
        # host runs step by step)
        if self.chained and capturable(self.attn):
            chained = chained_proposal(self.forward, functools.partial(_model_proposal, self.model, rule, self.attn),
                                       lambda Tb: ((rule, self.attn, Tb, L), ((Tb,), (), (), (L,))), self.cache,
                                       (tokens, counts, lens, u), pool=0)
        proposal = chained if chained is not None else draft_chain(step, tokens, counts, lens, u)
        # the cache now holds the pending tokens and d_1 .. d_{l-1}
        self.in_cache = [len(h) + max(0, n - 1) for h, n in zip(histories, lengths, strict=True)]
        return proposal

    def commit(self, histories):
        self.in_cache = [min(c, len(h) - 1) for c, h in zip(self.in_cache, histories, strict=True)]
        suffix = [c - p for c, p in zip(self.in_cache, self.prompt_lens, strict=True)]
        self.cache.truncate(ints_to_device(suffix, self.cache.suffix_len.device))

    def select(self, rows):
        self.cache = self.cache.compact(list(rows))
        self.in_cache = [self.in_cache[r] for r in rows]
        self.prompt_lens = [self.prompt_lens[r] for r in rows]
