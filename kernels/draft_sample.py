"""A draft step's top-p sample, from its sorted candidates to the token and the dense q the verify reads.

A draft may draw its proposal from any distribution q, as long as the verify is handed that same q
(`bass.sampling`), so a draft step applies top-p within its K most likely tokens x_1 .. x_K (sorted:
probability descending, id ascending), p the tempered softmax:

    c_j = p(x_1) + … + p(x_j),    w_j = p(x_j) if c_j − p(x_j) < top_p else 0,    q(x_j) = w_j / Σ w

and draws the token by inverse CDF over the w in candidate order: j* = #{j : W_j <= u Σ w} with W the
prefix sums of w, clamped to the last kept candidate so that u -> 1 never lands on a w = 0. The
candidates come from `kernels.top_p` (the tokens above a probability bin, at most K of them), and this
kernel does the rest in one program per row:

  - the keep rule, the prefix sums and the draw, over K values in registers;
  - the token, mapped through the draft's reduced vocabulary (`MAP`: column -> target id) if it has one;
  - q scattered into a zeroed [R, V] row of the target's vocabulary: what the verify gathers q(x) from.

In torch that is a dozen launches (two prefix sums, a search, gathers, a scatter, the id maps), each a
few µs for a handful of values per row; on an H100 they were a third of a draft step's graph. A row with
no candidate (its K + 1 most likely tokens within a quarter octave: a near-uniform row) proposes
candidate slot 0's id, 0, with q = 1 there: an exact if unpromising draft. No host synchronisation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.top_p import top_p_candidates_fused

_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs


@triton.jit
def _sample_candidates(VALS, IDS, U, MAP, TOKEN, Q, V, top_p, K: tl.constexpr, HAS_MAP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, K)
    p = tl.load(VALS + row * K + j)  # [K] descending, 0 past the candidates
    ids = tl.load(IDS + row * K + j)
    c = tl.cumsum(p, axis=0)
    keep = (c - p < top_p) & (p > 0)
    w = tl.where(keep, p, 0.0)
    W = tl.cumsum(w, axis=0)
    total = tl.max(W, axis=0)  # W's last entry: prefix sums of w >= 0 never decrease
    n = tl.sum(keep.to(tl.int32), axis=0)
    at = tl.minimum(tl.sum((tl.load(U + row) * total >= W).to(tl.int32), axis=0), tl.maximum(n - 1, 0))
    w = tl.where(n > 0, w, (j == 0).to(tl.float32))  # no candidate: slot 0, q = 1
    total = tl.where(n > 0, total, 1.0)
    if HAS_MAP:
        ids = tl.load(MAP + ids)
    tl.store(TOKEN + row, tl.sum(tl.where(j == at, ids, 0), axis=0))
    tl.store(Q + row * V + ids, w / total, mask=w > 0)


def draft_sample_fused(logits: torch.Tensor, temperature: float, top_p: float, u: torch.Tensor, candidates: int,
                       vocab: int, ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A draft step's sample (module docstring): logits [R, V'], u [R] -> (token [R] int64, q [R, vocab]
    float32), both in the target's ids: column v of the logits is target token ids[v] (ids [V'], when the
    draft proposes from a reduced vocabulary), else token v. `candidates` (K) is a power of two."""
    vals, cols = top_p_candidates_fused(logits, temperature, candidates)  # [R, K]
    return sample_candidates(vals, cols, top_p, u, vocab, ids)


def sample_candidates(vals: torch.Tensor, cols: torch.Tensor, top_p: float, u: torch.Tensor, vocab: int,
                      ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel alone, on sorted candidates vals [R, K] (probabilities, descending, 0 padding) and their
    columns cols [R, K]: (token [R], q [R, vocab]) as `draft_sample_fused` returns them."""
    R, K = vals.shape
    token = _empty((R,), dtype=torch.int64, device=vals.device)
    q = torch.zeros((R, vocab), dtype=torch.float32, device=vals.device)
    if R:
        _sample_candidates[(R,)](vals.contiguous(), cols.contiguous(), u.to(torch.float32).contiguous(),
                                 cols if ids is None else ids, token, q, vocab, float(top_p),
                                 K=K, HAS_MAP=ids is not None, num_warps=4, enable_fp_fusion=False)
    return token, q


def draft_sample_ref(vals: torch.Tensor, cols: torch.Tensor, top_p: float, u: torch.Tensor, vocab: int,
                     ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain-torch twin of the kernel, from the same sorted candidates vals, cols [R, K]."""
    c = torch.cumsum(vals, -1)
    keep = (c - vals < top_p) & (vals > 0)
    w = torch.where(keep, vals, 0.0)
    W = torch.cumsum(w, -1)
    n = keep.sum(-1, keepdim=True)
    at = torch.minimum((u[:, None] * W[:, -1:] >= W).sum(-1, keepdim=True), (n - 1).clamp(min=0))
    none = n == 0
    w = torch.where(none, (torch.arange(vals.shape[1], device=vals.device) == 0).float(), w)
    total = torch.where(none, torch.ones_like(W[:, -1:]), W[:, -1:])
    mapped = cols if ids is None else ids[cols]
    q = torch.zeros(vals.shape[0], vocab, device=vals.device).scatter_add_(1, mapped, w / total)  # (padding adds 0)
    return mapped.gather(1, at).squeeze(1), q


__all__ = ["draft_sample_fused", "draft_sample_ref", "sample_candidates"]
