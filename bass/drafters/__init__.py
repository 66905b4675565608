"""Where draft tokens come from. The round loop sees only the `Drafter` interface (`bass.drafters.base`).

- `NgramDrafter` (`ngram`): prompt lookup, one-hot proposals.
- `ModelDrafter` (`model`): a separate small model with its own KV cache (the paper's setting).
- `FeatureDrafter` (`feature`): a feature draft (`bass.models.feature_draft`, EAGLE-style) that reads the
  target's own hidden states of the verified positions, and its own predicted ones while it drafts.
- `LayerSkipDrafter` (`layer_skip`): the target's first N layers + final norm + LM head (self-speculative).
- `NoDrafter` (`base`): proposes nothing, which turns the round loop into regular decoding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bass.drafters.base import Drafter, NoDrafter, Proposal
from bass.drafters.feature import FeatureDrafter
from bass.drafters.layer_skip import LayerSkipDrafter
from bass.drafters.model import ModelDrafter
from bass.drafters.ngram import NgramDrafter
from bass.models.feature_draft import FeatureDraft
from bass.runtime.cache import CacheArena
from bass.runtime.prefill_graphs import PrefillGraphs

__all__ = ["Drafter", "NoDrafter", "Proposal", "build_drafter"]


def build_drafter(name: str, target: torch.nn.Module, draft: torch.nn.Module | None, attn: Callable, *,
                  ngram_max: int = 3, ngram_min: int = 1, layer_skip_layers: int | None = None,
                  draft_forward: Callable | None = None, draft_arena: CacheArena | None = None,
                  draft_prefills: PrefillGraphs | None = None, temperature_scale: float = 1.0,
                  chained: bool = True) -> Drafter:
    """The drafter called `name` ("none", "ngram", "model", "layer-skip").

    `target` is what the loop calls for the target (the model, or its `GraphedModel`);
    `draft_forward` / `draft_arena` do the same for the draft model, `draft_prefills` replays its prefill
    (`bass.runtime.prefill_graphs`); a drafter that samples draws at
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
