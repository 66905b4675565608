"""Rotary embedding of q and k in one launch: the Triton kernel against float64 and the torch path."""

from __future__ import annotations

import pytest
import torch
from fused_cases import DEVICE, fresh_gen, needs_cuda, poison, randn, rel_error

import kernels.rope as mod
from kernels.rope import apply_rope_fused, apply_rope_ref


def qkv_views(B: int, T: int, Hq: int, Hkv: int, D: int, gen: torch.Generator, dtype=torch.float32):
    """q, k as the model has them: strided views of one fused projection output [B, T, (Hq + 2 Hkv) D]."""
    qkv = randn(B, T, (Hq + 2 * Hkv) * D, gen=gen, dtype=dtype)
    q, k, _ = qkv.split([Hq * D, Hkv * D, Hkv * D], dim=-1)
    return q.view(B, T, Hq, D), k.view(B, T, Hkv, D)


def cos_sin(B: int, T: int, D: int, gen: torch.Generator, dtype=torch.float32):
    """cos, sin [B, T, 1, D] in the half-split layout, at random large angles (positions up to ~4k)."""
    angles = randn(B, T, 1, D // 2, gen=gen, scale=2000.0).double()
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


@pytest.mark.parametrize(("B", "T", "Hq", "Hkv", "D"), [(2, 3, 4, 2, 16), (1, 5, 8, 1, 64), (3, 1, 3, 3, 80)],
                         ids=["gqa2", "gqa8", "D80"])
def test_rope_matches_float64_fp32(monkeypatch, B, T, Hq, Hkv, D) -> None:
    poison(monkeypatch, mod)
    gen = fresh_gen()
    q, k = qkv_views(B, T, Hq, Hkv, D, gen)
    cos, sin = cos_sin(B, T, D, gen)
    q_out, k_out = apply_rope_fused(q, k, cos, sin)
    assert torch.isfinite(q_out).all() and torch.isfinite(k_out).all(), "an output element was never written"
    assert rel_error(q_out, apply_rope_ref(q.double(), cos.double(), sin.double())) < 1e-5
    assert rel_error(k_out, apply_rope_ref(k.double(), cos.double(), sin.double())) < 1e-5


def test_rope_refuses_odd_head_dim() -> None:
    q = torch.ones(1, 2, 2, 7, device=DEVICE)
    with pytest.raises(ValueError, match="head_dim must be even"):
        apply_rope_fused(q, q, torch.ones(1, 2, 1, 7, device=DEVICE), torch.ones(1, 2, 1, 7, device=DEVICE))


@needs_cuda
@pytest.mark.gpu
def test_rope_bf16_matches_torch_path_cuda() -> None:
    """Within the rounding of the torch path's two bf16 products.

    The GPU compiler may contract x * cos + r * sin into a fused multiply-add, which skips one bf16
    rounding (seen on an H100: a few outputs where the two terms cancel moved by several ulps), so the
    bound is per element: 2^-7 (|x cos| + |r sin|), the error of the unfused torch path itself.
    """
    gen = fresh_gen()
    q, k = qkv_views(8, 5, 32, 8, 128, gen, dtype=torch.bfloat16)
    cos, sin = cos_sin(8, 5, 128, gen, dtype=torch.bfloat16)
    q_out, k_out = apply_rope_fused(q, k, cos, sin)
    for x, out in ((q, q_out), (k, k_out)):
        x1, x2 = x.float().chunk(2, dim=-1)
        scale = (x.float() * cos.float()).abs() + (torch.cat([-x2, x1], dim=-1) * sin.float()).abs()
        err = (out.float() - apply_rope_ref(x.float(), cos.float(), sin.float())).abs()
        assert bool((err <= 2 ** -7 * scale + 1e-6).all())
