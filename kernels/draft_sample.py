"""A draft step's top-p sample, from its sorted candidates to the token and the sparse q the verify reads.

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
  - q as K (mass, target id) pairs, q(ids_j) = w_j / Σ w: what the verify reads q(x) and the residual from.

q stays sparse because every other token has q = 0, and the verify needs q only at the draft token and at
the target's own candidates (`kernels.verify_sample`). Dense rows over the target's 151,936 tokens were
14.6 MB of q per round at k = 8, L = 3, zero-filled at each step and copied twice (out of the step's graph,
into the verify's): about 70 MB of memory traffic and 7 launches a round. The pairs are 3 KB a row.

In torch that is a dozen launches (two prefix sums, a search, gathers, the id maps), each a few µs for a
handful of values per row; on an H100 they were a third of a draft step's graph. One program per row
from logits to sample (the candidates included) was slower: 0.135 ms a draft step at k = 8 against
0.104 (H100, ad hoc), since `kernels.top_p` spreads each row's chunks over the SMs. A row with no
candidate (its K + 1 most likely tokens within a quarter octave: a near-uniform row) proposes candidate
slot 0's id, 0, with q = 1 there: an exact if unpromising draft. No host synchronisation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.top_p import top_p_candidates_fused

_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs


@triton.jit
def _sample_candidates(VALS, IDS, U, MAP, TOKEN, Q, QIDS, top_p, K: tl.constexpr, HAS_MAP: tl.constexpr):
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
    tl.store(Q + row * K + j, w / total)
    tl.store(QIDS + row * K + j, ids)


def draft_sample_fused(logits: torch.Tensor, temperature: float, top_p: float, u: torch.Tensor, candidates: int,
                       ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A draft step's sample (module docstring): logits [R, V'], u [R] -> (token [R] int64, q [R, K] float32,
    q_ids [R, K] int64), token and q_ids in the target's ids: column v of the logits is target token ids[v]
    (ids [V'], when the draft proposes from a reduced vocabulary), else token v. q is descending, its
    nonzero masses a prefix; `candidates` (K) is a power of two."""
    vals, cols = top_p_candidates_fused(logits, temperature, candidates)  # [R, K]
    return sample_candidates(vals, cols, top_p, u, ids)


def sample_candidates(vals: torch.Tensor, cols: torch.Tensor, top_p: float, u: torch.Tensor,
                      ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The kernel alone, on sorted candidates vals [R, K] (probabilities, descending, 0 padding) and their
    columns cols [R, K]: (token [R], q [R, K], q_ids [R, K]) as `draft_sample_fused` returns them."""
    R, K = vals.shape
    token = _empty((R,), dtype=torch.int64, device=vals.device)
    q = _empty((R, K), dtype=torch.float32, device=vals.device)
    q_ids = _empty((R, K), dtype=torch.int64, device=vals.device)
    if R:
        _sample_candidates[(R,)](vals.contiguous(), cols.contiguous(), u.to(torch.float32).contiguous(),
                                 cols if ids is None else ids, token, q, q_ids, float(top_p),
                                 K=K, HAS_MAP=ids is not None, num_warps=4, enable_fp_fusion=False)
    return token, q, q_ids


def draft_sample_ref(vals: torch.Tensor, cols: torch.Tensor, top_p: float, u: torch.Tensor,
                     ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
    return mapped.gather(1, at).squeeze(1), w / total, mapped


__all__ = ["draft_sample_fused", "draft_sample_ref", "sample_candidates"]
