"""Where draft tokens come from. The round loop sees only the `Drafter` interface (`bass.proposal`).

- `NgramDrafter`: prompt lookup. The continuation of the most recent earlier occurrence of the last n
  tokens (n from ngram_max down to ngram_min) in prompt + generated text; nothing if none matches.
  Deterministic, so its draft distribution is one-hot.
- `ModelDrafter`: a separate small model with its own KV cache (the paper's setting).
- `FeatureDrafter` (`bass.feature_drafter`): a feature draft (`bass.models.feature_draft`, EAGLE-style)
  that reads the target's own hidden states of the verified positions, and its own predicted ones while
  it drafts.
- `LayerSkipDrafter`: the target's first N layers + final norm + LM head (self-speculative). It reads
  and writes the target's own cache for those layers, so no KV is recomputed or stored twice.
- `NoDrafter` (`bass.proposal`): proposes nothing, which turns the round loop into regular decoding.

`build_drafter` makes the one a request names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
import torch

from bass.cache import CacheArena, KVCache
from bass.feature_drafter import FeatureDrafter
from bass.models.feature_draft import FeatureDraft
from bass.prefill_graphs import PrefillGraphs, prefill
from bass.proposal import Drafter, NoDrafter, Proposal, chained_proposal, draft_autoregressively, draft_chain
from bass.rules import DraftRule, draft_rule, run_then
from bass.transfer import ints_to_device, padded_ids
from kernels import capturable


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
        self.prefills = prefills  # its prefill's CUDA graphs (`bass.prefill_graphs`), with static shapes
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


class LayerSkipDrafter(Drafter):
    name = "layer-skip"

    def __init__(self, target: torch.nn.Module, attn: Callable, num_layers: int):
        if not 1 <= num_layers < target.config.num_layers:
            raise ValueError(f"layer_skip_layers must be in 1 .. {target.config.num_layers - 1} for this target, "
                             f"got {num_layers}")
        self.target, self.attn, self.num_layers = target, attn, num_layers

    @torch.inference_mode()
    def propose(self, histories, lengths, params, u, target_cache):
        # The target cache holds every token but the last emitted one, so each sequence has one pending.
        saved = target_cache.suffix_len.clone()
        device = saved.device
        pending = padded_ids([h[-1:] for h in histories], device=device), ints_to_device([1] * len(histories), device)

        rule = draft_rule(self.proposal_params(params), self.target.config.vocab_size)

        def step(tokens, q_len, last_only, u_i, out):  # a step's graph keeps its own outputs: draft_chain copies
            return run_then(self.target, rule, (u_i,), tokens, target_cache, q_len, self.attn,
                            num_layers=self.num_layers, last_only=last_only)

        proposal = draft_autoregressively(step, pending, lengths, u)
        # The verify pass rewrites these rows in every layer; only the lengths need restoring.
        target_cache.truncate(saved)
        return proposal


def build_drafter(name: str, target: torch.nn.Module, draft: torch.nn.Module | None, attn: Callable, *,
                  ngram_max: int = 3, ngram_min: int = 1, layer_skip_layers: int | None = None,
                  draft_forward: Callable | None = None, draft_arena: CacheArena | None = None,
                  draft_prefills: PrefillGraphs | None = None, temperature_scale: float = 1.0,
                  chained: bool = True) -> Drafter:
    """The drafter called `name` ("none", "ngram", "model", "layer-skip").

    `target` is what the loop calls for the target (the model, or its `GraphedModel`);
    `draft_forward` / `draft_arena` do the same for the draft model, `draft_prefills` replays its prefill
    (`bass.prefill_graphs`); a drafter that samples draws at
    `temperature_scale` times the request's temperature (`Drafter.proposal_params`); `chained`: a draft model
    makes each proposal as one CUDA graph where it can (`chained_proposal`).
    """
    drafter = _build(name, target, draft, attn, ngram_max, ngram_min, layer_skip_layers, draft_forward, draft_arena,
                     draft_prefills, chained)
    drafter.temperature_scale = temperature_scale
    return drafter


def _build(name, target, draft, attn, ngram_max, ngram_min, layer_skip_layers, draft_forward, draft_arena,
           draft_prefills, chained) -> Drafter:
    if name == "none":
        return NoDrafter()
    if name == "ngram":
        return NgramDrafter(ngram_max, ngram_min)
    if name == "model":
        if draft is None:
            raise ValueError("drafter='model' needs a draft model: set EngineConfig.draft (e.g. a small model "
                             "of the target's family)")
        if isinstance(draft, FeatureDraft):
            return FeatureDrafter(draft, target, attn, forward=draft_forward, arena=draft_arena,
                                  prefills=draft_prefills, chained=chained)
        return ModelDrafter(draft, attn, target.config.vocab_size, forward=draft_forward, arena=draft_arena,
                            prefills=draft_prefills, chained=chained)
    if name == "layer-skip":
        n = layer_skip_layers or max(1, target.config.num_layers // 2)
        return LayerSkipDrafter(target, attn, n)
    raise ValueError(f"unknown drafter {name!r}: choose 'ngram', 'model' or 'layer-skip'")
