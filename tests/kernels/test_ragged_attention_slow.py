"""The Triton ragged kernel (interpreted on the CPU) against the float64 reference, over every case and split
count: the slow part of test_ragged_attention.py."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import CASES, DEVICE, SPLITS, Case, as_float64, make_inputs, rel_error

from kernels import available_backends
from kernels.reference import ragged_attention_ref

pytestmark = [pytest.mark.slow,  # 18 interpreted launches
              pytest.mark.skipif("ragged" not in available_backends(DEVICE), reason="needs CUDA or TRITON_INTERPRET=1")]
SEEDS = iter(range(30_000, 40_000))


@pytest.mark.parametrize("split", SPLITS, ids=lambda s: f"splits{s['NUM_SPLITS']}")
@pytest.mark.parametrize(("case", "cfg"), CASES, ids=lambda c: str(c) if isinstance(c, Case) else "")
def test_ragged_matches_reference_fp32(poisoned, case: Case, cfg: dict, split: dict) -> None:
    inputs = make_inputs(case, torch.Generator().manual_seed(next(SEEDS)), device=DEVICE)
    out = poisoned.ragged_attention_tuned(**inputs, **cfg, **split)
    ref = ragged_attention_ref(**as_float64({k: v.cpu() if torch.is_tensor(v) else v for k, v in inputs.items()}))
    assert torch.isfinite(out).all(), "an output element was never written"
    assert rel_error(out.cpu(), ref) < 1e-5
