"""Rotary embedding of q and k in one Triton launch (rotate-half convention, as HF Llama/Gemma).

Per token (b, t), head h and i < D/2, with c = cos[b, t], s = sin[b, t] ([D], the half-split
layout of `bass.models.layers.rope_cos_sin`):

    out_i       = round(round(x_i * c_i)           + round(-x_{i+D/2} * s_i))
    out_{i+D/2} = round(round(x_{i+D/2} * c_{i+D/2}) + round(x_i * s_{i+D/2}))

round() is the cast to x's dtype: the torch path `x * cos + rotate_half(x) * sin` rounds after each
of its three ops, and so does this kernel, so bf16 results are bit-identical to it (a product of two
bf16 numbers is exact in float32). The torch path costs ~7 launches per tensor (chunk, neg, cat,
two muls, add) and two tensors per layer; this is one launch for both.

One program per token: it rotates every q head and every k head of that token ([heads, D/2] tiles).
q and k may be strided views of the fused qkv projection (only the last dim must be contiguous);
the outputs are new contiguous tensors. No host synchronisation (CUDA-graph safe).

`apply_rope_and_store` also does the KV-cache write of a decode step: the rotated k and the token's v go
straight to their cache rows, given per token as `rows` [B, T] (computed once per forward, for all layers:
`bass.models.layers.forward_indices`), and only q' is returned. The torch path of that write was an index
chain per layer (arange, add, compare, where, two index_put: ~9 launches of 1-4 us each on an H100, about
0.45 ms of a 28-layer step); here it is the same single launch as the rotation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.pdl import enter, launch_args

_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs


@triton.jit
def _rotate_heads(X, OUT, x_base, out_base, stride_h, n_heads, c1, c2, s1, s2,
                  HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """Rotate the [n_heads, D] slice of one token; c1/c2/s1/s2 [1, BLOCK_HALF] float32 (already rounded)."""
    h = tl.arange(0, BLOCK_H)[:, None]
    i = tl.arange(0, BLOCK_HALF)[None, :]
    ok = (h < n_heads) & (i < HALF)
    x_off = x_base + h * stride_h + i
    x1 = tl.load(X + x_off, mask=ok, other=0.0).to(tl.float32)  # [BLOCK_H, BLOCK_HALF]
    x2 = tl.load(X + x_off + HALF, mask=ok, other=0.0).to(tl.float32)
    dt = OUT.dtype.element_ty
    o1 = (x1 * c1).to(dt).to(tl.float32) + (-x2 * s1).to(dt).to(tl.float32)
    o2 = (x2 * c2).to(dt).to(tl.float32) + (x1 * s2).to(dt).to(tl.float32)
    o_off = out_base + h * (2 * HALF) + i
    tl.store(OUT + o_off, o1.to(dt), mask=ok)
    tl.store(OUT + o_off + HALF, o2.to(dt), mask=ok)


@triton.jit
def _copy_heads(X, OUT, x_base, out_base, stride_h, n_heads, D: tl.constexpr, BLOCK_H: tl.constexpr,
                BLOCK_D: tl.constexpr):
    """Copy the [n_heads, D] slice of one token (heads strided by stride_h in X, by D in OUT)."""
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    ok = (h < n_heads) & (d < D)
    tl.store(OUT + out_base + h * D + d, tl.load(X + x_base + h * stride_h + d, mask=ok), mask=ok)


@triton.jit
def _rope_fwd(
    Q, K, COS, SIN, QO, KO, T, HQ, HKV,
    sq_b, sq_t, sq_h, sk_b, sk_t, sk_h, sc_b, sc_t,
    V, VO, ROWS, sv_b, sv_t, sv_h, so_b, so_s,
    HALF: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HKV: tl.constexpr, BLOCK_HALF: tl.constexpr,
    STORE: tl.constexpr, PDL: tl.constexpr,
):
    enter(PDL)
    tok = tl.program_id(0).to(tl.int64)
    b = tok // T
    t = tok % T
    i = tl.arange(0, BLOCK_HALF)[None, :]
    i_ok = i < HALF
    cs = b * sc_b + t * sc_t + i
    c1 = tl.load(COS + cs, mask=i_ok, other=0.0).to(tl.float32)  # [1, BLOCK_HALF]
    c2 = tl.load(COS + cs + HALF, mask=i_ok, other=0.0).to(tl.float32)
    s1 = tl.load(SIN + cs, mask=i_ok, other=0.0).to(tl.float32)
    s2 = tl.load(SIN + cs + HALF, mask=i_ok, other=0.0).to(tl.float32)
    _rotate_heads(Q, QO, b * sq_b + t * sq_t, tok * HQ * 2 * HALF, sq_h, HQ, c1, c2, s1, s2,
                  HALF, BLOCK_HQ, BLOCK_HALF)
    if STORE:  # k' and v into the cache row of this token: KO, VO [B, S, HKV, D] with heads D apart
        row = tl.load(ROWS + tok).to(tl.int64)
        kv_base = b * so_b + row * so_s
        _rotate_heads(K, KO, b * sk_b + t * sk_t, kv_base, sk_h, HKV, c1, c2, s1, s2, HALF, BLOCK_HKV, BLOCK_HALF)
        _copy_heads(V, VO, b * sv_b + t * sv_t, kv_base, sv_h, HKV, 2 * HALF, BLOCK_HKV, 2 * BLOCK_HALF)
    else:
        _rotate_heads(K, KO, b * sk_b + t * sk_t, tok * HKV * 2 * HALF, sk_h, HKV, c1, c2, s1, s2,
                      HALF, BLOCK_HKV, BLOCK_HALF)


def _checked(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """(q, k, cos [B, T, D], sin) after the checks every launch needs, with unit stride along D."""
    if q.dim() != 4 or k.dim() != 4 or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q [B, T, Hq, D] and k [B, T, Hkv, D] must share B, T, D; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}")
    B, T, Hq, D = q.shape
    if D % 2:
        raise ValueError(f"head_dim must be even for the rotate-half rotation, got {D}")
    if cos.shape != sin.shape or cos.shape[:2] != (B, T) or cos.shape[-1] != D or cos.numel() != B * T * D:
        raise ValueError(f"cos/sin must be [B, T, 1, D] = [{B}, {T}, 1, {D}], got {tuple(cos.shape)}, "
                         f"{tuple(sin.shape)}")
    if not (q.dtype == k.dtype == cos.dtype == sin.dtype):
        raise ValueError(f"q, k, cos, sin must share a dtype, got {q.dtype}, {k.dtype}, {cos.dtype}, {sin.dtype}")
    if q.stride(-1) != 1 or k.stride(-1) != 1:
        q, k = q.contiguous(), k.contiguous()  # the kernel walks D with unit stride
    cos, sin = cos.reshape(B, T, D), sin.reshape(B, T, D)
    if cos.stride() != sin.stride() or cos.stride(-1) != 1:
        cos, sin = cos.contiguous(), sin.contiguous()
    return q, k, cos, sin


def _launch(q, k, cos, sin, q_out, k_out, store: tuple | None) -> None:
    B, T, Hq, D = q.shape
    Hkv = k.shape[2]
    half = D // 2
    block_half = triton.next_power_of_2(half)
    block_hq, block_hkv = triton.next_power_of_2(Hq), triton.next_power_of_2(Hkv)
    num_warps = min(8, max(1, block_hq * block_half // 512))
    v, v_out, rows = store if store is not None else (q, q_out, q)  # unused without STORE
    _rope_fwd[(B * T,)](
        q, k, cos, sin, q_out, k_out, T, Hq, Hkv,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2), cos.stride(0), cos.stride(1),
        v, v_out, rows, v.stride(0), v.stride(1), v.stride(2), k_out.stride(0), k_out.stride(1),
        HALF=half, BLOCK_HQ=block_hq, BLOCK_HKV=block_hkv, BLOCK_HALF=block_half, STORE=store is not None,
        num_warps=num_warps, **launch_args(q.device),
    )


def apply_rope_fused(
    q: torch.Tensor,  # [B, T, Hq, D]
    k: torch.Tensor,  # [B, T, Hkv, D]
    cos: torch.Tensor,  # [B, T, 1, D] (or [B, T, D])
    sin: torch.Tensor,  # like cos
) -> tuple[torch.Tensor, torch.Tensor]:  # q', k' contiguous, shapes of q, k
    """Rotary embedding of q and k as in the module docstring, one launch."""
    q, k, cos, sin = _checked(q, k, cos, sin)
    q_out = _empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = _empty(k.shape, dtype=k.dtype, device=k.device)
    if q.shape[0] * q.shape[1]:
        _launch(q, k, cos, sin, q_out, k_out, None)
    return q_out, k_out


def apply_rope_and_store(
    q: torch.Tensor,  # [B, T, Hq, D]
    k: torch.Tensor,  # [B, T, Hkv, D]
    v: torch.Tensor,  # [B, T, Hkv, D]
    cos: torch.Tensor,  # [B, T, 1, D] (or [B, T, D])
    sin: torch.Tensor,  # like cos
    k_cache: torch.Tensor,  # [B, S, Hkv, D] one layer's cache (heads and D contiguous)
    v_cache: torch.Tensor,  # [B, S, Hkv, D] likewise, same strides
    rows: torch.Tensor,  # [B, T] integer cache row of each token, < S
) -> torch.Tensor:  # q' [B, T, Hq, D] contiguous
    """q' = RoPE(q); k_cache[b, rows[b, t]] = RoPE(k)[b, t] and v_cache[b, rows[b, t]] = v[b, t]; one launch.

    Tokens that share a row (padding sent to a scratch row) write it in an undefined order."""
    q, k, cos, sin = _checked(q, k, cos, sin)
    B, T, Hkv, D = k.shape
    if v.shape != k.shape or v.dtype != k.dtype or k_cache.dtype != k.dtype:
        raise ValueError(f"v {tuple(v.shape)} {v.dtype} must match k {tuple(k.shape)} {k.dtype} and the cache "
                         f"({k_cache.dtype})")
    if k_cache.shape != v_cache.shape or k_cache.stride() != v_cache.stride() or k_cache.shape[0] != B or \
            k_cache.shape[2:] != (Hkv, D) or k_cache.stride()[2:] != (D, 1):
        raise ValueError(f"k_cache/v_cache must be [B={B}, S, Hkv={Hkv}, D={D}] with contiguous heads, got "
                         f"{tuple(k_cache.shape)} strides {k_cache.stride()}, {tuple(v_cache.shape)}")
    if rows.shape != (B, T):
        raise ValueError(f"rows must be [B, T] = [{B}, {T}], got {tuple(rows.shape)}")
    if v.stride(-1) != 1:
        v = v.contiguous()
    q_out = _empty(q.shape, dtype=q.dtype, device=q.device)
    if B * T:
        _launch(q, k, cos, sin, q_out, k_cache, (v, v_cache, rows.contiguous()))
    return q_out


def apply_rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Plain-torch twin for one tensor: x * cos + rotate_half(x) * sin, x [B, T, H, D], cos/sin [B, T, 1, D]."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


__all__ = ["apply_rope_and_store", "apply_rope_fused", "apply_rope_ref"]
