"""Logits processing, per-sequence random streams, and the lossless accept / resample rule.

Speculative sampling (Leviathan et al. 2023; Chen et al. 2023). For one sequence with draft tokens
x_1..x_l drawn from the draft distributions q_1..q_l, and target distributions p_1..p_{l+1} from one
verify pass (both *after* temperature / top-k / top-p processing):

    accept x_i  with probability  min(1, p_i(x_i) / q_i(x_i)),  i = 1, 2, ... until the first rejection;
    at the first rejection i:     emit y ~ norm(max(0, p_i - q_i))         (the residual distribution)
    if all l are accepted:        emit y ~ p_{l+1}                         (the bonus token)

so every emitted token is distributed exactly as the processed target distribution. A deterministic
draft (n-gram lookup) has q_i = onehot(x_i): acceptance is p_i(x_i) and the residual is p_i with x_i
removed. Greedy decoding is the limit: accept while argmax p_i == x_i, then emit argmax p_i.

Random numbers come from one generator per sequence (seeded from the request seed and the
sequence's (prompt, sample) index), drawn as uniforms and turned into tokens by inverse-CDF sampling,
so a sequence's stream never depends on which other sequences share its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bass.config import SamplingParams


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Processed probabilities [..., V] in float32: softmax(logits / T), then top-k, then top-p.

    Top-p keeps the smallest set of most likely tokens whose mass reaches top_p (always >= 1 token).
    For greedy params this returns the one-hot of the argmax, the distribution greedy decoding samples.
    """
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        sorted_p = sorted_p.masked_fill(mass_before >= params.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample_from(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sample: the first token whose cumulative mass exceeds u * total. [..., V], [...] -> [...]

    Works on unnormalised non-negative weights; a token of zero weight is never chosen.
    """
    cdf = torch.cumsum(probs, dim=-1)
    target = (u.to(cdf.dtype) * cdf[..., -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp_(max=probs.shape[-1] - 1)


class SequenceRNG:
    """Independent uniform streams, one per sequence, reproducible from (seed, prompt, sample)."""

    def __init__(self, seed: int, keys: list[tuple[int, int]]):
        self._gens = {}
        for key in keys:
            g = torch.Generator()
            g.manual_seed((seed * 1_000_003 + key[0] * 65_537 + key[1]) % (2**63))
            self._gens[key] = g

    def uniforms(self, keys: list[tuple[int, int]], n: int, device: torch.device | str) -> torch.Tensor:
        """[len(keys), n] uniforms in [0, 1); each row advances only its own sequence's stream."""
        rows = [torch.rand(n, generator=self._gens[k], dtype=torch.float64) for k in keys]
        return torch.stack(rows).to(device=device, dtype=torch.float32) if rows else torch.zeros(0, n)


@dataclass
class Verdict:
    accepted: torch.Tensor  # [B] long: a_b, draft tokens accepted (0 .. draft_len[b])
    next_token: torch.Tensor  # [B] long: the correction (first rejection) or bonus token


def verify_greedy(draft_tokens: torch.Tensor, draft_len: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """Greedy verification. draft_tokens [B, L], draft_len [B], target_logits [B, L+1, V]."""
    best = target_logits.argmax(-1)  # [B, L+1]
    L = draft_tokens.shape[1]
    pos = torch.arange(L, device=best.device)
    ok = (best[:, :L] == draft_tokens) & (pos < draft_len[:, None])
    accepted = torch.cumprod(ok.long(), dim=1).sum(1)  # leading run of matches
    next_token = best.gather(1, accepted[:, None]).squeeze(1)
    return Verdict(accepted, next_token)


def verify_sampled(draft_tokens: torch.Tensor, draft_len: torch.Tensor, draft_probs: torch.Tensor | None,
                   target_probs: torch.Tensor, u_accept: torch.Tensor, u_sample: torch.Tensor) -> Verdict:
    """Lossless verification (module docstring).

    draft_tokens [B, L]; draft_len [B]; draft_probs [B, L, V] or None for a deterministic draft;
    target_probs [B, L+1, V] processed; u_accept [B, L] and u_sample [B] uniforms in [0, 1).
    """
    B, L = draft_tokens.shape
    p_x = target_probs[:, :L].gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, L]
    if draft_probs is None:
        q_x = torch.ones_like(p_x)
    else:
        q_x = draft_probs.gather(-1, draft_tokens[..., None]).squeeze(-1)
    pos = torch.arange(L, device=draft_tokens.device)
    # u < p/q, written without a division so q_x = 0 (never sampled) cannot produce NaN
    ok = (u_accept * q_x < p_x) & (pos < draft_len[:, None])
    accepted = torch.cumprod(ok.long(), dim=1).sum(1)  # [B]

    p_next = target_probs.gather(1, accepted[:, None, None].expand(B, 1, target_probs.shape[-1])).squeeze(1)
    rejected = accepted < draft_len
    if L > 0:
        at = accepted.clamp(max=L - 1)[:, None]  # [B, 1]
        if draft_probs is None:
            q_next = torch.zeros_like(p_next).scatter_(-1, draft_tokens.gather(1, at), 1.0)
        else:
            q_next = draft_probs.gather(1, at[..., None].expand(B, 1, draft_probs.shape[-1])).squeeze(1)
        residual = (p_next - q_next).clamp_(min=0.0)
        # p == q up to rounding leaves no residual mass; the acceptance test then almost surely passed,
        # and falling back to p keeps the sampler total.
        has_mass = residual.sum(-1, keepdim=True) > 0
        residual = torch.where(has_mass, residual, p_next)
        weights = torch.where(rejected[:, None], residual, p_next)
    else:
        weights = p_next
    return Verdict(accepted, sample_from(weights, u_sample))
