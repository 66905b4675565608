"""Top-p's candidates straight from the logits: the tempered softmax and the sorted head of each row.

Top-p keeps the most likely tokens up to a mass of top_p, in the order (probability descending, id
ascending), so all it needs from a row of V logits is its few most likely tokens, sorted, and their
probabilities

    p_v = exp(z_v − M) / Z,    z = logits / T,   M = max_v z_v,   Z = Σ_v exp(z_v − M).

In torch that is a softmax over V, a top-K over V and a sort of the K (about 195 µs for 8 rows of
151,936 on an H100, in a graph: the largest part of a decode step after the GEMMs, because each of them
runs a few thread blocks per row). Here each row is cut into S chunks of CHUNK tokens, and five short
launches do it with every SM busy:

  1. per chunk, its max m_c and rescaled sum s_c = Σ exp(z − m_c);
     M = max_c m_c and Z = Σ_c s_c exp(m_c − M), summed in chunk order by whoever needs them;
  2. per chunk, a histogram of its probabilities in bins of a float32's exponent and top two mantissa
     bits, bin(p) = (bits(1.0) − bits(p)) >> 21: four bins an octave from p = 1 down. A positive float's
     bit pattern orders like its value, so bin() is monotone (never a rounding-dependent log);
  3. per row, b* = the last bin at which the running count (over bins, all chunks) is still <= K, and each
     chunk's offset: how many tokens of bins 0 .. b* the chunks before it hold;
  4. per chunk, its tokens of bins 0 .. b*, written at its offset as int64 keys
     (bits(p) << 32) | (2^31 − 1 − v), so in row order whatever order the programs run in;
  5. per row, the keys sorted descending in registers: by probability, then by id ascending (the tie rule).

So the candidates are exactly {v : p_v >= some threshold}: every token more likely than the least likely
candidate is a candidate, which is what makes top-p decided by them wherever their mass reaches top_p
(`bass.decode.sampling.top_p_candidates`). The output is [R, K] (probabilities descending, ids), padded past
the candidates with p = 0 and id 0. Nothing depends on the order in which programs run.

`tempered_probs_fused` writes p over the whole row from the same step 1, so a full sort of its output
(the exact path, for rows the candidates leave undecided) sees bit for bit the same probabilities. The
kernels compile without FMA contraction, so that every p is computed by the same roundings.
No host synchronisation (CUDA-graph safe).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

ONE_BITS = 0x3F800000  # float32 1.0: no probability lies above it
BIN_SHIFT = 21  # 23 mantissa bits − 2: four bins an octave
NUM_BINS = 128  # 32 octaves: p >= 2^-32; anything smaller falls in the last bin, never a candidate
CHUNK = 4096  # tokens per program along a row (V = 151,936: 38 chunks)
_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs
_ONE_BITS, _BIN_SHIFT = tl.constexpr(ONE_BITS), tl.constexpr(BIN_SHIFT)  # the kernels' view of the two


@triton.jit
def _chunk_stats(X, WS, V, stride_x, inv_t, S, CHUNK: tl.constexpr):
    row, c = tl.program_id(0).to(tl.int64), tl.program_id(1)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    z = tl.load(X + row * stride_x + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * inv_t
    m = tl.max(z, axis=0)
    base = tl.where(m > float("-inf"), m, 0.0)  # a chunk of -inf logits (a masked vocabulary) sums to 0, not NaN
    tl.store(WS + (row * S + c) * 2, m)
    tl.store(WS + (row * S + c) * 2 + 1, tl.sum(tl.exp(z - base), axis=0))


@triton.jit
def row_total(WS, row, S, S_BLOCK: tl.constexpr):
    """(M, Z) of a row from its chunks' (m_c, s_c), in chunk order: the same bits in every program."""
    c = tl.arange(0, S_BLOCK)
    m = tl.load(WS + (row * S + c) * 2, mask=c < S, other=float("-inf"))
    s = tl.load(WS + (row * S + c) * 2 + 1, mask=c < S, other=0.0)
    M = tl.max(m, axis=0)
    return M, tl.sum(s * tl.exp(m - M), axis=0)


@triton.jit
def _chunk_probs(X, WS, row, c, V, stride_x, inv_t, S, S_BLOCK: tl.constexpr, CHUNK: tl.constexpr):
    """(p, token ids, in-row mask) of chunk c of a row: each p = exp(z − M) / Z."""
    M, Z = row_total(WS, row, S, S_BLOCK)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    ok = cols < V
    z = tl.load(X + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32) * inv_t
    return tl.exp(z - M) / Z, cols, ok


