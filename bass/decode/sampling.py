"""Logits processing and sampling: temperature, top-k and top-p, the draft's proposals, inverse-CDF draws.

Top-p works over each row's most likely candidates (`top_p_candidates`, on CUDA `kernels.top_p`), with a full
sort only where they fall short: what the verify rule (`bass.decode.verify`) and the draft steps read.

Random numbers come from one counter-based stream per sequence (`bass.decode.streams`), drawn as uniforms and
turned into tokens by inverse-CDF sampling, so a sequence's tokens never depend on which other sequences
share its batch.
"""

from __future__ import annotations

import torch

from bass.config import SamplingParams

TOP_P_CANDIDATES = 1024  # top-p looks at this many most likely tokens first; a full sort only if they fall short
DRAFT_CANDIDATES = 256  # a draft step's top-p works within this many most likely tokens (`draft_proposal`)
FUSED_TOP_P: bool | str = True  # `sorted_top_p`'s kernel on CUDA; "always": on the CPU too (interpreter)
TOP_P_MARGIN = 1e-6  # > 2 float32 ulps of a cumulative mass <= 1: a row is decided only past it (`_kept`)


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
    if full_sort or sort_all(probs.shape[-1]):
        return top_p_filter_sorted(probs, params.top_p), torch.ones(probs.shape[:-1], dtype=torch.bool,
                                                                    device=probs.device)
    return top_p_filter(probs, params.top_p, TOP_P_CANDIDATES)


def sort_all(vocab: int) -> bool:
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
    """`draft_proposal` in the target's ids: (token [B], q [B, K], q_ids [B, K]), q sparse
    (`bass.decode.verify.verify_sampled`: q(q_ids[b, j]) = q[b, j], every other token 0), column v of logits [B, V']
    being target token ids[v] (a draft's reduced vocabulary) or v.

    On CUDA (without top-k) two launches do it (`kernels.draft_sample`): the candidates are each vocabulary
    chunk's few most likely tokens, where torch takes the K most likely of the row. Both paths keep and
    draw by the same rule; their candidates differ only where a chunk holds more of the top-p set than it
    contributes (or K tokens do not hold it), and q is always what the token was drawn from. The kernels
    write into `out` (token [B], q [B, K], q_ids [B, K], strided rows allowed) when given; torch's path
    returns its own tensors whatever `out` is.
    """
    if fused_top_p(logits, params):
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
    covered = ((cum >= top_p + TOP_P_MARGIN) & above).any(-1)
    return vals.masked_fill(~keep, 0.0), ids, covered


def sorted_top_p(logits: torch.Tensor, params: SamplingParams, full_sort: bool
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`top_p_candidates` of the tempered logits [..., V]: (kept, ids, covered), from TOP_P_CANDIDATES
    candidates, or the whole vocabulary with full_sort (or when it is small).

    On CUDA without top-k, the candidates come straight from the logits in a few small launches
    (`kernels.top_p.top_p_candidates_fused`: every token above a probability threshold, at most K of
    them, sorted), and full_sort sorts the same kernel's probabilities (`tempered_probs_fused`), so the
    two paths see bit for bit the same p. Elsewhere: torch's softmax, top-K and sort.
    """
    V = logits.shape[-1]
    small = sort_all(V)
    if not fused_top_p(logits, params):
        probs = _tempered(logits, params)
        return top_p_candidates(probs, params.top_p, V if full_sort or small else TOP_P_CANDIDATES)
    from kernels.top_p import tempered_probs_fused, top_p_candidates_fused

    if full_sort or small:
        return top_p_candidates(tempered_probs_fused(logits, params.temperature), params.top_p, V)
    vals, ids = top_p_candidates_fused(logits, params.temperature, TOP_P_CANDIDATES)  # p = 0 past the set
    return _kept(vals, ids, params.top_p, vals > 0)  # the set is whole: no tie group cut (unlike a top-K's)


def fused_top_p(logits: torch.Tensor, params: SamplingParams) -> bool:
    """Whether `sorted_top_p` takes the kernel: on CUDA (tests force it on the interpreter), without top-k."""
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
