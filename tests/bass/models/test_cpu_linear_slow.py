"""`bass.models.linear` on the CPU, the parts that measure this machine's kernels or start fresh interpreters
(seconds each): the slow part of test_cpu_linear.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bass.models import linear

pytestmark = pytest.mark.slow  # measurements of this CPU's kernels and fresh interpreters


def test_bass_onednn_0_in_the_environment_switches_it_off():
    code = "from bass.models import linear; print(linear.ONEDNN)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3],
                         env={"BASS_ONEDNN": "0", "PATH": "/usr/bin:/bin", "PYTHONPATH": "."}).stdout
    assert out.strip() == "False"


# ---- bf16: calls of CPU_ROWS rows where this CPU's kernels need them ----
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("fixed", [True, None], ids=["fixed-calls", "as-measured"])
def test_a_reduced_precision_row_is_the_same_bits_whatever_shares_its_call(dtype, bias, fixed, monkeypatch):
    """In fixed calls on every CPU, and in whatever calls this CPU's measurement chose."""
    if fixed:
        monkeypatch.setitem(linear._rows_independent, dtype, False)
    g = torch.Generator().manual_seed(3)
    # K = 1024: plain F.linear rounds 6 of the 14 calls below otherwise than row by row, in bf16 on an AMX Xeon
    x = torch.randn(100, 1024, generator=g).to(dtype)  # more than three calls' worth of rows
    w = torch.randn(1031, 1024, generator=g).to(dtype)
    b = torch.randn(1031, generator=g).to(dtype) if bias else None
    with torch.inference_mode():
        alone = torch.stack([linear.linear(x[i:i + 1], w, b)[0] for i in range(len(x))])  # [100, 1031]
        for rows in (2, 4, 9, 32, 33, 40, 100):  # a plain step, verifies of several widths, a prefill
            for start in (0, 7):
                got = linear.linear(x[start:start + rows], w, b)
                assert torch.equal(got, alone[start:start + rows]), (rows, start)
        assert torch.equal(linear.linear(x[:12].view(3, 4, 1024), w, b), alone[:12].view(3, 4, 1031))
        assert linear.linear(x[:0], w, b).shape == (0, 1031)
        assert linear.linear(x[:5], w, b, out_dtype=torch.float32).dtype == torch.float32
    # the same product, rounded once: within a few steps of the reduced dtype of float64's
    ref = x.double() @ w.double().T + (0 if b is None else b.double())
    assert ((alone.double() - ref).norm() / ref.norm()).item() < 1e-2


def _exact(x, w, b=None):
    """Each row's product rounded once from float64: the same bits whatever rows share the call."""
    y = x.double() @ w.double().T + (0 if b is None else b.double())
    return y.to(x.dtype)


def _blocked_from(rows: int):
    """Like `_exact`, but calls of `rows` rows or more sum in another order (as a kernel chosen by row count)."""
    def mm(x, w, b=None):
        if x.shape[0] < rows:
            return _exact(x, w, b)
        half = x.shape[1] // 2  # the first half's partial sum rounded to x's dtype before the second is added
        first = (x[:, :half].float() @ w[:, :half].float().T).to(x.dtype).float()
        y = first + x[:, half:].float() @ w[:, half:].float().T
        return (y + (0 if b is None else b.float())).to(x.dtype)
    return mm


def test_the_measurement_finds_a_kernel_that_rounds_by_row_count():
    assert linear.measure_rows_independent(torch.bfloat16, mm=_exact)
    for rows in (2, 33, 100):  # a plain step's call, a verify's past 32 rows, a prefill's
        assert not linear.measure_rows_independent(torch.bfloat16, mm=_blocked_from(rows)), rows


def test_bass_cpu_fixed_rows_is_read_from_the_environment_at_import():
    code = "from bass.models import linear; print(linear.CPU_FIXED_ROWS)"
    for value, want in (("1", "True"), ("0", "False")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parents[3],
                             env={"BASS_CPU_FIXED_ROWS": value, "PATH": "/usr/bin:/bin", "PYTHONPATH": "."}).stdout
        assert out.strip() == want
