"""The model's dispatch to the fused kernels: CUDA only, and the same logits as the torch ops."""

from __future__ import annotations

import pytest
import torch
from fused_cases import needs_cuda, tiny_logits

import kernels.activation
import kernels.rmsnorm
import kernels.rope
from bass.models import layers
from bass.models.loader import build_random
from bench.synthetic import TINY


def test_cpu_model_never_calls_the_kernels(monkeypatch) -> None:
    """On the CPU the model keeps its torch ops (the exactness tests against transformers pin them)."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a fused kernel ran on the CPU")

    monkeypatch.setattr(kernels.rmsnorm, "rms_norm_fused", forbidden)
    monkeypatch.setattr(kernels.rope, "apply_rope_fused", forbidden)
    monkeypatch.setattr(kernels.rope, "apply_rope_and_store", forbidden)
    monkeypatch.setattr(kernels.activation, "gated_act_fused", forbidden)
    logits = tiny_logits(build_random(TINY, seed=1), seed=2)
    assert torch.isfinite(logits).all()


@needs_cuda
@pytest.mark.gpu
def test_bf16_model_on_cuda_matches_torch_ops(monkeypatch) -> None:
    model = build_random(TINY, device="cuda", dtype=torch.bfloat16, seed=6)
    fused = tiny_logits(model, seed=7)
    monkeypatch.setattr(layers, "FUSED_KERNELS", False)
    plain = tiny_logits(model, seed=7)
    assert (fused - plain).abs().max() < 0.02 * plain.abs().max()