@triton.jit
def _bins(p, ok, NUM_BINS: tl.constexpr):
    """bin(p) of the module docstring, clamped to the last bin (and the last bin for lanes past the row)."""
    b = (_ONE_BITS - p.to(tl.int32, bitcast=True)) >> _BIN_SHIFT
    return tl.where(ok, tl.minimum(tl.maximum(b, 0), NUM_BINS - 1), NUM_BINS - 1)


@triton.jit
def _chunk_histogram(X, WS, COUNTS, V, stride_x, inv_t, S,
                     S_BLOCK: tl.constexpr, CHUNK: tl.constexpr, NUM_BINS: tl.constexpr):
    row, c = tl.program_id(0).to(tl.int64), tl.program_id(1)
    p, _, ok = _chunk_probs(X, WS, row, c, V, stride_x, inv_t, S, S_BLOCK, CHUNK)
    tl.store(COUNTS + (row * S + c) * NUM_BINS + tl.arange(0, NUM_BINS), tl.histogram(_bins(p, ok, NUM_BINS), NUM_BINS))


@triton.jit
def _threshold(COUNTS, OFFS, LAST, S, K: tl.constexpr, S_BLOCK: tl.constexpr, NUM_BINS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, S_BLOCK)
    b = tl.arange(0, NUM_BINS)
    counts = tl.load(COUNTS + (row * S + c[:, None]) * NUM_BINS + b[None, :], mask=c[:, None] < S, other=0)
    fits = (tl.cumsum(tl.sum(counts, axis=0), axis=0) <= K) & (b < NUM_BINS - 1)  # a prefix of the bins
    last = tl.max(tl.where(fits, b, -1), axis=0)  # b*; -1: not even bin 0 fits (a flat row)
    taken = tl.sum(tl.where(b[None, :] <= last, counts, 0), axis=1)  # [S_BLOCK] per chunk
    tl.store(OFFS + row * S + c, tl.cumsum(taken, axis=0) - taken, mask=c < S)
    tl.store(LAST + row * 2, last)
    tl.store(LAST + row * 2 + 1, tl.sum(taken, axis=0))


