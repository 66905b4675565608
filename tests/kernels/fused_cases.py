"""Shared helpers of the fused-op kernel tests: device choice, fresh seeds, the NaN-poisoned allocator, a tiny
model's logits."""

from __future__ import annotations

import itertools

import pytest
import torch

from bench.synthetic import TINY
from kernels.reference import ragged_attention_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="bf16 kernel vs torch on CUDA; the CPU twin is the fp32 interpreter test")
_seeds = itertools.count(40_000)


def fresh_gen() -> torch.Generator:
    """A CPU generator with a seed no other test draw used (inputs are drawn on the CPU, then moved)."""
    return torch.Generator().manual_seed(next(_seeds))


def randn(*shape: int, gen: torch.Generator, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(shape, generator=gen) * scale).to(device=DEVICE, dtype=dtype)


def poison(monkeypatch: pytest.MonkeyPatch, module) -> None:
    """Every output the launcher allocates starts as NaN (-1 for integers, never a valid id), so an unwritten
    element fails the test."""

    def nan_empty(shape: tuple[int, ...], **kw) -> torch.Tensor:
        integer = not kw.get("dtype", torch.float32).is_floating_point
        return torch.full(shape, -1 if integer else float("nan"), **kw)

    monkeypatch.setattr(module, "_empty", nan_empty)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double().cpu() - ref.double().cpu()).norm() / ref.double().cpu().norm().clamp_min(1e-30)).item()


def tiny_logits(model: torch.nn.Module, seed: int) -> torch.Tensor:
    """Logits of a prefill then a 3-token ragged step (q_len 3, 1, 0) of a random batch of 3."""
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    cache = model.new_cache(3, 16)
    prompt = torch.randint(0, TINY.vocab_size, (3, 5), generator=gen).to(device)
    model(prompt, cache, torch.full((3,), 5, dtype=torch.int32, device=device), ragged_attention_ref)
    step = torch.randint(0, TINY.vocab_size, (3, 3), generator=gen).to(device)
    return model(step, cache, torch.tensor([3, 1, 0], dtype=torch.int32, device=device), ragged_attention_ref)
