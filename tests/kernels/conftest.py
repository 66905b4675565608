"""Kernel tests run the Triton kernels through the interpreter when no GPU is present.

TRITON_INTERPRET must be set before `triton` is first imported (its `@triton.jit` decides at
decoration time), so this happens at collection, before any test module imports the kernels.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# --import-mode=importlib puts neither the repository root nor this folder on sys.path.
for _path in (Path(__file__).resolve().parents[2], Path(__file__).resolve().parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


@pytest.fixture
def poisoned(monkeypatch: pytest.MonkeyPatch):
    """The ragged kernel's module, every buffer its launcher allocates (output and split partials) starts as NaN."""
    import kernels.ragged_attention as mod

    def nan_empty(shape: tuple[int, ...], **kw) -> torch.Tensor:
        return torch.full(shape, float("nan"), **kw)

    monkeypatch.setattr(mod, "_empty", nan_empty)
    return mod
