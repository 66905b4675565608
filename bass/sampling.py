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

Random numbers come from one counter-based stream per sequence (`bass.streams`), drawn as uniforms and
turned into tokens by inverse-CDF sampling, so a sequence's tokens never depend on which other sequences
share its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bass.config import SamplingParams

TOP_P_CANDIDATES = 1024  # top-p looks at this many most likely tokens first; a full sort only if they fall short
DRAFT_CANDIDATES = 256  # a draft step's top-p works within this many most likely tokens (`draft_proposal`)
FUSED_TOP_P: bool | str = True  # `_sorted_top_p`'s kernel on CUDA; "always": on the CPU too (interpreter)
FUSED_VERIFY = True  # where the candidates come from that kernel, the rest of the verify rule in one kernel too
_TOP_P_MARGIN = 1e-6  # > 2 float32 ulps of a cumulative mass <= 1: see `_top_p_from_candidates`


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Processed probabilities [..., V] in float32: softmax(logits / T), then top-k, then top-p.

    Top-p keeps the smallest set of most likely tokens whose mass reaches top_p (always >= 1 token):
    in the order (probability descending, token id ascending) — ties go to the lower id — token i is
    kept iff the float32 mass of the tokens before it is < top_p. For greedy params this returns the
    one-hot of the argmax, the distribution greedy decoding samples.

    Exact top-p without sorting the vocabulary: see `top_p_filter`; the result is bit for bit the one
    of the full sort (`top_p_filter_sorted`).
    """
    probs, covered = process_logits_deferred(logits, params)
    if covered is not None and not bool(covered.all()):
        probs = process_logits_deferred(logits, params, full_sort=True)[0]
    return probs


def process_logits_deferred(logits: torch.Tensor, params: SamplingParams,
                            full_sort: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`process_logits` without a host synchronisation: (probs, covered).

    covered [...] bool (None when no top-p applies) says, per row, that the top TOP_P_CANDIDATES tokens
    decided the top-p set; where it is False the probabilities are wrong and the caller must redo the
    rows with full_sort=True, e.g. after the round's own synchronisation.
    """
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float(), None
    return _top_p(_tempered(logits, params), params, full_sort)


