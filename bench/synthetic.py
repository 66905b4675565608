"""Acceptance-controlled random models at real shapes (docs/design.md §7): GPU timing without 7B weights.

A target T (e.g. Llama-7B shapes) and a draft D of the same width with a few blocks share one random
embedding E and one LM head W. Every block's output projections (attention `o_proj`, MLP `down_proj`)
are multiplied by one factor s, so the last hidden state of either model is

    h = E[x_t] + s * delta_model(x_1 .. x_t)        logits = RMSNorm(h) W^T

At s = 0 both models compute the same bigram table RMSNorm(E[x_t]) W^T and agree on every token
(alpha = 1); as s grows each model's own random blocks move its logits away from the table, differently,
and the acceptance falls. W is scaled so the logits have standard deviation `logit_std` (8: top-1
probability ~0.65 and entropy ~1.2 nats over 32k tokens, about what trained code models show), which
makes the distributions peaked rather than the near-uniform ones of a freshly initialised model.
Every FLOP and every byte of the real shapes is spent, so timings are real; the acceptance is not
a property of any trained pair. Label such results "synthetic acceptance".

`AcceptanceKnob` changes s in place (the weight tensors keep their addresses, so captured CUDA graphs
stay valid); `calibrate` finds s for wanted acceptances by measuring them with the engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch import nn

from bass.config import DraftLengthConfig, SamplingParams
from bass.models.config import ModelConfig
from bass.models.feature_draft import FeatureDraft
from bass.models.loader import LoadedModel, build_random, to_hf_state_dict

if TYPE_CHECKING:
    from bass.engine import Engine

INIT_STD = 0.02  # build_random's (and transformers') initialisation of every linear weight

# Llama-2-7B / CodeLlama-7B shapes (6.74B parameters).
LLAMA_7B = ModelConfig(family="llama", vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                       num_layers=32, num_heads=32, num_kv_heads=32, head_dim=128, rope_theta=10000.0,
                       rms_norm_eps=1e-5, max_position_embeddings=4096)
# Qwen2.5-(Coder-)7B shapes (7.6B parameters; GQA 28/4, q/k/v bias).
QWEN25_7B = ModelConfig(family="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                        num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128, rope_theta=1e6,
                        rms_norm_eps=1e-6, qkv_bias=True, max_position_embeddings=32768)
# Qwen2.5-(Coder-)1.5B shapes, the embedded target's (1.5B parameters; GQA 12/2, a tied 151,936-token head).
QWEN25_1P5B = QWEN25_7B.with_(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_heads=12,
                              num_kv_heads=2, tie_word_embeddings=True)
# Llama-shaped and small enough for CPU tests of the plumbing.
TINY = ModelConfig(family="llama", vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=4, num_heads=4,
                   num_kv_heads=2, head_dim=16, rms_norm_eps=1e-5, max_position_embeddings=1024)
TARGETS = {"llama-7b": LLAMA_7B, "qwen2.5-7b": QWEN25_7B, "qwen2.5-1.5b": QWEN25_1P5B, "tiny": TINY}


def draft_config(target: ModelConfig, num_layers: int = 2) -> ModelConfig:
    """The draft: the target's width (so E and W can be shared) with `num_layers` blocks.

    For Llama-7B shapes, 2 blocks = 0.40B block weights + the shared 0.13B head read per step, about the
    bytes a 0.5B model moves per token (Qwen2.5-0.5B: 0.49B), which is what sets a draft step's time.
    """
    return target.with_(num_layers=num_layers, layer_types=())


class SyntheticTokenizer:
    """What the engine needs from a tokenizer, for models whose token ids mean nothing.

    `decode` returns "" whatever the ids: there is no text to show, and the engine's per-round stop
    check then costs nothing, so the benchmark times the models and the round loop only.
    `encode` reads whitespace-separated integers ("5 17 3"), for callers that insist on text.
    """

    eos_token_id = None
    chat_template = None

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self._vocab = {str(i): i for i in range(vocab_size)}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [int(t) for t in text.split()]
        if any(not 0 <= i < self.vocab_size for i in ids):
            raise ValueError(f"token ids must be in 0 .. {self.vocab_size - 1}")
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return ""

    def get_vocab(self) -> dict[str, int]:
        return self._vocab

    def __len__(self) -> int:
        return self.vocab_size


def head_scale(config: ModelConfig, logit_std: float) -> float:
    """Factor on W so that logits RMSNorm(h) W^T have std `logit_std`: each is a sum of H terms of std INIT_STD."""
    return logit_std / (INIT_STD * math.sqrt(config.hidden_size))


class AcceptanceKnob:
    """The factor s on every block's o_proj and down_proj weights of both models, changed in place."""

    def __init__(self, models: Sequence[nn.Module], scale: float = 1.0):
        self.weights = [w for m in models for block in m.layers
                        for w in (block.self_attn.o_proj.weight, block.mlp.down_proj.weight)]
        self.scale = scale  # the factor the weights carry now (1.0 = as drawn)

    @torch.no_grad()
    def set(self, scale: float) -> None:
        """Multiply by scale / current. s = 0 is refused: it could never be undone by a ratio."""
        if not scale > 0:
            raise ValueError(f"block scale must be > 0, got {scale}")
        ratio = scale / self.scale
        for w in self.weights:
            w.mul_(ratio)
        self.scale = scale


