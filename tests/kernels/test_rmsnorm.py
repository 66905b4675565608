"""Fused (residual add +) RMSNorm: the Triton kernel (interpreted on the CPU) against float64 and torch."""

from __future__ import annotations

import pytest
import torch
from fused_cases import DEVICE, fresh_gen, needs_cuda, poison, randn, rel_error

import kernels.rmsnorm as mod
from kernels.rmsnorm import rms_norm_fused, rms_norm_ref

SHAPES = [(2, 3, 64), (5, 96), (1, 2, 1000)]  # power of two, masked tail, several warps


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("offset", [0.0, 1.0], ids=["llama", "gemma"])
@pytest.mark.parametrize("with_residual", [False, True], ids=["norm", "add+norm"])
def test_rmsnorm_matches_float64_fp32(monkeypatch, shape, offset, with_residual) -> None:
    poison(monkeypatch, mod)
    gen = fresh_gen()
    x = randn(*shape, gen=gen, scale=3.0)
    res = randn(*shape, gen=gen) if with_residual else None
    w = randn(shape[-1], gen=gen, scale=0.5) + (0.0 if offset else 1.0)
    y, r = rms_norm_fused(x, w, 1e-6, offset, res)
    y_ref, r_ref = rms_norm_ref(x.double(), w.double(), 1e-6, offset, None if res is None else res.double())
    assert torch.isfinite(y).all(), "an output element was never written"
    assert rel_error(y, y_ref) < 1e-5
    if with_residual:
        assert torch.isfinite(r).all() and rel_error(r, r_ref) < 1e-6
    else:
        assert r is None


def test_rmsnorm_eps_matters_on_tiny_rows(monkeypatch) -> None:
    """A row of near-zero values is dominated by eps: a kernel that drops or misplaces eps fails here."""
    poison(monkeypatch, mod)
    gen = fresh_gen()
    x = randn(4, 64, gen=gen, scale=1e-4)
    w = randn(64, gen=gen)
    y, _ = rms_norm_fused(x, w, 1e-6)
    assert rel_error(y, rms_norm_ref(x.double(), w.double(), 1e-6)[0]) < 1e-5


def test_rmsnorm_refuses_mismatched_weight() -> None:
    x = torch.ones(2, 8, device=DEVICE)
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        rms_norm_fused(x, torch.ones(4, device=DEVICE), 1e-6)
    with pytest.raises(ValueError, match="share a dtype"):
        rms_norm_fused(x, torch.ones(8, device=DEVICE, dtype=torch.float64), 1e-6)


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0.0, 1.0], ids=["llama", "gemma"])
@pytest.mark.parametrize("with_residual", [False, True], ids=["norm", "add+norm"])
def test_rmsnorm_bf16_matches_torch_path_cuda(offset, with_residual) -> None:
    """bf16 at the 7B width: the add is bit-identical; the norm differs by at most a rounding flip."""
    gen = fresh_gen()
    x = randn(8, 3, 4096, gen=gen, scale=2.0, dtype=torch.bfloat16)
    res = randn(8, 3, 4096, gen=gen, dtype=torch.bfloat16) if with_residual else None
    w = (randn(4096, gen=gen, scale=0.3) + (0.0 if offset else 1.0)).to(torch.bfloat16)
    y, r = rms_norm_fused(x, w, 1e-5, offset, res)
    y_torch, r_torch = rms_norm_ref(x, w, 1e-5, offset, res)
    if with_residual:
        assert torch.equal(r, r_torch)
    torch.testing.assert_close(y, y_torch, rtol=2 ** -6, atol=1e-6)  # two bf16 ulps
    assert (y != y_torch).float().mean() < 0.01
    y64, _ = rms_norm_ref(x.double(), w.double(), 1e-5, offset, None if res is None else res.double())
    assert rel_error(y, y64) < 1e-2