def _top_p(probs: torch.Tensor, params: SamplingParams, full_sort: bool = False
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Top-p of tempered probabilities: (probs, covered) as `process_logits_deferred` returns them."""
    if params.top_p >= 1.0:
        return probs, None
    if full_sort or _sort_all(probs.shape[-1]):
        return top_p_filter_sorted(probs, params.top_p), torch.ones(probs.shape[:-1], dtype=torch.bool,
                                                                    device=probs.device)
    return top_p_filter(probs, params.top_p, TOP_P_CANDIDATES)


def _sort_all(vocab: int) -> bool:
    """Whether top-p sorts the whole vocabulary rather than take TOP_P_CANDIDATES candidates: when it is
    small enough (at most twice as many tokens) for the full sort to cost about what the candidates do."""
    return vocab // 2 <= TOP_P_CANDIDATES


def _tempered(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """softmax(logits / T) after top-k, in float32: the distribution before top-p."""
    logits = logits.float() / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits, dim=-1)


def draft_proposal(logits: torch.Tensor, params: SamplingParams, u: torch.Tensor, candidates: int | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A draft step's sample under top-p: (token [...], q [..., K], ids [..., K]), q being the distribution
    the token was drawn from, nonzero only at the K = DRAFT_CANDIDATES most likely tokens `ids`.

    Speculative sampling is exact for any draft distribution q, as long as the token is drawn from q and
    the verify uses that same q. So a draft applies top-p within its K most likely tokens x_1 .. x_K of
    p_T = softmax(logits / T) (after top-k), in descending order:

        c_j = p_T(x_1) + … + p_T(x_j),    keep x_j iff c_j − p_T(x_j) < top_p,    q(x_j) ∝ p_T(x_j) if kept

    which is `process_logits`' top-p wherever the K candidates hold the top-p set (up to the order of
    ties), and the top-K distribution where they hold less than top_p (every candidate is then kept). The
    token is u's inverse-CDF sample over q in candidate order. About twenty launches, against twice that
    for the exact rule with its fallback: a draft step is small enough for its launches to be its cost.
    """
    k = min(candidates or DRAFT_CANDIDATES, logits.shape[-1])
    vals, ids = torch.topk(_tempered(logits, params), k, dim=-1)  # [..., K] descending
    cum = torch.cumsum(vals, dim=-1)
    weights = torch.where(cum - vals < params.top_p, vals, 0.0)  # a prefix of the candidates
    total = torch.cumsum(weights, dim=-1)
    pos = torch.searchsorted(total, (u.to(total.dtype) * total[..., -1]).unsqueeze(-1), right=True)
    last = (weights > 0).sum(-1, keepdim=True) - 1  # the last kept candidate: u -> 1 never lands past it
    token = ids.gather(-1, torch.minimum(pos, last)).squeeze(-1)
    return token, weights / total[..., -1:], ids


def draft_sample(logits: torch.Tensor, params: SamplingParams, u: torch.Tensor, ids: torch.Tensor | None = None,
                 out: tuple[torch.Tensor, ...] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`draft_proposal` in the target's ids: (token [B], q [B, K], q_ids [B, K]), q sparse (`verify_sampled`:
    q(q_ids[b, j]) = q[b, j], every other token 0), column v of logits [B, V'] being target token ids[v] (a
    draft's reduced vocabulary) or v.

    On CUDA (without top-k) two launches do it (`kernels.draft_sample`): the candidates are each vocabulary
    chunk's few most likely tokens, where torch takes the K most likely of the row. Both paths keep and
    draw by the same rule; their candidates differ only where a chunk holds more of the top-p set than it
    contributes (or K tokens do not hold it), and q is always what the token was drawn from. The kernels
    write into `out` (token [B], q [B, K], q_ids [B, K], strided rows allowed) when given; torch's path
    returns its own tensors whatever `out` is.
    """
    if _fused_top_p(logits, params):
        from kernels.draft_sample import draft_sample_fused

        return draft_sample_fused(logits, params.temperature, params.top_p, u, DRAFT_CANDIDATES, ids, out)
    token, q, cols = draft_proposal(logits, params, u)  # [B], [B, K], [B, K]
    if ids is not None:
        token, cols = ids[token], ids[cols]
    return token, q, cols


def _stable_descending(values: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort (values, ids) along the last axis by value descending, then id ascending (the tie rule).

    One sort of an int64 key: a non-negative float32's bit pattern orders like the float.
    """
    key = (values.view(torch.int32).long() << 32) | (2**31 - 1 - ids)
    order = torch.sort(key, dim=-1, descending=True).indices
    return values.gather(-1, order), ids.gather(-1, order)


def _scattered(probs: torch.Tensor, kept: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The kept candidate masses [..., K] back at their ids in the vocabulary [..., V], renormalised."""
    out = torch.zeros_like(probs).scatter_(-1, ids, kept)
    return out / out.sum(-1, keepdim=True)


def top_p_filter_sorted(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The reference top-p (`process_logits`' rule) by a full sort of the vocabulary. [..., V] -> [..., V]"""
    kept, ids, _ = top_p_candidates(probs, top_p, probs.shape[-1])
    return _scattered(probs, kept, ids)


def top_p_filter(probs: torch.Tensor, top_p: float, candidates: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-p from the `candidates` most likely tokens: (probs [..., V], covered [...]).

    Let v be the smallest candidate probability. Every token above v is a candidate, so in the stable
    order the candidates above v are exactly the first j* tokens of the full sort: same values, same
    float32 prefix sums c, same keep decisions. When c[j*-1] >= top_p + margin, every later token's
    mass-before is >= c[j*-1] minus two roundings (< margin), so none is kept: the set is decided
    (covered). Otherwise (a flat distribution, or ties at v that the set might need) the row must be
    redone by the full sort. torch.topk's order among equal values does not matter: the candidates
    are re-sorted by the tie rule, and those at v are never kept.
    """
    kept, ids, covered = top_p_candidates(probs, top_p, candidates)
    return _scattered(probs, kept, ids), covered


def top_p_candidates(probs: torch.Tensor, top_p: float, candidates: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The top-p set as sorted candidates: (kept [..., K], ids [..., K], covered [...]) where K = `candidates`,
    or the whole vocabulary when `candidates` >= V (a full sort).

    ids are the K most likely tokens in the stable order (probability descending, id ascending); kept holds
    their probabilities where top-p keeps them and 0 elsewhere (not renormalised), with `top_p_filter`'s
    keep rule, so kept / kept.sum is `process_logits`' distribution on these ids, and every other token has
    probability 0 (where covered). covered is `top_p_filter`'s; always True for a full sort.
    """
    V = probs.shape[-1]
    if candidates >= V:
        ids = torch.arange(V, device=probs.device).expand(probs.shape)
        vals, ids = _stable_descending(probs, ids)
        keep = torch.cumsum(vals, dim=-1) - vals < top_p
        return vals.masked_fill(~keep, 0.0), ids, torch.ones(probs.shape[:-1], dtype=torch.bool, device=probs.device)
    vals, ids = torch.topk(probs, candidates, dim=-1)  # [..., K]
    vals, ids = _stable_descending(vals, ids)
    return _kept(vals, ids, top_p, vals > vals[..., -1:])  # (the last tie group may be cut: never kept)


def _kept(vals: torch.Tensor, ids: torch.Tensor, top_p: float, above: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-p's keep rule over sorted candidates vals [..., K] (stable order), `above` [..., K] marking those
    every more likely token is a candidate of: (kept, ids, covered) as `top_p_candidates` returns them."""
    cum = torch.cumsum(vals, dim=-1)
    keep = (cum - vals < top_p) & above
    covered = ((cum >= top_p + _TOP_P_MARGIN) & above).any(-1)
    return vals.masked_fill(~keep, 0.0), ids, covered


def verify_top_p(logits: torch.Tensor, params: SamplingParams, draft_tokens: torch.Tensor, draft_len: torch.Tensor,
                 draft_probs: torch.Tensor | None, u_accept: torch.Tensor, u_sample: torch.Tensor,
                 draft_ids: torch.Tensor | None = None, full_sort: bool = False) -> tuple[Verdict, torch.Tensor]:
    """`verify_sampled` for top-p < 1, computed over each position's sorted candidates: (verdict, covered [B, T]).

    Under top-p the processed p is zero outside the kept candidates, so every quantity of the rule lives on
    them: with w the kept masses in the stable order, ids their tokens and Z = sum w (`top_p_candidates`),

        p(x_i)              = w_j / Z  where ids_j = x_i, else 0
        max(0, p_a − q_a)   = max(0, w / Z − q_a[ids])   on the candidates; 0 on every other token
        y                   = ids[j*], j* the inverse-CDF draw over those weights in the stable order

    So the vocabulary-wide work is finding the sorted candidates (`_sorted_top_p`: on CUDA one small
    kernel pipeline, `kernels.top_p`); the rest is [B, T, K], not [B, T, V] (the dense rule adds about a
    dozen vocabulary-wide kernels: scatter, mask, sum, divide, gathers, the draw). The
    draw runs over tokens in the stable order rather than by id: another inverse-CDF map of the same u,
    so the same distribution; with full_sort (K = V) the order and the prefix sums are the same as from
    the candidates, so on a covered row both give the same tokens (`bass.rules.VerifyRule.exact`).
    The shapes are `verify_sampled`'s; logits [B, L+1, V].
    """
    kept, ids, covered = _sorted_top_p(logits, params, full_sort)  # [B, L+1, K]
    return verify_candidates(kept, ids, draft_tokens, draft_len, draft_probs, u_accept, u_sample, draft_ids,
                             vocab=logits.shape[-1]), covered


def verify_candidates(kept: torch.Tensor, ids: torch.Tensor, draft_tokens: torch.Tensor, draft_len: torch.Tensor,
                      draft_probs: torch.Tensor | None, u_accept: torch.Tensor, u_sample: torch.Tensor,
                      draft_ids: torch.Tensor | None = None, *, vocab: int) -> Verdict:
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
    j = sample_from(weights, u_sample)
    return Verdict(accepted, ids_next.gather(-1, j[:, None]).squeeze(-1))


def _sorted_top_p(logits: torch.Tensor, params: SamplingParams, full_sort: bool
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`top_p_candidates` of the tempered logits [..., V]: (kept, ids, covered), from TOP_P_CANDIDATES
    candidates, or the whole vocabulary with full_sort (or when it is small).

    On CUDA without top-k, the candidates come straight from the logits in a few small launches
    (`kernels.top_p.top_p_candidates_fused`: every token above a probability threshold, at most K of
    them, sorted), and full_sort sorts the same kernel's probabilities (`tempered_probs_fused`), so the
    two paths see bit for bit the same p. Elsewhere: torch's softmax, top-K and sort.
    """
    V = logits.shape[-1]
    small = _sort_all(V)
    if not _fused_top_p(logits, params):
        probs = _tempered(logits, params)
        return top_p_candidates(probs, params.top_p, V if full_sort or small else TOP_P_CANDIDATES)
    from kernels.top_p import tempered_probs_fused, top_p_candidates_fused

    if full_sort or small:
        return top_p_candidates(tempered_probs_fused(logits, params.temperature), params.top_p, V)
    vals, ids = top_p_candidates_fused(logits, params.temperature, TOP_P_CANDIDATES)  # p = 0 past the set
    return _kept(vals, ids, params.top_p, vals > 0)  # the set is whole: no tie group cut (unlike a top-K's)


def verify_top_p_fused(logits: torch.Tensor, params: SamplingParams, draft_tokens: torch.Tensor,
                       draft_len: torch.Tensor, draft_probs: torch.Tensor | None, u_accept: torch.Tensor,
                       u_sample: torch.Tensor, draft_ids: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, ...] | None:
    """`verify_top_p` and the round's glue in a few launches, where `_sorted_top_p` takes the kernels (and
    FUSED_VERIFY): `kernels.verify_sample.verify_candidates`'s outputs (accepted, next_token, decided, packed,
    emitted, rejected) from `kernels.top_p`'s candidates. None where it does not apply (greedy, no top-p, a
    vocabulary small enough for a full sort, top-k, a dense q, or not on CUDA): the caller takes the torch
    path. (A draft step under top-p makes a sparse q, `draft_sample`, the only kind the kernel reads.)"""
    if not (FUSED_VERIFY and not params.greedy and params.top_p < 1.0 and _fused_top_p(logits, params)
            and not _sort_all(logits.shape[-1]) and (draft_probs is None or draft_ids is not None)):
        return None
    from kernels.top_p import top_p_candidates_fused
    from kernels.verify_sample import verify_candidates as kernel

    vals, ids = top_p_candidates_fused(logits, params.temperature, TOP_P_CANDIDATES)  # [B, L+1, K]
    return kernel(vals, ids, params.top_p, _TOP_P_MARGIN, draft_tokens, draft_len, u_accept, u_sample, draft_probs,
                  draft_ids)


def _fused_top_p(logits: torch.Tensor, params: SamplingParams) -> bool:
    """Whether `_sorted_top_p` takes the kernel: on CUDA (tests force it on the interpreter), without top-k."""
    return FUSED_TOP_P and (logits.is_cuda or FUSED_TOP_P == "always") and not (
        params.top_k and params.top_k < logits.shape[-1])


def sample_from(probs: torch.Tensor, u: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """Inverse-CDF sample: the first token whose cumulative mass exceeds u * total. [..., V], [...] -> [...]

    Works on unnormalised non-negative weights; a token of zero weight is never chosen.

    In two levels, because torch's scan along a long last dim runs one thread block per row (an [8, 151936]
    float32 cumsum took 0.2 ms on an H100, the largest kernel of a decode step after the GEMMs). With the
    vocabulary cut into blocks of `block` entries, inner prefix sums c_b,i and block totals t_b:

        E_b = t_0 + … + t_b               b* = first block with E_b > u E_last
        i*  = first i with c_b*,i > u E_last − E_{b*−1}

    Each level is monotone, and b*, i* are clamped to the last block / entry of positive weight, so float
    rounding at u → 1 never lands on a zero-weight token.
    """
    V = probs.shape[-1]
    if block >= V:
        cdf = torch.cumsum(probs, dim=-1)
        target = (u.to(cdf.dtype) * cdf[..., -1]).unsqueeze(-1)
        idx = torch.searchsorted(cdf, target, right=True)
        return torch.minimum(idx, _last_positive(cdf)).squeeze(-1)
    inner = torch.nn.functional.pad(probs, (0, (-V) % block)).unflatten(-1, (-1, block)).cumsum(-1)  # [..., n, W]
    ends = inner[..., -1].cumsum(-1)  # [..., n]: E_b
    target = (u.to(ends.dtype) * ends[..., -1]).unsqueeze(-1)  # [..., 1]
    b = torch.minimum(torch.searchsorted(ends, target, right=True), _last_positive(ends))  # [..., 1]
    before = torch.where(b > 0, ends.gather(-1, (b - 1).clamp(min=0)), torch.zeros_like(target))
    row = inner.gather(-2, b[..., None].expand(*b.shape, block)).squeeze(-2)  # [..., W]: c_b*
    i = torch.minimum(torch.searchsorted(row, target - before, right=True), _last_positive(row))
    return (b * block + i).squeeze(-1)


def _last_positive(cdf: torch.Tensor) -> torch.Tensor:
    """[..., 1] index of the last entry of positive weight of a non-decreasing prefix-sum row (the first
    that reaches the row's total)."""
    return (cdf < cdf[..., -1:]).sum(-1, keepdim=True)


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
                   target_probs: torch.Tensor, u_accept: torch.Tensor, u_sample: torch.Tensor,
                   draft_ids: torch.Tensor | None = None) -> Verdict:
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
    return Verdict(accepted, sample_from(weights, u_sample))


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


def verify_logits(logits: torch.Tensor, params: SamplingParams, draft_tokens: torch.Tensor,
                  draft_len: torch.Tensor, draft_probs: torch.Tensor | None, u_accept: torch.Tensor,
                  u_sample: torch.Tensor, draft_ids: torch.Tensor | None = None, full_sort: bool = False
                  ) -> tuple[Verdict, torch.Tensor | None]:
    """The verdict of target logits [B, L+1, V] under `params`: (verdict, covered [B, L+1] or None).

    Greedy: `verify_greedy`. Top-p < 1: `verify_top_p`, over each position's sorted candidates (covered:
    whether they decided it; full_sort: all of them). Otherwise `verify_sampled` over the processed
    vocabulary. What `bass.rules.VerifyRule` computes in the graph, and by a full sort for its redo."""
    if params.greedy:
        return verify_greedy(draft_tokens, draft_len, logits), None
    if params.top_p < 1.0:
        return verify_top_p(logits, params, draft_tokens, draft_len, draft_probs, u_accept, u_sample, draft_ids,
                            full_sort=full_sort)
    probs, covered = process_logits_deferred(logits, params, full_sort)
    return verify_sampled(draft_tokens, draft_len, draft_probs, probs, u_accept, u_sample, draft_ids), covered
