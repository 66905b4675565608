"""A whole model through the interpreted fused kernels gives the torch ops' logits: the slow part of
test_fused_layers.py."""

from __future__ import annotations

import pytest
import torch
from fused_cases import DEVICE, tiny_logits

from bass.models import layers
from bass.models.loader import build_random
from bench.synthetic import TINY

pytestmark = pytest.mark.slow  # a whole model through the interpreted kernels


@pytest.mark.skipif(DEVICE == "cuda", reason="the interpreter twin; on CUDA the bf16 test below runs")
def test_model_through_interpreted_kernels_matches_torch_ops(monkeypatch) -> None:
    """fp32 model forced through the kernels (TRITON_INTERPRET=1) gives the torch path's logits."""
    model = build_random(TINY, seed=3)
    with torch.no_grad():  # norms away from the identity, so a misplaced weight shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(4)) * 0.3)
    ref = tiny_logits(model, seed=5)
    monkeypatch.setattr(layers, "_fused", lambda *tensors: True)
    out = tiny_logits(model, seed=5)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-4)