@dataclass
class SyntheticPair:
    target: LoadedModel
    draft: LoadedModel
    knob: AcceptanceKnob


def build_pair(target_config: ModelConfig = LLAMA_7B, draft_layers: int = 2, *, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.bfloat16, seed: int = 0, logit_std: float = 8.0,
               block_scale: float = 1e-3) -> SyntheticPair:
    """Target and draft with random weights on `device`, sharing embedding and LM head (module docstring)."""
    if target_config.tie_word_embeddings:
        raise ValueError("the synthetic pair needs an untied LM head (tie_word_embeddings=False)")
    d_config = draft_config(target_config, draft_layers)
    target = build_random(target_config, device=device, dtype=dtype, seed=seed)
    draft = build_random(d_config, device=device, dtype=dtype, seed=seed + 1)
    with torch.no_grad():
        target.lm_head.weight.mul_(head_scale(target_config, logit_std))
    # one tensor each, not copies: the draft reads the very same head (its bytes count in its step)
    draft.embed_tokens.weight = target.embed_tokens.weight
    draft.lm_head.weight = target.lm_head.weight
    knob = AcceptanceKnob([target, draft])
    knob.set(block_scale)
    tok = SyntheticTokenizer(target_config.vocab_size)
    return SyntheticPair(LoadedModel(target, tok, target_config, "synthetic"),
                         LoadedModel(draft, tok, d_config, "synthetic-draft"), knob)


def random_feature_draft(target: LoadedModel, seed: int, vocab: int | None = None) -> LoadedModel:
    """A random feature draft (width 32, 2 blocks) over `target`'s own embedding and head; with `vocab`, it
    proposes from that many random target ids (the end ids among them) instead of every token."""
    cfg = target.config
    config = ModelConfig(family="qwen2", vocab_size=cfg.vocab_size, hidden_size=32, intermediate_size=64,
                         num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, rope_theta=cfg.rope_theta,
                         rms_norm_eps=cfg.rms_norm_eps, tie_word_embeddings=False, qkv_bias=True,
                         max_position_embeddings=cfg.max_position_embeddings, eos_token_ids=cfg.eos_token_ids)
    m = target.model
    torch.manual_seed(seed)
    ids = None
    if vocab is not None:
        ids = torch.randperm(cfg.vocab_size)[:vocab].tolist()
        ids = torch.tensor(sorted(set(ids) | set(cfg.eos_token_ids)))
    draft = FeatureDraft(config, m.embed_tokens.weight, m.embed_tokens.weight if m.lm_head is None
                         else m.lm_head.weight, ids).to(m.embed_tokens.weight.device, m.embed_tokens.weight.dtype)
    draft.fold_head()  # as a loaded draft (`bass.models.draft`)
    return LoadedModel(draft.eval().requires_grad_(False), target.tokenizer, config, f"{target.name}-feature")


