"""Gated activation act(gate) * up of the fused gate/up output: the Triton kernel against float64 and torch."""

from __future__ import annotations

import pytest
import torch
from fused_cases import fresh_gen, needs_cuda, poison, randn, rel_error

import kernels.activation as mod
from kernels.activation import gated_act_fused, gated_act_ref

# e^{-2y} of a large negative gate overflows to inf by design (act -> -0); numpy says so in the interpreter.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")


@pytest.mark.parametrize("gelu", [False, True], ids=["silu", "gelu_tanh"])
@pytest.mark.parametrize("shape", [(2, 3, 100), (3, 3000)], ids=["one-tile", "three-tiles"])
def test_gated_act_matches_float64_fp32(monkeypatch, gelu, shape) -> None:
    poison(monkeypatch, mod)
    gen = fresh_gen()
    gate_up = randn(*shape, gen=gen, scale=4.0)  # reaches both tails of silu / gelu
    out = gated_act_fused(gate_up, gelu)
    assert out.shape == (*shape[:-1], shape[-1] // 2)
    assert torch.isfinite(out).all(), "an output element was never written"
    assert rel_error(out, gated_act_ref(gate_up.double(), gelu)) < 1e-5


def test_gated_act_extreme_gates(monkeypatch) -> None:
    """Gates of +-100: exp overflows to inf inside the kernel, which must still give act = x or 0."""
    poison(monkeypatch, mod)
    gen = fresh_gen()
    gate_up = randn(2, 64, gen=gen)
    gate_up[:, :32] = torch.where(gate_up[:, :32] > 0, 100.0, -100.0)
    for gelu in (False, True):
        out = gated_act_fused(gate_up, gelu)
        assert torch.isfinite(out).all()
        assert rel_error(out, gated_act_ref(gate_up.double(), gelu)) < 1e-6


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("gelu", [False, True], ids=["silu", "gelu_tanh"])
def test_gated_act_bf16_matches_torch_path_cuda(gelu) -> None:
    gen = fresh_gen()
    gate_up = randn(8, 3, 2 * 11008, gen=gen, scale=2.0, dtype=torch.bfloat16)
    out, ref = gated_act_fused(gate_up, gelu), gated_act_ref(gate_up, gelu)
    # At most a rounding flip of the bf16 result: the kernel's sigmoid form of gelu differs from torch's
    # tanh in the last float32 bits, which moves ~1-2% of the bf16 roundings by one ulp (seen on an H100).
    torch.testing.assert_close(out, ref, rtol=2 ** -7, atol=1e-5)
    # ...and it agrees with the exact activation as well as torch's own bf16 path does
    exact = gated_act_ref(gate_up.double(), gelu)
    assert rel_error(out, exact) < 2 * rel_error(ref, exact) + 1e-6
