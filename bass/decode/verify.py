"""The lossless accept / resample rule of a verify pass (docs/design.md §1), greedy and sampled.

Speculative sampling (Leviathan et al. 2023; Chen et al. 2023). For one sequence with draft tokens
x_1..x_l drawn from the draft distributions q_1..q_l, and target distributions p_1..p_{l+1} from one
verify pass (both *after* temperature / top-k / top-p processing, `bass.decode.sampling`):

    accept x_i  with probability  min(1, p_i(x_i) / q_i(x_i)),  i = 1, 2, ... until the first rejection;
    at the first rejection i:     emit y ~ norm(max(0, p_i - q_i))         (the residual distribution)
    if all l are accepted:        emit y ~ p_{l+1}                         (the bonus token)

so every emitted token is distributed exactly as the processed target distribution. A deterministic
draft (n-gram lookup) has q_i = onehot(x_i): acceptance is p_i(x_i) and the residual is p_i with x_i
removed. Greedy decoding is the limit: accept while argmax p_i == x_i, then emit argmax p_i.

The uniforms come from each sequence's own stream (`bass.decode.streams`): u_accept for the tests, u_sample for the
inverse-CDF draw of the emitted token. `verify_logits` picks the form for a request's processing; under top-p
the rule runs over each position's sorted candidates (`verify_top_p`), and on CUDA in one kernel
(`verify_top_p_fused`, `kernels.verify_sample`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bass.config import SamplingParams
from bass.decode import sampling

FUSED_VERIFY = True  # where the candidates come from `kernels.top_p`, the rest of the rule in one kernel too


@dataclass
class VerifyResult:
    """What a verify pass decides for each sequence: how many drafts it takes, and the token it emits after them."""

    accepted: torch.Tensor  # [B] long: a_b, draft tokens accepted (0 .. draft_len[b])
    next_token: torch.Tensor  # [B] long: the correction (first rejection) or bonus token


def verify_logits(logits: torch.Tensor, params: SamplingParams, draft_tokens: torch.Tensor,
                  draft_len: torch.Tensor, draft_probs: torch.Tensor | None, u_accept: torch.Tensor,
                  u_sample: torch.Tensor, draft_ids: torch.Tensor | None = None, full_sort: bool = False
                  ) -> tuple[VerifyResult, torch.Tensor | None]:
    """The verdict of target logits [B, L+1, V] under `params`: (verdict, covered [B, L+1] or None).

    Greedy: `verify_greedy`. Top-p < 1: `verify_top_p`, over each position's sorted candidates (covered:
    whether they decided it; full_sort: all of them). Otherwise `verify_sampled` over the processed
    vocabulary. What `bass.decode.rules.VerifyRule` computes in the graph, and by a full sort for its redo."""
    if params.greedy:
        return verify_greedy(draft_tokens, draft_len, logits), None
    if params.top_p < 1.0:
        return verify_top_p(logits, params, draft_tokens, draft_len, draft_probs, u_accept, u_sample, draft_ids,
                            full_sort=full_sort)
    probs, covered = sampling.process_logits_deferred(logits, params, full_sort)
    return verify_sampled(draft_tokens, draft_len, draft_probs, probs, u_accept, u_sample, draft_ids), covered


def verify_greedy(draft_tokens: torch.Tensor, draft_len: torch.Tensor, target_logits: torch.Tensor) -> VerifyResult:
    """Greedy verification. draft_tokens [B, L], draft_len [B], target_logits [B, L+1, V]."""
    best = target_logits.argmax(-1)  # [B, L+1]
    L = draft_tokens.shape[1]
    pos = torch.arange(L, device=best.device)
    ok = (best[:, :L] == draft_tokens) & (pos < draft_len[:, None])
    accepted = torch.cumprod(ok.long(), dim=1).sum(1)  # leading run of matches
    next_token = best.gather(1, accepted[:, None]).squeeze(1)
    return VerifyResult(accepted, next_token)


def verify_sampled(draft_tokens: torch.Tensor, draft_len: torch.Tensor, draft_probs: torch.Tensor | None,
                   target_probs: torch.Tensor, u_accept: torch.Tensor, u_sample: torch.Tensor,
                   draft_ids: torch.Tensor | None = None) -> VerifyResult:
    """Lossless verification (module docstring).

    draft_tokens [B, L]; draft_len [B]; draft_probs [B, L, V], or None for a deterministic draft, or with
    draft_ids [B, L, K] a sparse q: q(draft_ids[b, i, j]) = draft_probs[b, i, j] and every other token 0
    (ids may repeat where the mass is 0); target_probs [B, L+1, V] processed; u_accept [B, L] and u_sample [B]
    uniforms in [0, 1).
    """
    B, L = draft_tokens.shape
    p_x = target_probs[:, :L].gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, L]
    accepted = _accepted(p_x, draft_tokens, draft_len, draft_probs, u_accept, draft_ids)
    p_next = target_probs.gather(1, accepted[:, None, None].expand(B, 1, target_probs.shape[-1])).squeeze(1)
    weights = p_next
    if L > 0:
        if draft_probs is None:
            q_next = torch.zeros_like(p_next).scatter_(-1, _draft_at(draft_tokens, accepted)[:, None], 1.0)
        else:
            q_next = _draft_q_at(draft_probs, draft_ids, accepted, target_probs.shape[-1])
        weights = _resample_weights(p_next, q_next, accepted, draft_len)
    return VerifyResult(accepted, sampling.sample_from(weights, u_sample))


def verify_top_p(logits: torch.Tensor, params: SamplingParams, draft_tokens: torch.Tensor, draft_len: torch.Tensor,
                 draft_probs: torch.Tensor | None, u_accept: torch.Tensor, u_sample: torch.Tensor,
                 draft_ids: torch.Tensor | None = None, full_sort: bool = False) -> tuple[VerifyResult, torch.Tensor]:
    """`verify_sampled` for top-p < 1, computed over each position's sorted candidates: (verdict, covered [B, T]).

    Under top-p the processed p is zero outside the kept candidates, so every quantity of the rule lives on
    them: with w the kept masses in the stable order, ids their tokens and Z = sum w (`top_p_candidates`),

        p(x_i)              = w_j / Z  where ids_j = x_i, else 0
        max(0, p_a − q_a)   = max(0, w / Z − q_a[ids])   on the candidates; 0 on every other token
        y                   = ids[j*], j* the inverse-CDF draw over those weights in the stable order

    So the vocabulary-wide work is finding the sorted candidates (`sorted_top_p`: on CUDA one small
    kernel pipeline, `kernels.top_p`); the rest is [B, T, K], not [B, T, V] (the dense rule adds about a
    dozen vocabulary-wide kernels: scatter, mask, sum, divide, gathers, the draw). The
    draw runs over tokens in the stable order rather than by id: another inverse-CDF map of the same u,
    so the same distribution; with full_sort (K = V) the order and the prefix sums are the same as from
    the candidates, so on a covered row both give the same tokens (`bass.decode.rules.VerifyRule.exact`).
    The shapes are `verify_sampled`'s; logits [B, L+1, V].
    """
    kept, ids, covered = sampling.sorted_top_p(logits, params, full_sort)  # [B, L+1, K]
    return verify_candidates(kept, ids, draft_tokens, draft_len, draft_probs, u_accept, u_sample, draft_ids,
                             vocab=logits.shape[-1]), covered


def verify_candidates(kept: torch.Tensor, ids: torch.Tensor, draft_tokens: torch.Tensor, draft_len: torch.Tensor,
                      draft_probs: torch.Tensor | None, u_accept: torch.Tensor, u_sample: torch.Tensor,
                      draft_ids: torch.Tensor | None = None, *, vocab: int) -> VerifyResult:
    """`verify_top_p`'s verdict from the kept masses and ids [B, L+1, K] of each position's sorted candidates
    (`top_p_candidates`) over a vocabulary of `vocab` tokens; the torch twin of `kernels.verify_sample`, which
    also computes `covered`."""
    B, L = draft_tokens.shape
    p = kept / torch.cumsum(kept, dim=-1)[..., -1:]  # Z as a prefix sum: the same from K candidates or V
    p_x = (p[:, :L] * (ids[:, :L] == draft_tokens[..., None])).sum(-1)  # [B, L]
    accepted = _accepted(p_x, draft_tokens, draft_len, draft_probs, u_accept, draft_ids)
    at_a = accepted[:, None, None].expand(B, 1, ids.shape[-1])
    p_next, ids_next = p.gather(1, at_a).squeeze(1), ids.gather(1, at_a).squeeze(1)  # [B, K]
    weights = p_next
    if L > 0:
        if draft_probs is None:
            q_next = (ids_next == _draft_at(draft_tokens, accepted)[:, None]).to(p_next.dtype)
        else:
            q_next = _draft_q_at(draft_probs, draft_ids, accepted, vocab).gather(-1, ids_next)
        weights = _resample_weights(p_next, q_next, accepted, draft_len)
    j = sampling.sample_from(weights, u_sample)
    return VerifyResult(accepted, ids_next.gather(-1, j[:, None]).squeeze(-1))


def verify_top_p_fused(logits: torch.Tensor, params: SamplingParams, draft_tokens: torch.Tensor,
                       draft_len: torch.Tensor, draft_probs: torch.Tensor | None, u_accept: torch.Tensor,
                       u_sample: torch.Tensor, draft_ids: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, ...] | None:
    """`verify_top_p` and the round's glue in a few launches, where `sorted_top_p` takes the kernels (and
    FUSED_VERIFY): `kernels.verify_sample.verify_candidates`'s outputs (accepted, next_token, decided, packed,
    emitted, rejected) from `kernels.top_p`'s candidates. None where it does not apply (greedy, no top-p, a
    vocabulary small enough for a full sort, top-k, a dense q, or not on CUDA): the caller takes the torch
    path. (A draft step under top-p makes a sparse q, `draft_sample`, the only kind the kernel reads.)"""
    if not (FUSED_VERIFY and not params.greedy and params.top_p < 1.0 and sampling.fused_top_p(logits, params)
            and not sampling.sort_all(logits.shape[-1]) and (draft_probs is None or draft_ids is not None)):
        return None
    from kernels.top_p import top_p_candidates_fused
    from kernels.verify_sample import verify_candidates as kernel

    vals, ids = top_p_candidates_fused(logits, params.temperature, sampling.TOP_P_CANDIDATES)  # [B, L+1, K]
    return kernel(vals, ids, params.top_p, sampling.TOP_P_MARGIN, draft_tokens, draft_len, u_accept, u_sample,
                  draft_probs, draft_ids)


def _accepted(p_x: torch.Tensor, draft_tokens: torch.Tensor, draft_len: torch.Tensor,
              draft_probs: torch.Tensor | None, u_accept: torch.Tensor, draft_ids: torch.Tensor | None = None
              ) -> torch.Tensor:
    """a_b [B]: the leading run of drafts with u < p(x) / q(x) (q = 1 for a deterministic draft), within
    draft_len. p_x, u_accept [B, L]; the test is written without a division, so q(x) = 0 (a token the
    draft never samples) cannot produce NaN."""
    if draft_probs is None:
        q_x = torch.ones_like(p_x)
    elif draft_ids is None:
        q_x = draft_probs.gather(-1, draft_tokens[..., None]).squeeze(-1)
    else:  # a sparse q: its mass at the id equal to x, if any
        q_x = (draft_probs * (draft_ids == draft_tokens[..., None])).sum(-1)
    pos = torch.arange(p_x.shape[1], device=p_x.device)
    ok = (u_accept * q_x < p_x) & (pos < draft_len[:, None])
    return torch.cumprod(ok.long(), dim=1).sum(1)


def _draft_q_at(draft_probs: torch.Tensor, draft_ids: torch.Tensor | None, accepted: torch.Tensor, vocab: int
                ) -> torch.Tensor:
    """q [B, vocab] of the position a rejection resamples (`_draft_at`), scattered out of a sparse q."""
    q = _draft_at(draft_probs, accepted)
    if draft_ids is None:
        return q
    return q.new_zeros(q.shape[0], vocab).scatter_add_(-1, _draft_at(draft_ids, accepted), q)  # (repeats add 0)


def _draft_at(draft: torch.Tensor, accepted: torch.Tensor) -> torch.Tensor:
    """Row min(a_b, L-1) of each sequence's draft: its token ([B, L] -> [B]) or distribution ([B, L, V] ->
    [B, V]), the q of the position a rejection resamples."""
    at = accepted.clamp(max=draft.shape[1] - 1)
    return draft[torch.arange(draft.shape[0], device=draft.device), at]


def _resample_weights(p_next: torch.Tensor, q_next: torch.Tensor, accepted: torch.Tensor,
                      draft_len: torch.Tensor) -> torch.Tensor:
    """What the next token is drawn from [B, V or K]: max(0, p − q) where the sequence rejected a draft,
    p where it accepted all. p == q up to rounding leaves no residual mass; the acceptance test then almost
    surely passed, and falling back to p keeps the sampler total."""
    residual = (p_next - q_next).clamp_(min=0.0)
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p_next)
    return torch.where((accepted < draft_len)[:, None], residual, p_next)
