"""Ragged attention in one Triton launch: shared prompt prefix read in place + per-sequence suffix.

Layout and masks are those of `kernels/layout.py`; `kernels/reference.py` is the plain-torch twin.

Work decomposition. Program (b, hkv, m, s) owns sequence b, kv head hkv, query-row tile m and KV
split s. The rows of one tile pack the REP = Hq / Hkv query heads of kv head hkv with the T new
tokens (row r -> token t = r // REP, head hkv * REP + r % REP), so each K/V tile is loaded once
for the whole GQA group and all draft positions: decode/verify attention is memory-bound, and
K/V bytes are the whole cost.

Keys live in one position space [0, plen + kvl): positions < plen come from the group's prefix
(read in place, never gathered), the rest from the sequence's suffix row pos - plen. Query t sits
at qpos_t = plen + kvl - qlen + t and sees key pos iff pos <= qpos_t and (window == 0 or
pos > qpos_t - window). Per row, online softmax in base 2 (s2 = scale * log2(e) * <q, k>):

    m' = max(m, max_j s2_j);  l' = l * 2^(m - m') + sum_j 2^(s2_j - m');
    acc' = acc * 2^(m - m') + sum_j 2^(s2_j - m') v_j;  o = acc / l.

Flash-decoding split: with few sequences the (b, hkv, m) programs cannot fill the GPU, and each
walks its keys one tile after another, so the position space of each sequence is cut into
NUM_SPLITS chunks (sized per sequence, so ragged lengths balance). Each split stores
o_s = acc_s / l_s and lse_s = m_s + log2(l_s); a second small launch merges them,
o = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M) with M = max_s lse_s. With NUM_SPLITS == 1
the first launch writes the output itself (one launch).

No host synchronisation: the grid depends on tensor shapes only, so the launcher can be captured
in a CUDA graph.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.layout import check_ragged_inputs
from kernels.pdl import enter, launch_args

LOG2E = 1.4426950408889634
_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs
_SM_COUNT: dict[int, int] = {}


@triton.jit
def _attend_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, pos, hi, qpos, qk_scale, span, d_ok,
                  EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr):
    """One K/V tile of the online softmax; pos [BLOCK_N] absolute key positions, qpos [BLOCK_M]."""
    col_ok = pos < hi  # [BLOCK_N]
    if EVEN_D:  # a mask constant along head_dim keeps the loads 16 bytes wide
        kv_mask = col_ok[:, None]
    else:
        kv_mask = col_ok[:, None] & d_ok[None, :]
    k = tl.load(k_ptrs, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
    v = tl.load(v_ptrs, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC) * qk_scale  # [BLOCK_M, BLOCK_N]
    ok = col_ok[None, :] & (pos[None, :] <= qpos[:, None])
    ok = ok & (pos[None, :] > qpos[:, None] - span)  # sliding window (span 2^30 when off)
    s = tl.where(ok, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet stays 0
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PREC)
    return acc, m_new, l_i


@triton.jit
def _ragged_attn_fwd(
    Q, PK, PV, PLEN, SGRP, SK, SV, KVLEN, QLEN, O, PART_O, PART_LSE,
    qk_scale, WINDOW, T, P, S, HKV,
    REP: tl.constexpr, D: tl.constexpr, NUM_SPLITS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr,
    DOT_PREC: tl.constexpr, PDL: tl.constexpr,
):
    enter(PDL)
    pid_bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    split = tl.program_id(2)
    b = pid_bh // HKV
    hkv = pid_bh % HKV
    g = tl.load(SGRP + b).to(tl.int64)
    plen = tl.load(PLEN + g).to(tl.int32)
    kvl = tl.load(KVLEN + b).to(tl.int32)
    qlen = tl.load(QLEN + b).to(tl.int32)

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M] packed (token, head) rows
    t = rows // REP
    head = hkv * REP + rows % REP
    row_in = rows < T * REP  # row exists in the output tensor
    row_ok = t < qlen  # row is a real query of this step
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    qpos = plen + kvl - qlen + t  # [BLOCK_M]

    # Key range of this program: its split of [0, plen + kvl), clipped to what the tile's rows can see.
    total = plen + kvl
    chunk = tl.cdiv(tl.cdiv(total, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = split * chunk
    t_first = pid_m * BLOCK_M // REP
    t_last = tl.minimum((pid_m * BLOCK_M + BLOCK_M - 1) // REP, qlen - 1)
    hi = tl.minimum(tl.minimum(lo + chunk, total), plen + kvl - qlen + t_last + 1)
    hi = tl.where(t_first < qlen, hi, lo)  # finished sequence or padding-only tile: no K/V traffic
    lo = tl.where(WINDOW > 0, tl.maximum(lo, plen + kvl - qlen + t_first - WINDOW + 1), lo)
    span = tl.where(WINDOW > 0, WINDOW, 1 << 30)

    # All tensors are contiguous (the launcher checks), so strides follow from the shapes.
    HQ = HKV * REP
    q_offs = t[:, None] * (HQ * D) + head[:, None] * D + d[None, :]  # q and o: [B, T, HQ, D]
    sp_n = HKV * D  # one key row of prefix or suffix: [.., rows, HKV, D]
    q_ptrs = Q + b.to(tl.int64) * (T * HQ * D) + q_offs
    q = tl.load(q_ptrs, mask=(row_in & row_ok)[:, None] & d_ok[None, :], other=0.0)  # [BLOCK_M, BLOCK_D]

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    n = tl.arange(0, BLOCK_N)

    # (a) shared prefix of group g, positions [lo, min(hi, plen)).
    p_hi = tl.minimum(hi, plen)
    pk_base = PK + g * (P * sp_n) + hkv * D
    pv_base = PV + g * (P * sp_n) + hkv * D
    for start in range(lo, p_hi, BLOCK_N):
        pos = start + n
        off = pos[:, None] * sp_n + d[None, :]  # int32: one sequence's rows, base is int64
        acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, pk_base + off, pv_base + off, pos, p_hi, qpos,
                                      qk_scale, span, d_ok, EVEN_D, DOT_PREC)
    # (b) own suffix, positions [max(lo, plen), hi) = suffix rows pos - plen.
    sk_base = SK + b.to(tl.int64) * (S * sp_n) + hkv * D
    sv_base = SV + b.to(tl.int64) * (S * sp_n) + hkv * D
    for start in range(tl.maximum(lo, plen), hi, BLOCK_N):
        pos = start + n
        off = (pos - plen)[:, None] * sp_n + d[None, :]
        acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, sk_base + off, sv_base + off, pos, hi, qpos,
                                      qk_scale, span, d_ok, EVEN_D, DOT_PREC)

    l_ok = l_i > 0.0
    o = acc / tl.where(l_ok, l_i, 1.0)[:, None]
    o = tl.where((row_ok & l_ok)[:, None], o, 0.0)  # padding rows and empty splits are exactly zero
    if NUM_SPLITS == 1:
        o_ptrs = O + b.to(tl.int64) * (T * HQ * D) + q_offs
        tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=row_in[:, None] & d_ok[None, :])
    else:
        # partials [B * HKV, NUM_SPLITS, T * REP, D] fp32; lse [B * HKV, NUM_SPLITS, T * REP]
        part = (pid_bh.to(tl.int64) * NUM_SPLITS + split) * T * REP
        lse = tl.where(l_ok, m_i + tl.log2(tl.where(l_ok, l_i, 1.0)), float("-inf"))
        tl.store(PART_O + (part + rows)[:, None] * D + d[None, :], o, mask=row_in[:, None] & d_ok[None, :])
        tl.store(PART_LSE + part + rows, lse, mask=row_in)


@triton.jit
def _merge_splits(
    O, PART_O, PART_LSE, T, HKV,
    REP: tl.constexpr, D: tl.constexpr, NUM_SPLITS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr,
):
    enter(PDL)
    pid_bh = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    b = pid_bh // HKV
    hkv = pid_bh % HKV
    t = rows // REP
    head = hkv * REP + rows % REP
    row_in = rows < T * REP
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    base = pid_bh.to(tl.int64) * NUM_SPLITS * T * REP

    lse_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    for s in range(NUM_SPLITS):
        lse_s = tl.load(PART_LSE + base + s * T * REP + rows, mask=row_in, other=float("-inf"))
        lse_max = tl.maximum(lse_max, lse_s)
    lse_safe = tl.where(lse_max == float("-inf"), 0.0, lse_max)
    num = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    den = tl.zeros([BLOCK_M], dtype=tl.float32)
    for s in range(NUM_SPLITS):
        part = base + s * T * REP
        lse_s = tl.load(PART_LSE + part + rows, mask=row_in, other=float("-inf"))
        w = tl.exp2(lse_s - lse_safe)  # empty split: 2^-inf = 0
        o_s = tl.load(PART_O + (part + rows)[:, None] * D + d[None, :], mask=row_in[:, None] & d_ok[None, :],
                      other=0.0)
        num += w[:, None] * o_s
        den += w
    o = num / tl.where(den > 0.0, den, 1.0)[:, None]
    o_ptrs = O + b.to(tl.int64) * (T * HKV * REP * D) + t[:, None] * (HKV * REP * D) + head[:, None] * D + d[None, :]
    tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=row_in[:, None] & d_ok[None, :])


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


def choose_config(B: int, T: int, Hq: int, Hkv: int, D: int, max_keys: int, device: torch.device,
                  elem_size: int = 2) -> dict[str, int]:
    """Block sizes, warps, pipeline depth and KV splits from shapes alone (no lengths: CUDA-graph safe)."""
    return dict(_config(B, T, Hq, Hkv, D, max_keys, elem_size, device.type == "cuda", _sm_count(device)))


# Decode and verify steps (at most DECODE_ROWS packed rows) run 16-row tiles and KV splits of at least
# DECODE_SPLIT_KEYS keys; larger steps (a prompt pass) keep splits of at least SPLIT_KEYS (measured below).
DECODE_ROWS = 64
DECODE_SPLIT_KEYS = 128
SPLIT_KEYS = 512


@functools.lru_cache(maxsize=1024)  # the launcher runs once per layer and step: keep its host cost low
def _config(B: int, T: int, Hq: int, Hkv: int, D: int, max_keys: int, elem_size: int, cuda: bool,
            sm_count: int) -> tuple[tuple[str, int], ...]:
    rows = T * (Hq // Hkv)
    block_m = max(16, triton.next_power_of_2(rows))
    decode = rows <= DECODE_ROWS
    if decode:
        # A decode/verify program is latency-bound (a few K/V tiles, one after another), so a wider row
        # tile only adds registers and masked work: on the H100 at Qwen2.5-1.5B's shapes (12 / 2 heads,
        # batch 8, ~300 keys) one 32-row tile took 10.9-11.3 µs per layer for 3-5 query tokens and two
        # 16-row tiles 8.6-8.7, unsplit (each config timed alone in a CUDA graph).
        block_m = 16
    elif block_m > (64 if D > 128 else 128):
        block_m = 64  # prefill-sized: tile the rows instead of one huge register tile
    # tl.dot takes K >= 16: narrower heads (a tiny test model's 8) run a 16-wide tile, the tail masked as for 80
    block_d = max(16, triton.next_power_of_2(D))
    num_stages = 3
    programs = B * Hkv * triton.cdiv(rows, block_m)
    # About two programs per SM saturate HBM (bench/results); with fewer, the position space of each
    # sequence is split (rounded down: 256 programs of a 7B's 32 kv heads at batch 8 stay whole). Short
    # splits are still worth it: the same run took 8.5 µs per layer unsplit at 1 query token and 6.9
    # with 3 splits of ~100 keys in 32-key tiles (7.6-7.9 at 3-5 tokens; the merge launch included).
    want = max(1, 2 * sm_count // programs) if cuda else 1
    split_keys = DECODE_SPLIT_KEYS if decode else SPLIT_KEYS
    num_splits = max(1, min(want, max_keys // split_keys, 32))
    short = num_splits > 1 and max_keys // num_splits <= 2 * DECODE_SPLIT_KEYS  # a few key tiles per split
    block_n = 32 if short or block_d * block_m > 128 * 64 else 64
    # Shared memory: (stages - 1) K+V tiles in flight plus row-tile scratch, under the H100's 227 KB.
    while ((num_stages - 1) * 2 * block_n + 2 * block_m) * block_d * elem_size > 160 * 1024 and block_n > 16:
        block_n //= 2
    num_warps = 8 if block_m * block_d >= 128 * 128 else 4
    return (("BLOCK_M", block_m), ("BLOCK_N", block_n), ("BLOCK_D", block_d), ("num_warps", num_warps),
            ("num_stages", num_stages if cuda else 1), ("NUM_SPLITS", num_splits))


def ragged_attention_tuned(
    q: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor, prefix_len: torch.Tensor,
    seq_group: torch.Tensor, suffix_k: torch.Tensor, suffix_v: torch.Tensor, kv_len: torch.Tensor,
    q_len: torch.Tensor, scale: float, window: int = 0, **overrides: int,
) -> torch.Tensor:
    """`ragged_attention` with the launch configuration overridable (NUM_SPLITS, BLOCK_N, num_warps ...)."""
    check_ragged_inputs(q, prefix_k, prefix_v, prefix_len, seq_group, suffix_k, suffix_v, kv_len, q_len)
    for name, t in (("prefix_k", prefix_k), ("prefix_v", prefix_v), ("suffix_k", suffix_k), ("suffix_v", suffix_v)):
        if not t.is_contiguous():  # copying a whole cache here would hide a large cost
            raise ValueError(f"{name} must be contiguous (the cache's per-layer views are); got strides {t.stride()}")
    q = q.contiguous()  # a no-op for the usual projection output; small otherwise
    if not (prefix_k.dtype == suffix_k.dtype == q.dtype):
        raise ValueError(f"q, prefix and suffix must share one dtype, got {q.dtype}, {prefix_k.dtype}, "
                         f"{suffix_k.dtype}")
    B, T, Hq, D = q.shape
    Hkv = prefix_k.shape[2]
    rep = Hq // Hkv
    out = _empty((B, T, Hq, D), dtype=q.dtype, device=q.device)  # [B, T, Hq, D]
    if B == 0 or T == 0:
        return out
    cfg = choose_config(B, T, Hq, Hkv, D, prefix_k.shape[1] + suffix_k.shape[1], q.device, q.element_size())
    cfg.update(overrides)
    splits = cfg.pop("NUM_SPLITS")
    num_warps, num_stages = cfg.pop("num_warps"), cfg.pop("num_stages")
    m_tiles = triton.cdiv(T * rep, cfg["BLOCK_M"])
    if splits > 1:
        part_o = _empty((B * Hkv, splits, T * rep, D), dtype=torch.float32, device=q.device)
        part_lse = _empty((B * Hkv, splits, T * rep), dtype=torch.float32, device=q.device)
    else:
        part_o = part_lse = out  # unused
    # fp32 must not silently drop to tf32 on the GPU: the tests ask for 1e-5.
    prec = "ieee" if q.dtype == torch.float32 else None
    _ragged_attn_fwd[(B * Hkv, m_tiles, splits)](
        q, prefix_k, prefix_v, prefix_len, seq_group, suffix_k, suffix_v, kv_len, q_len, out, part_o, part_lse,
        float(scale) * LOG2E, int(window), T, prefix_k.shape[1], suffix_k.shape[1], Hkv,
        REP=rep, D=D, NUM_SPLITS=splits, EVEN_D=cfg["BLOCK_D"] == D, DOT_PREC=prec,
        num_warps=num_warps, num_stages=num_stages, **cfg, **launch_args(q.device),
    )
    if splits > 1:
        # 16-row merge tiles for decode and verify shapes: a merge program's splits are summed one after
        # another, so a wider tile only lengthens each program. On the H100 at the embedded target's verify
        # (batch 8, 12 / 2 heads) one 32-row tile per kv head took 2.6-2.7 µs per layer at 3-4 query tokens
        # against 1.8-1.9 for one 16-row tile at 1-2 (`python -m bench.profile steps`'s kernel table).
        merge_m = 16 if T * rep <= DECODE_ROWS else min(64, triton.next_power_of_2(T * rep))
        _merge_splits[(B * Hkv, triton.cdiv(T * rep, merge_m))](
            out, part_o, part_lse, T, Hkv,
            REP=rep, D=D, NUM_SPLITS=splits, BLOCK_M=merge_m, BLOCK_D=cfg["BLOCK_D"], num_warps=4,
            **launch_args(q.device),
        )
    return out


def ragged_attention(
    q: torch.Tensor,  # [B, T, Hq, D]
    prefix_k: torch.Tensor,  # [G, P, Hkv, D]
    prefix_v: torch.Tensor,  # [G, P, Hkv, D]
    prefix_len: torch.Tensor,  # [G]
    seq_group: torch.Tensor,  # [B]
    suffix_k: torch.Tensor,  # [B, S, Hkv, D]
    suffix_v: torch.Tensor,  # [B, S, Hkv, D]
    kv_len: torch.Tensor,  # [B]
    q_len: torch.Tensor,  # [B]
    scale: float,
    window: int = 0,
) -> torch.Tensor:  # [B, T, Hq, D]
    """Ragged attention over a shared prefix plus per-sequence suffix; see the module docstring."""
    return ragged_attention_tuned(q, prefix_k, prefix_v, prefix_len, seq_group, suffix_k, suffix_v, kv_len,
                                  q_len, scale, window)


__all__ = ["ragged_attention", "ragged_attention_tuned", "choose_config"]
