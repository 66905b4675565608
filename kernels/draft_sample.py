"""A draft step's top-p sample in two launches, from its logits to the token and the sparse q the verify reads.

A draft may draw its proposal from any distribution q, as long as the verify is handed that same q
(`bass.decode.sampling`). So a draft step need not find its row's top-p set exactly, as the verify must; it
applies top-p within a candidate set C that is cheap to find, and reports the q it drew from.

C is the union of each chunk's PER_CHUNK most likely tokens. A row's V columns are dealt to S chunks in
blocks of BLOCK = 32 columns, block b to chunk b mod S (CHUNK columns each, S = ⌈V / CHUNK⌉), so that the
likely tokens of a code vocabulary, which crowd its low ids, spread over every chunk, while each block is
one coalesced load. With p the tempered softmax (z = logits / T, M = max z, Z = Σ exp(z − M), summed over
the chunks in chunk order as `kernels.top_p` does) and C sorted as x_1 .. x_n (probability descending,
column ascending), cut to its first K:

    c_j = p(x_1) + … + p(x_j),    w_j = p(x_j) if c_j − p(x_j) < top_p else 0,    q(x_j) = w_j / Σ w

and the token is drawn by inverse CDF over the w in candidate order: j* = #{j : W_j <= u Σ w} with W the
prefix sums of w, clamped to the last kept candidate so that u -> 1 never lands on a w = 0. Wherever no
chunk holds more than PER_CHUNK tokens of the row's top-p set, C holds that set and q is exactly top-p of
p (`draft_sample_ref` is the torch twin; a test holds both). Where a chunk holds more, q is top-p over C:
its tokens outside C get q = 0, which costs acceptance, never exactness.

The launches:

  1. per (row, chunk): m_c, s_c = Σ exp(z − m_c), and the chunk's PER_CHUNK largest z with their columns
     (PER_CHUNK max-and-argmax reductions over the chunk in registers; the leftmost wins a tie);
  2. per row: M and Z from the chunks, p of the S · PER_CHUNK heads, one sort of int64 keys
     (bits(p) << 32) | (2^31 − 1 − column), the keep rule, the draw, and the outputs: the token and q as K
     (mass, target id) pairs (column -> target id through `MAP`, the draft's reduced vocabulary, if it has
     one). q is descending, its nonzero masses a prefix: the verify reads pairs up to the last m > 0.

What it replaced: `kernels.top_p`'s exact candidates (five launches: stats, histogram, threshold, compact,
sort), a copy of u into a contiguous buffer, then the keep-and-draw kernel (`sample_candidates`, still
here: it samples from candidates already sorted). Those launches are too short to be anything but their
launch gaps: a draft step of the shipped draft ran 38 launches in about 107 µs on an H100, sampling about 26 µs
of it, and a round pays L draft steps. On the H100 the rule alone went from 19.5 to 10.0 µs at 8 rows in a CUDA
graph, and a draft step's graph from 0.100 to 0.090 ms. q stays sparse because every other
token has q = 0 and the verify needs q only at the draft token and at the target's own candidates
(`kernels.verify_sample`). No host synchronisation (CUDA-graph safe); the kernels compile without FMA contraction.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.top_p import logit_rows, row_total

_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs
CHUNK = 2048  # columns per program of launch 1 (the shipped draft's 32,769: 17 chunks)
PER_CHUNK = 8  # each chunk's most likely tokens that join C
BLOCK = 32  # columns dealt to a chunk at a time: one coalesced 128-byte load of float32 logits
KEY_ID = 2147483647  # 2^31 − 1: a key's low word is KEY_ID − column, so that lower columns sort first


@triton.jit
def _keep_and_draw(p, ids, u, top_p, j, K):
    """Top-p within sorted candidates p [NB] (descending, 0 past them) at target ids [NB], only the first K
    eligible, and u's draw: (token, q [NB], 0 past the kept prefix). No candidate: slot 0 with q = 1."""
    c = tl.cumsum(p, axis=0)
    keep = (c - p < top_p) & (p > 0) & (j < K)
    w = tl.where(keep, p, 0.0)
    W = tl.cumsum(w, axis=0)
    total = tl.max(W, axis=0)  # W's last entry: prefix sums of w >= 0 never decrease
    n = tl.sum(keep.to(tl.int32), axis=0)
    at = tl.minimum(tl.sum((u * total >= W).to(tl.int32), axis=0), tl.maximum(n - 1, 0))
    w = tl.where(n > 0, w, (j == 0).to(tl.float32))
    total = tl.where(n > 0, total, 1.0)
    return tl.sum(tl.where(j == at, ids, 0), axis=0), w / total


