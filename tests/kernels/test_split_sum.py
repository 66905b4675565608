"""A split-K projection's slices summed by the norm that reads them (`kernels.split_sum`): the same bits as the
projection's own second launch, and that launch never made."""

from __future__ import annotations

import pytest
import torch
from fused_cases import DEVICE, fresh_gen, needs_cuda, randn, tiny_logits

import kernels.skinny_gemm as skinny
from bass.models import layers, linear
from bass.models.loader import build_random
from bench.synthetic import TINY
from kernels.rmsnorm import rms_norm_fused
from kernels.skinny_gemm import SkinnyConfig, skinny_gemm
from kernels.split_sum import SplitSum, materialize

pytestmark = pytest.mark.slow  # Triton kernels in the interpreter

SPLIT2, SPLIT3 = SkinnyConfig(16, 32, 2, 2), SkinnyConfig(16, 32, 3, 2)
# the interpreter's dtype (its bf16 dot is emulated in float32 by the kernel); bf16 on CUDA, where rounding bites
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32


@pytest.fixture(autouse=True)
def _forget():
    linear.clear()
    yield
    linear.clear()


@pytest.mark.parametrize("config", [SPLIT2, SPLIT3], ids=["split2", "split3"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("with_residual", [False, True], ids=["norm", "add+norm"])
def test_norm_of_the_slices_is_the_norm_of_the_projection(config, with_bias, with_residual) -> None:
    gen = fresh_gen()
    M, K, N = 5, 192, 48  # a masked row tile and column tail; K splits in 2 and 3 slices of 32-wide steps
    x, w = randn(M, K, gen=gen, dtype=DTYPE), randn(N, K, gen=gen, scale=0.2, dtype=DTYPE)
    bias = randn(N, gen=gen, dtype=DTYPE) if with_bias else None
    g = (randn(N, gen=gen, scale=0.3) + 1).to(DTYPE)
    res = randn(M, N, gen=gen, dtype=DTYPE) if with_residual else None
    y = skinny_gemm(x, w, bias, config)
    parts = skinny_gemm(x, w, bias, config, defer_sum=True)
    assert isinstance(parts, SplitSum) and parts.ws.shape == (config.split_k, M, N) and parts.shape == (M, N)
    assert torch.equal(parts.total(), y) and torch.equal(materialize(parts), y)
    want, want_r = rms_norm_fused(y, g, 1e-6, 0.0, res)
    got, got_r = rms_norm_fused(parts, g, 1e-6, 0.0, res)
    assert torch.equal(got, want)
    assert (got_r is None and want_r is None) if res is None else torch.equal(got_r, want_r)


def test_an_unsplit_config_or_a_wider_output_gives_a_tensor() -> None:
    gen = fresh_gen()
    x, w = randn(4, 64, gen=gen, dtype=DTYPE), randn(32, 64, gen=gen, dtype=DTYPE)
    y = skinny_gemm(x, w, None, SkinnyConfig(16, 32, 1, 2), defer_sum=True)
    assert isinstance(y, torch.Tensor) and torch.equal(y, skinny_gemm(x, w, None, SkinnyConfig(16, 32, 1, 2)))
    wide = skinny_gemm(x, w, None, SPLIT2, out_dtype=torch.float64 if DEVICE == "cpu" else torch.float32,
                       defer_sum=True)  # (an LM head's float32 logits: its sum widens them, it stays)
    assert isinstance(wide, torch.Tensor)
    assert isinstance(skinny_gemm(x[:0], w, None, SPLIT2, defer_sum=True), torch.Tensor)


def _split_blocks(monkeypatch, model) -> list:
    """Choose SPLIT2 for the blocks' o and down projections at 16-row tiles; count the second launches."""
    H, q, inner = TINY.hidden_size, TINY.num_heads * TINY.head_dim, TINY.intermediate_size
    p = next(model.parameters())
    for K in (q, inner):
        linear._choices[(p.device.type, H, K, False, p.dtype, p.dtype, 16)] = SPLIT2
    launches, real = [], skinny.sum_slices
    monkeypatch.setattr(skinny, "sum_slices", lambda *a: (launches.append(1), real(*a))[1])
    return launches


@pytest.mark.skipif(DEVICE == "cuda", reason="the interpreter twin; on CUDA the device test below runs")
def test_a_model_through_the_kernels_sums_its_slices_in_its_norms(monkeypatch) -> None:
    """Forced through the fused kernels (the interpreter), a Llama model's o and down projections make no second
    launch, and its logits are the bits of the model whose projections sum their own slices."""
    model = build_random(TINY, seed=21)
    launches = _split_blocks(monkeypatch, model)
    monkeypatch.setattr(layers, "_fused", lambda *tensors: True)
    monkeypatch.setattr(linear, "DEFER_SUMS", False)
    want = tiny_logits(model, seed=22)
    assert len(launches) == 2 * 2 * TINY.num_layers  # two forwards, o and down in every block
    launches.clear()
    monkeypatch.setattr(linear, "DEFER_SUMS", True)
    got = tiny_logits(model, seed=22)
    assert launches == [] and torch.equal(got, want)


@pytest.mark.skipif(DEVICE == "cuda", reason="the interpreter twin; on CUDA the device test below runs")
def test_the_torch_path_sums_the_slices_it_is_handed(monkeypatch) -> None:
    """On the CPU's torch ops (no fused norm) a deferred sum is summed by its own launch: the same logits."""
    model = build_random(TINY, seed=23)
    launches = _split_blocks(monkeypatch, model)
    monkeypatch.setattr(linear, "DEFER_SUMS", False)
    want = tiny_logits(model, seed=24)
    monkeypatch.setattr(linear, "DEFER_SUMS", True)
    got = tiny_logits(model, seed=24)
    assert len(launches) == 2 * 2 * 2 * TINY.num_layers and torch.equal(got, want)


@needs_cuda
@pytest.mark.gpu
def test_bf16_model_on_cuda_sums_its_slices_in_its_norms(monkeypatch) -> None:
    model = build_random(TINY, device="cuda", dtype=torch.bfloat16, seed=25)
    launches = _split_blocks(monkeypatch, model)
    monkeypatch.setattr(linear, "DEFER_SUMS", False)
    want = tiny_logits(model, seed=26)
    assert len(launches) == 2 * 2 * TINY.num_layers
    launches.clear()
    monkeypatch.setattr(linear, "DEFER_SUMS", True)
    got = tiny_logits(model, seed=26)
    assert launches == [] and torch.equal(got, want)
