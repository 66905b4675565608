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
from dataclasses import dataclass

import torch

from bass.drafters.base import Drafter, NoDrafter, Proposal
from bass.drafters.feature import FeatureDrafter
from bass.drafters.layer_skip import LayerSkipDrafter
from bass.drafters.model import ModelDrafter
from bass.drafters.ngram import NgramDrafter
from bass.models.feature_draft import FeatureDraft
from bass.runtime.cache import CacheArena
from bass.runtime.prefill_graphs import PrefillGraphs

__all__ = ["DraftModel", "Drafter", "DrafterSettings", "NoDrafter", "Proposal", "build_drafter"]


@dataclass(frozen=True)
class DraftModel:
    """A draft model as the round loop runs it: the model, what the loop calls for it (its `GraphedModel` on CUDA),
    the K/V storage its batches share, and its prefill's graphs (`bass.runtime.prefill_graphs`)."""

    model: torch.nn.Module
    forward: Callable | None = None  # None: the model itself
    arena: CacheArena | None = None  # None: fresh caches per batch
    prefills: PrefillGraphs | None = None


@dataclass(frozen=True)
class DrafterSettings:
    """How a drafter drafts: n-gram lookup's lengths, layer-skip's layers (None: half the target's), the multiple
    of the request's temperature a sampling drafter draws at (`Drafter.proposal_params`), and whether a draft
    model makes each proposal as one CUDA graph where it can (`bass.drafters.chain.chained_proposal`)."""

    ngram_max: int = 3
    ngram_min: int = 1
    layer_skip_layers: int | None = None
    temperature_scale: float = 1.0
    chained: bool = True


def build_drafter(name: str, target: Callable, draft: DraftModel | None, attn: Callable,
                  settings: DrafterSettings = DrafterSettings()) -> Drafter:
    """The drafter called `name` ("none", "ngram", "model", "layer-skip") for one batch; `target` is what the
    loop calls for the target (the model, or its `GraphedModel`)."""
    drafter = _new(name, target, draft, attn, settings)
    drafter.temperature_scale = settings.temperature_scale
    return drafter


def _new(name: str, target: Callable, draft: DraftModel | None, attn: Callable, s: DrafterSettings) -> Drafter:
    if name == "none":
        return NoDrafter()
    if name == "ngram":
        return NgramDrafter(s.ngram_max, s.ngram_min)
    if name == "model":
        if draft is None:
            raise ValueError("drafter='model' needs a draft model: set EngineConfig.draft (e.g. a small model "
                             "of the target's family)")
        parts = dict(forward=draft.forward, arena=draft.arena, prefills=draft.prefills, chained=s.chained)
        if isinstance(draft.model, FeatureDraft):
            return FeatureDrafter(draft.model, target, attn, **parts)
        return ModelDrafter(draft.model, attn, target.config.vocab_size, **parts)
    if name == "layer-skip":
        n = s.layer_skip_layers or max(1, target.config.num_layers // 2)
        return LayerSkipDrafter(target, attn, n)
    raise ValueError(f"unknown drafter {name!r}: choose 'ngram', 'model' or 'layer-skip'")
