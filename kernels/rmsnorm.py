"""Fused (residual add +) RMSNorm in one Triton launch, with the model's exact rounding points.

For each row x [H] (and optionally the residual stream row res [H]):

    r = round(x + res)                                  (written out: the new residual stream)
    n = r / sqrt(mean(r^2) + eps)                       (float32)
    Llama (offset 0):  y = round(w * round(n))          (n rounded to the input dtype first)
    Gemma (offset 1):  y = round(n * (1 + w))           (multiplied in float32, rounded once)

round() is the cast to x's dtype. These are the cast points of `bass.models.layers.RMSNorm` (and of
HF's LlamaRMSNorm / Gemma3RMSNorm), so bf16 outputs agree with the torch path up to the order of
the mean's float32 sum. The torch path costs ~6 launches per norm (cast, pow, mean, add+rsqrt, mul,
cast, weight mul) plus one for the residual add; this is one.

x may also arrive as a split-K projection's unsummed slices (`kernels.split_sum`: a block's o or down
projection, the residual stream's next addend). Then the launch starts with

    x = round(Σ_s ws[s] + bias)                         (slices in order s = 0, 1, ..: the projection's bits)

and the projection's own second launch is never made.

One program per row: decode rows are at most a few thousand elements, so a row fits in registers
and the reduction needs no second pass. No host synchronisation (CUDA-graph safe).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.pdl import enter, launch_args
from kernels.split_sum import SplitSum

_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs


@triton.jit
def _rmsnorm_fwd(
    X, RES, R_OUT, W, Y, BIAS, H, eps, offset,
    HAS_RES: tl.constexpr, OFFSET_W: tl.constexpr, BLOCK_H: tl.constexpr, PARTS: tl.constexpr,
    HAS_BIAS: tl.constexpr, PDL: tl.constexpr,
):
    enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    ok = cols < H
    if PARTS:  # X: the slices [PARTS, rows, H] of a split-K projection (module docstring)
        acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
        for s in tl.static_range(PARTS):  # the projection's own order
            acc += tl.load(X + (s * tl.num_programs(0) + row) * H + cols, mask=ok, other=0.0)
        if HAS_BIAS:
            acc += tl.load(BIAS + cols, mask=ok, other=0.0).to(tl.float32)
        x = acc.to(Y.dtype.element_ty)
    else:
        x = tl.load(X + row * H + cols, mask=ok, other=0.0)  # [BLOCK_H], input dtype
    if HAS_RES:
        res = tl.load(RES + row * H + cols, mask=ok, other=0.0)
        x = (x.to(tl.float32) + res.to(tl.float32)).to(Y.dtype.element_ty)  # torch's add rounds here
        tl.store(R_OUT + row * H + cols, x, mask=ok)
    x32 = x.to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x32 * x32, axis=0) / H + eps)  # torch's rsqrt, not 1 / sqrt
    normed = x32 * inv_rms
    w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
    if OFFSET_W:
        y = normed * (offset + w)
    else:
        y = w * normed.to(Y.dtype.element_ty).to(tl.float32)
    tl.store(Y + row * H + cols, y.to(Y.dtype.element_ty), mask=ok)


def rms_norm_fused(
    x: torch.Tensor | SplitSum,  # [..., H]
    weight: torch.Tensor,  # [H]
    eps: float,
    offset: float = 0.0,
    residual: torch.Tensor | None = None,  # [..., H], like x
) -> tuple[torch.Tensor, torch.Tensor | None]:  # y [..., H], r [..., H] (None without residual)
    """RMSNorm of x (+ residual) as in the module docstring; returns (y, r) with r = x + residual. x may be a
    split-K projection's unsummed slices (`SplitSum`), summed here."""
    split = x if isinstance(x, SplitSum) else None
    H = x.shape[-1]
    if weight.shape != (H,):
        raise ValueError(f"weight must have shape ({H},) to match x's last dim, got {tuple(weight.shape)}")
    if weight.dtype != x.dtype:
        raise ValueError(f"weight ({weight.dtype}) and x ({x.dtype}) must share a dtype: cast the model once")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"residual {tuple(residual.shape)} {residual.dtype} must match x "
                         f"{tuple(x.shape)} {x.dtype}")
    if split is not None:
        x = split.ws  # [S, rows, H], contiguous
        N = x.shape[1]
    else:
        x = x.contiguous()  # no-op for the hidden states; per-head q/k views get copied (small)
        N = x.numel() // H if H else 0
    weight = weight.contiguous()
    shape = tuple(split.shape) if split is not None else x.shape
    y = _empty(shape, dtype=weight.dtype, device=x.device)
    r_out = None
    if residual is not None:
        residual = residual.contiguous()
        r_out = _empty(shape, dtype=weight.dtype, device=x.device)
    if N == 0:
        return y, r_out
    block_h = triton.next_power_of_2(H)
    num_warps = min(16, max(1, block_h // 512))  # ~16 fp32 values per thread at 4096
    bias = split.bias if split is not None else None
    _rmsnorm_fwd[(N,)](
        x, residual if residual is not None else y, r_out if r_out is not None else y, weight, y,
        bias if bias is not None else y, H, float(eps), float(offset),
        HAS_RES=residual is not None, OFFSET_W=bool(offset), BLOCK_H=block_h, PARTS=0 if split is None else
        x.shape[0], HAS_BIAS=bias is not None, num_warps=num_warps, **launch_args(x.device),
    )
    return y, r_out


def rms_norm_ref(
    x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float = 0.0, residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Plain-torch twin of `rms_norm_fused` (the cast points of `bass.models.layers.RMSNorm`)."""
    r = x if residual is None else x + residual
    r32 = r.float()
    normed = r32 * torch.rsqrt(r32.pow(2).mean(-1, keepdim=True) + eps)
    if offset:
        y = (normed * (offset + weight.float())).to(x.dtype)
    else:
        y = weight * normed.to(x.dtype)
    return y, (None if residual is None else r)


__all__ = ["rms_norm_fused", "rms_norm_ref"]
