"""The acceptance objective: train the draft for what speculative sampling accepts, not only for forward KL.

Speculative sampling accepts a draft token x ~ q with probability min(1, p(x) / q(x)), so a draft step at
a position is accepted with

    α(p, q) = Σ_v min(p(v), q(v)) = 1 − TV(p, q)

where p is the target's *processed* distribution (temperature T, top-p) and q the draft's at its own
temperature τ·T (`EngineConfig.draft_temperature`). Forward KL at temperature 1 (the feature loss) makes q
cover p's mass; α is what a round gains. DistillSpec (Zhou et al., 2023) found total variation the better
objective for sampled decoding. The term added to the feature loss, per unrolled draft step s, is

    − λ_α · λ_2^(s−1) · mean_t α(p_t, q_t(f̂ˢ))

with the KL kept beside it (it carries the gradient where q already covers p, and the greedy argmax).

The nucleus is taken, for speed, over the target's `k` most likely tokens of the draft's proposal vocabulary
(the engine's draft samples within its 256 most likely tokens too): p(v) = exp(z_v / T − logsumexp(z / T)) over
the whole vocabulary, kept while the mass before it is below top_p, renormalised over what is kept. A token
outside the draft's vocabulary gets q = 0 and adds nothing to α. With k covering the vocabulary and no
reduced vocabulary this is exactly `bass.decode.sampling.process_logits`'s p (a test holds the two equal).

The gradient of min(p, q) reaches only the tokens where q < p: it lifts the draft's mass where it falls
short of the target's nucleus, which the softmax then takes from everywhere else. The held-out loss a run
prints includes the term, so it compares only between runs of one λ_α; the agreement and the sampled
acceptance it prints compare across them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bass.config import SamplingParams

NUCLEUS_K = 256  # the target's candidates a position's nucleus is taken from


def nucleus(t_logits: torch.Tensor, params: SamplingParams, vocab: torch.Tensor | None = None,
            k: int = NUCLEUS_K) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's processed distribution on its `k` most likely tokens of the proposal vocabulary: (p [..., k]
    float32, summing to 1 over what the nucleus keeps and 0 past it; their positions in the proposal vocabulary
    [..., k]), from logits [..., V] over the whole vocabulary. `vocab`: the proposal vocabulary's target ids
    ([V'], None: every token)."""
    if params.temperature <= 0 or params.top_k:
        raise ValueError("the acceptance objective is for sampled decoding with top-p alone: give a temperature "
                         f"> 0 and no top-k, got {params}")
    z = t_logits.float() / params.temperature  # [..., V]
    lse = torch.logsumexp(z, -1, keepdim=True)  # [..., 1]: the whole vocabulary's normaliser
    zs = z if vocab is None else z[..., vocab]  # [..., V']
    top, pos = zs.topk(min(k, zs.shape[-1]), -1)  # [..., k], descending
    p = (top - lse).exp()
    before = p.cumsum(-1) - p  # the mass of the tokens ranked above each one
    p = torch.where(before < params.top_p, p, torch.zeros_like(p))  # top-p keeps the token that crosses it
    return p / p.sum(-1, keepdim=True), pos


def acceptance(p: torch.Tensor, pos: torch.Tensor, s_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """α = Σ_v min(p(v), q(v)) at each position [...], q = softmax(s_logits / temperature) over the proposal
    vocabulary ([..., V'], differentiable), p and pos from `nucleus`."""
    q = F.log_softmax(s_logits.float() / temperature, -1).gather(-1, pos).exp()  # [..., k]
    return torch.minimum(p, q).sum(-1)


__all__ = ["NUCLEUS_K", "acceptance", "nucleus"]
