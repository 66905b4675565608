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


def _rows(cache, width: int, q_len: torch.Tensor) -> torch.Tensor:
    """The cache rows [B, T] a forward stores its tokens' K/V at (`kernels.forward_indices`'s torch twin)."""
    from kernels.forward_indices import forward_indices_ref

    table = torch.zeros(1, 2, 2, device=q_len.device)  # positions do not matter here
    return forward_indices_ref(cache.suffix_len, cache.prefix_len, cache.seq_group, q_len, width, cache.capacity,
                               table)[1]


def _store_case(gen, dtype, B=3, T=4, Hq=4, Hkv=2, D=16, S=9, layers=2, live=3):
    """A decode step as the model runs it: q/k/v views of one projection, a layer of a [L, Bmax, S+1, H, D]
    cache seen through a batch view, ragged lengths (one padding token goes to the scratch row S)."""
    from bass.runtime.cache import KVCache

    qkv = randn(B, T, (Hq + 2 * Hkv) * D, gen=gen, dtype=dtype)
    q, k, v = (t.view(B, T, -1, D) for t in qkv.split([Hq * D, Hkv * D, Hkv * D], dim=-1))
    cos, sin = cos_sin(B, T, D, gen, dtype=dtype)
    cache = KVCache.allocate(layers, B + 1, S, Hkv, D, dtype=dtype, device=DEVICE).view(live)
    cache.suffix_k.copy_(randn(*cache.suffix_k.shape, gen=gen, dtype=dtype))
    cache.suffix_v.copy_(randn(*cache.suffix_v.shape, gen=gen, dtype=dtype))
    cache.suffix_len.copy_(torch.tensor([0, 5, 2], dtype=torch.int32, device=DEVICE))
    q_len = torch.tensor([4, 4, 3], dtype=torch.int32, device=DEVICE)
    return q, k, v, cos, sin, cache, q_len


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_rope_and_store_matches_rope_then_cache_write(monkeypatch, dtype) -> None:
    """q' as `apply_rope_fused`'s; the cache afterwards as the torch path's rope + `KVCache.write` leaves it,
    every row but the scratch row (which padding writes in no defined order) equal bit for bit."""
    from kernels.rope import apply_rope_and_store

    poison(monkeypatch, mod)
    q, k, v, cos, sin, cache, q_len = _store_case(fresh_gen(), dtype)
    want = type(cache)(**{f: getattr(cache, f).clone() for f in cache.__dataclass_fields__})
    rows = _rows(cache, q.shape[1], q_len)
    assert rows[2, 3] == cache.capacity  # the padding token goes to the scratch row
    q_want, k_rot = apply_rope_fused(q, k, cos, sin)
    want.write(1, k_rot, v, rows)
    layer1_before = cache.suffix_k[1].clone()
    q_got = apply_rope_and_store(q, k, v, cos, sin, cache.suffix_k[1], cache.suffix_v[1], rows)
    assert torch.equal(q_got, q_want)
    S = cache.capacity
    assert torch.equal(cache.suffix_k[:, :, :S], want.suffix_k[:, :, :S])
    assert torch.equal(cache.suffix_v[:, :, :S], want.suffix_v[:, :, :S])
    assert not torch.equal(cache.suffix_k[1, :, :S], layer1_before[:, :S])  # layer 1 was written


def test_rope_and_store_refuses_a_cache_of_another_shape() -> None:
    from kernels.rope import apply_rope_and_store

    q, k, v, cos, sin, cache, q_len = _store_case(fresh_gen(), torch.float32)
    rows = _rows(cache, q.shape[1], q_len)
    with pytest.raises(ValueError, match="k_cache/v_cache must be"):
        apply_rope_and_store(q, k, v, cos, sin, cache.suffix_k[1].transpose(2, 3), cache.suffix_v[1], rows)
    with pytest.raises(ValueError, match="rows must be"):
        apply_rope_and_store(q, k, v, cos, sin, cache.suffix_k[1], cache.suffix_v[1], rows[:, :2])