def random_prompt(vocab_size: int, length: int, seed: int = 0) -> list[int]:
    """`length` token ids drawn uniformly (reproducibly) from the vocabulary."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (length,), generator=g).tolist()


def per_token_acceptance(rounds: Iterable[tuple[int, int]]) -> float:
    """alpha: the probability that one draft token passes, from (proposed, accepted) per sequence-round.

    A round with n proposed and a accepted tested a + 1 tokens if a < n (the last one failed), else a.
    The maximum-likelihood alpha of i.i.d. tests is accepted / tested. Unlike docs/design.md §5's
    accepted / proposed, it does not fall as the draft length grows.
    """
    accepted = tested = 0
    for n, a in rounds:
        if n > 0:
            accepted += a
            tested += a + (a < n)
    return accepted / tested if tested else 0.0


def measure_alpha(engine: Engine, prompt: list[int], k: int, new_tokens: int, params: SamplingParams,
                  draft_length: int = 4) -> float:
    """Per-token acceptance of one BASS run of `engine` (an `Engine` with drafter "model") at a fixed draft
    length, whatever the engine's policy."""
    pairs = []
    for event in engine.stream([prompt], k=k, params=replace(params, max_new_tokens=new_tokens),
                                draft_length=DraftLengthConfig(policy="fixed", l0=draft_length)):
        pairs += [(u.proposed, u.accepted) for u in event.updates]
    return per_token_acceptance(pairs)


@dataclass
class Calibration:
    points: list[tuple[float, float]]  # (block scale, measured alpha), in the order measured
    scales: dict[float, float]  # wanted alpha -> block scale


def interpolate_scale(points: Sequence[tuple[float, float]], alpha: float) -> float:
    """log s linear in alpha between the two measured points that bracket `alpha` (alpha falls as s grows).

    Outside the measured range, the nearest end's segment is extended, by at most 4x in s.
    """
    pts = sorted(points)  # by scale; alpha decreasing (up to noise)
    if len(pts) < 2:
        raise ValueError("need at least two (scale, alpha) points")
    segments = list(zip(pts, pts[1:]))
    inside = [seg for seg in segments if seg[1][1] <= alpha <= seg[0][1] and seg[0][1] != seg[1][1]]
    (s0, a0), (s1, a1) = inside[0] if inside else (segments[0] if alpha > pts[0][1] else segments[-1])
    if a0 == a1:
        return s0 if alpha > a0 else s1
    t = (alpha - a0) / (a1 - a0)
    s = math.exp(math.log(s0) + t * (math.log(s1) - math.log(s0)))
    return min(max(s, pts[0][0] / 4), pts[-1][0] * 4)  # extrapolate at most 4x past the measured scales


def calibrate(knob: AcceptanceKnob, measure: Callable[[], float], targets: Sequence[float],
              grid: Sequence[float], refine: bool = True) -> Calibration:
    """Block scale for each wanted alpha: measure on `grid`, interpolate, then (refine) measure there once
    more and interpolate again with that point added. Leaves the knob at the last scale measured."""
    points = []
    for s in grid:
        knob.set(s)
        points.append((s, measure()))
    if refine:
        for a in targets:
            s = interpolate_scale(points, a)
            knob.set(s)
            points.append((s, measure()))
    return Calibration(points, {a: interpolate_scale(points, a) for a in targets})


def hf_model(model: nn.Module):
    """The same weights in transformers' `*ForCausalLM` (shared storage: no second copy of the weights).

    Built on the weights' device, then every parameter is replaced by a view of ours (q/k/v and gate/up
    are row blocks of our fused matrices, so the views are contiguous).
    """
    import transformers

    weight = next(model.parameters())
    hf = dict(model.config.to_hf())
    config = transformers.AutoConfig.for_model(hf.pop("model_type"), **hf)
    with torch.device(weight.device):
        out = transformers.AutoModelForCausalLM.from_config(config, dtype=weight.dtype)
    out.load_state_dict(to_hf_state_dict(model), strict=True, assign=True)
    return out.eval().requires_grad_(False)