@triton.jit
def _compact(X, WS, OFFS, LAST, KEYS, V, stride_x, inv_t, S,
             K: tl.constexpr, S_BLOCK: tl.constexpr, CHUNK: tl.constexpr, NUM_BINS: tl.constexpr):
    row, c = tl.program_id(0).to(tl.int64), tl.program_id(1)
    p, cols, ok = _chunk_probs(X, WS, row, c, V, stride_x, inv_t, S, S_BLOCK, CHUNK)
    take = _bins(p, ok, NUM_BINS) <= tl.load(LAST + row * 2)
    at = tl.load(OFFS + row * S + c) + tl.cumsum(take.to(tl.int32), axis=0) - 1
    key = (p.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (2147483647 - cols).to(tl.int64)
    tl.store(KEYS + row * K + at, key, mask=take)


@triton.jit
def _sort_candidates(KEYS, LAST, VALS, IDS, K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, K)
    n = tl.load(LAST + row * 2 + 1)
    keys = tl.sort(tl.load(KEYS + row * K + j, mask=j < n, other=0), descending=True)  # padding (0) last
    tl.store(VALS + row * K + j, (keys >> 32).to(tl.int32).to(tl.float32, bitcast=True))
    tl.store(IDS + row * K + j, tl.where(j < n, 2147483647 - (keys & 0xFFFFFFFF), 0))


@triton.jit
def _write_probs(X, WS, P, V, stride_x, inv_t, S, S_BLOCK: tl.constexpr, CHUNK: tl.constexpr):
    row, c = tl.program_id(0).to(tl.int64), tl.program_id(1)
    p, cols, ok = _chunk_probs(X, WS, row, c, V, stride_x, inv_t, S, S_BLOCK, CHUNK)
    tl.store(P + row * V + cols, p, mask=ok)


def logit_rows(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits [..., V] as rows [R, V] with unit stride along V (a view where it can be), once T is checked."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (greedy decoding takes the argmax instead), got {temperature}")
    x = logits.reshape(-1, logits.shape[-1])
    return x if x.stride(-1) == 1 else x.contiguous()


def _stats(x: torch.Tensor, temperature: float) -> tuple[torch.Tensor, dict]:
    """Step 1 for rows x [R, V]: the chunk partials [R, S, 2], and the launch arguments the others share."""
    R, V = x.shape
    S = triton.cdiv(V, CHUNK)
    ws = torch.empty((R, S, 2), dtype=torch.float32, device=x.device)
    common = dict(V=V, stride_x=x.stride(0), inv_t=1.0 / temperature, S=S)
    if R:
        _chunk_stats[(R, S)](x, ws, CHUNK=CHUNK, **common, num_warps=8, enable_fp_fusion=False)
    return ws, dict(common, S_BLOCK=triton.next_power_of_2(S), CHUNK=CHUNK)


def top_p_candidates_fused(logits: torch.Tensor, temperature: float, candidates: int
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The sorted head of softmax(logits / T) of each row (module docstring): logits [..., V] ->
    (probabilities [..., K] float32, descending, then p = 0 padding; ids [..., K] int64, 0 in the padding),
    K = `candidates`, a power of two."""
    K = candidates
    if K < 1 or K & (K - 1):
        raise ValueError(f"candidates must be a power of two (the in-register sort), got {K}")
    x = logit_rows(logits, temperature)
    R = x.shape[0]
    vals = _empty((R, K), dtype=torch.float32, device=x.device)
    ids = _empty((R, K), dtype=torch.int64, device=x.device)
    if R:
        ws, args = _stats(x, temperature)
        S, dev = args["S"], x.device
        counts = torch.empty((R, S, NUM_BINS), dtype=torch.int32, device=dev)
        offs = torch.empty((R, S), dtype=torch.int32, device=dev)
        last = torch.empty((R, 2), dtype=torch.int32, device=dev)  # [b*, how many candidates]
        keys = torch.empty((R, K), dtype=torch.int64, device=dev)
        plain = dict(num_warps=8, enable_fp_fusion=False)
        _chunk_histogram[(R, S)](x, ws, counts, NUM_BINS=NUM_BINS, **args, **plain)
        _threshold[(R,)](counts, offs, last, S, K=K, S_BLOCK=args["S_BLOCK"], NUM_BINS=NUM_BINS, num_warps=4)
        _compact[(R, S)](x, ws, offs, last, keys, K=K, NUM_BINS=NUM_BINS, **args, **plain)
        _sort_candidates[(R,)](keys, last, vals, ids, K=K, num_warps=8)
    shape = (*logits.shape[:-1], K)
    return vals.view(shape), ids.view(shape)


def tempered_probs_fused(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / T) over the last axis, float32, with the M and Z of `top_p_candidates_fused`."""
    x = logit_rows(logits, temperature)
    probs = _empty(x.shape, dtype=torch.float32, device=x.device)
    if x.shape[0]:
        ws, args = _stats(x, temperature)
        _write_probs[(x.shape[0], args["S"])](x, ws, probs, **args, num_warps=8, enable_fp_fusion=False)
    return probs.view(logits.shape)


def top_p_candidates_ref(probs: torch.Tensor, candidates: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain-torch twin of `top_p_candidates_fused`, from the probabilities [..., V] (e.g. the kernel's own,
    `tempered_probs_fused`): the same bins, threshold, order and padding, one row at a time."""
    flat = probs.float().reshape(-1, probs.shape[-1]).cpu()
    bins = ((ONE_BITS - flat.view(torch.int32)) >> BIN_SHIFT).clamp(0, NUM_BINS - 1)
    vals = torch.zeros(flat.shape[0], candidates)
    ids = torch.zeros(flat.shape[0], candidates, dtype=torch.long)
    for r in range(flat.shape[0]):
        running = torch.bincount(bins[r], minlength=NUM_BINS).cumsum(0)
        fits = ((running <= candidates) & (torch.arange(NUM_BINS) < NUM_BINS - 1)).nonzero()
        last = int(fits.max()) if len(fits) else -1
        order = sorted((bins[r] <= last).nonzero().squeeze(1).tolist(), key=lambda v: (-float(flat[r, v]), v))
        vals[r, :len(order)] = flat[r, order]
        ids[r, :len(order)] = torch.tensor(order, dtype=torch.long)
    shape = (*probs.shape[:-1], candidates)
    return vals.view(shape).to(probs.device), ids.view(shape).to(probs.device)


__all__ = ["tempered_probs_fused", "top_p_candidates_fused", "top_p_candidates_ref"]