@triton.jit
def _chunk_heads(X, WS, HEAD_Z, HEAD_COL, V, stride_x, inv_t, S,
                 CHUNK: tl.constexpr, PER_CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row, c = tl.program_id(0).to(tl.int64), tl.program_id(1)
    i = tl.arange(0, CHUNK)
    cols = ((i // BLOCK) * S + c) * BLOCK + i % BLOCK  # block b of the row goes to chunk b mod S
    z = tl.load(X + row * stride_x + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * inv_t
    out = (row * S + c) * PER_CHUNK
    for h in tl.static_range(PER_CHUNK):  # one (max, leftmost argmax) reduction per head
        top, at = tl.max(z, axis=0, return_indices=True, return_indices_tie_break_left=True)
        if h == 0:
            base = tl.where(top > float("-inf"), top, 0.0)  # a chunk of -inf logits sums to 0, not NaN
            tl.store(WS + (row * S + c) * 2, top)
            tl.store(WS + (row * S + c) * 2 + 1, tl.sum(tl.exp(z - base), axis=0))
        tl.store(HEAD_Z + out + h, top)  # -inf once the chunk has run out of columns
        tl.store(HEAD_COL + out + h, ((at // BLOCK) * S + c) * BLOCK + at % BLOCK)
        z = tl.where(i == at, float("-inf"), z)


@triton.jit
def _draw_heads(WS, HEAD_Z, HEAD_COL, U, stride_u, MAP, TOKEN, stride_t, Q, stride_q, QIDS, stride_qi, top_p, S,
                N: tl.constexpr, NB: tl.constexpr, K: tl.constexpr, S_BLOCK: tl.constexpr, HAS_MAP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    M, Z = row_total(WS, row, S, S_BLOCK)
    j = tl.arange(0, NB)
    z = tl.load(HEAD_Z + row * N + j, mask=j < N, other=float("-inf"))
    col = tl.load(HEAD_COL + row * N + j, mask=j < N, other=0)
    p = tl.exp(z - M) / Z
    key = tl.where(p > 0, (p.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (2147483647 - col).to(tl.int64), 0)
    key = tl.sort(key, descending=True)  # probability descending, then column ascending; padding (0) last
    p = (key >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    ids = tl.where(key > 0, 2147483647 - (key & 0xFFFFFFFF), 0)
    if HAS_MAP:
        ids = tl.load(MAP + ids)
    token, q = _keep_and_draw(p, ids, tl.load(U + row * stride_u), top_p, j, K)
    tl.store(TOKEN + row * stride_t, token)
    tl.store(Q + row * stride_q + j, q, mask=j < K)
    tl.store(QIDS + row * stride_qi + j, ids, mask=j < K)


@triton.jit
def _sample_candidates(VALS, IDS, U, MAP, TOKEN, Q, QIDS, top_p, K: tl.constexpr, HAS_MAP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, K)
    ids = tl.load(IDS + row * K + j)
    if HAS_MAP:
        ids = tl.load(MAP + ids)
    token, q = _keep_and_draw(tl.load(VALS + row * K + j), ids, tl.load(U + row), top_p, j, K)
    tl.store(TOKEN + row, token)
    tl.store(Q + row * K + j, q)
    tl.store(QIDS + row * K + j, ids)


def _outputs(R: int, K: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (_empty((R,), dtype=torch.int64, device=device), _empty((R, K), dtype=torch.float32, device=device),
            _empty((R, K), dtype=torch.int64, device=device))


def _checked(out: tuple[torch.Tensor, ...], R: int, K: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`out` as the kernel writes it: token [R] int64, q [R, K] float32, q_ids [R, K] int64, unit stride in K."""
    token, q, q_ids = out
    ok = (token.shape == (R,) and token.dtype == torch.int64 and q.shape == q_ids.shape == (R, K)
          and q.dtype == torch.float32 and q_ids.dtype == torch.int64
          and (K == 1 or q.stride(1) == q_ids.stride(1) == 1))
    if not ok:
        raise ValueError(f"out must be token [{R}] int64, q [{R}, {K}] float32 and q_ids [{R}, {K}] int64 with "
                         f"contiguous rows; got {[(tuple(t.shape), t.dtype, t.stride()) for t in out]}")
    return token, q, q_ids


def draft_sample_fused(logits: torch.Tensor, temperature: float, top_p: float, u: torch.Tensor, candidates: int,
                       ids: torch.Tensor | None = None, out: tuple[torch.Tensor, ...] | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A draft step's sample (module docstring): logits [R, V'], u [R] -> (token [R] int64, q [R, K] float32,
    q_ids [R, K] int64), token and q_ids in the target's ids: column v of the logits is target token ids[v]
    (ids [V'], when the draft proposes from a reduced vocabulary), else token v. q is descending, its
    nonzero masses a prefix; `candidates` (K) is a power of two. u may be a strided column (of a round's
    uniforms): it is read in place. `out`, when given, is where the three go: strided rows are fine (a
    column of a proposal's [R, L] and [R, L, K] buffers, written in place of a copy after each step), as
    long as each q row is contiguous."""
    K = candidates
    if K < 1 or K & (K - 1):
        raise ValueError(f"candidates must be a power of two (the in-register sort), got {K}")
    x = logit_rows(logits, temperature)
    (R, V), dev = x.shape, x.device
    token, q, q_ids = _outputs(R, K, dev) if out is None else _checked(out, R, K)
    if not R:
        return token, q, q_ids
    S = triton.cdiv(V, CHUNK)
    N = S * PER_CHUNK
    ws = torch.empty((R, S, 2), dtype=torch.float32, device=dev)
    head_z = torch.empty((R, N), dtype=torch.float32, device=dev)
    head_col = torch.empty((R, N), dtype=torch.int32, device=dev)
    if u.dtype != torch.float32 or u.dim() != 1:
        u = u.reshape(R).to(torch.float32)
    _chunk_heads[(R, S)](x, ws, head_z, head_col, V, x.stride(0), 1.0 / temperature, S,
                         CHUNK=CHUNK, PER_CHUNK=PER_CHUNK, BLOCK=BLOCK, num_warps=8, enable_fp_fusion=False)
    _draw_heads[(R,)](ws, head_z, head_col, u, u.stride(0), head_col if ids is None else ids, token,
                      token.stride(0), q, q.stride(0), q_ids, q_ids.stride(0), float(top_p), S, N=N,
                      NB=max(K, triton.next_power_of_2(N)), K=K, S_BLOCK=triton.next_power_of_2(S),
                      HAS_MAP=ids is not None, num_warps=4, enable_fp_fusion=False)
    return token, q, q_ids


def sample_candidates(vals: torch.Tensor, cols: torch.Tensor, top_p: float, u: torch.Tensor,
                      ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The keep rule and the draw alone, on sorted candidates vals [R, K] (probabilities, descending, 0
    padding) and their columns cols [R, K] (`kernels.top_p`'s): (token [R], q [R, K], q_ids [R, K]) as
    `draft_sample_fused` returns them."""
    R, K = vals.shape
    token, q, q_ids = _outputs(R, K, vals.device)
    if R:
        _sample_candidates[(R,)](vals.contiguous(), cols.contiguous(), u.to(torch.float32).contiguous(),
                                 cols if ids is None else ids, token, q, q_ids, float(top_p),
                                 K=K, HAS_MAP=ids is not None, num_warps=4, enable_fp_fusion=False)
    return token, q, q_ids


def _dealt(V: int) -> torch.Tensor:
    """[S, CHUNK] the columns of each chunk in chunk order (module docstring), V where a chunk runs past V."""
    S = triton.cdiv(V, CHUNK)
    i = torch.arange(CHUNK)
    cols = ((i // BLOCK)[None, :] * S + torch.arange(S)[:, None]) * BLOCK + i % BLOCK
    return cols.clamp(max=V)


def draft_sample_ref(logits: torch.Tensor, temperature: float, top_p: float, u: torch.Tensor, candidates: int,
                     ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Plain-torch twin of `draft_sample_fused`: the same chunks, heads, order, keep rule and draw."""
    x = logits.reshape(-1, logits.shape[-1]).float()
    R, V = x.shape
    cols = _dealt(V).to(x.device)  # [S, CHUNK]
    z = torch.cat([x * (1.0 / temperature), x.new_full((R, 1), float("-inf"))], 1)[:, cols]  # [R, S, CHUNK]
    m = z.amax(-1)  # [R, S]
    s = torch.exp(z - torch.where(m > float("-inf"), m, 0.0)[..., None]).sum(-1)
    M = m.amax(-1, keepdim=True)
    Z = (s * torch.exp(m - M)).sum(-1, keepdim=True)
    # each chunk's PER_CHUNK largest, the leftmost first on ties (a stable sort of -z)
    order = torch.sort(-z, dim=-1, stable=True).indices[..., :PER_CHUNK]
    head_z = z.gather(-1, order).reshape(R, -1)
    head_col = cols.expand(R, -1, -1).gather(-1, order).reshape(R, -1)
    p = torch.exp(head_z - M) / Z
    key = torch.where(p > 0, (p.view(torch.int32).long() << 32) | (KEY_ID - head_col), 0)
    key = torch.sort(key, dim=-1, descending=True).values
    K = candidates
    if key.shape[1] < K:
        key = torch.cat([key, key.new_zeros(R, K - key.shape[1])], 1)
    key = key[:, :K]
    vals = (key >> 32).to(torch.int32).view(torch.float32)
    found = torch.where(key > 0, KEY_ID - (key & 0xFFFFFFFF), 0)
    c = torch.cumsum(vals, -1)
    keep = (c - vals < top_p) & (vals > 0)
    w = torch.where(keep, vals, 0.0)
    W = torch.cumsum(w, -1)
    n = keep.sum(-1, keepdim=True)
    at = torch.minimum((u.reshape(R, 1).float() * W[:, -1:] >= W).sum(-1, keepdim=True), (n - 1).clamp(min=0))
    none = n == 0
    w = torch.where(none, (torch.arange(K, device=x.device) == 0).float(), w)
    total = torch.where(none, torch.ones_like(W[:, -1:]), W[:, -1:])
    mapped = found if ids is None else ids[found]
    return mapped.gather(1, at).squeeze(1), w / total, mapped


__all__ = ["BLOCK", "CHUNK", "PER_CHUNK", "draft_sample_fused", "draft_sample_ref", "sample_candidates"]
