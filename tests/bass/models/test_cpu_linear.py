"""`bass.models.linear` on the CPU: float32 projections by oneDNN, the same numbers as `F.linear` (MKL), which
still serves whatever oneDNN's op cannot (a strided weight, autograd); bf16 ones in calls of a fixed row count, so
that a row's result is its own, where this CPU's kernels round by row count; and the measured choice between the two
dtypes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bass.models import linear

has_onednn = pytest.mark.skipif(not linear.ONEDNN_AVAILABLE, reason="a torch without oneDNN: its twin is the MKL "
                                "test below")


@pytest.fixture
def calls(monkeypatch) -> list:
    """Every oneDNN call's (rows, N, K), the op still run; oneDNN switched on whatever the environment says."""
    seen, real = [], linear._onednn

    def recording(x, weight, bias):
        seen.append((x.numel() // x.shape[-1], weight.shape[0], weight.shape[1]))
        return real(x, weight, bias)

    monkeypatch.setattr(linear, "_onednn", recording)
    monkeypatch.setattr(linear, "ONEDNN", True)
    return seen


@has_onednn
@pytest.mark.parametrize("shape", [(4, 64), (2, 3, 64), (36, 64)])
@pytest.mark.parametrize("bias", [False, True])
def test_cpu_float32_goes_to_onednn_with_mkls_numbers(calls, shape, bias):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(*shape, generator=g), torch.randn(1031, 64, generator=g)  # an odd N, as a draft head has
    b = torch.randn(1031, generator=g) if bias else None
    with torch.inference_mode():
        got = linear.linear(x, w, b)
    assert calls == [(x.numel() // 64, 1031, 64)]
    assert got.shape == (*shape[:-1], 1031)
    torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-4)
    assert linear.linear(x, w, b, out_dtype=torch.float64).dtype == torch.float64


@has_onednn
def test_what_onednn_cannot_take_goes_to_f_linear(calls):
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 32, generator=g), torch.randn(48, 32, generator=g)
    strided = torch.randn(32, 48, generator=g).t()  # a transposed view
    assert torch.equal(linear.linear(x, strided), F.linear(x, strided))
    assert linear.linear(torch.empty(0, 32), w).shape == (0, 48)
    assert calls == []
    # training: a weight that wants its gradient gets one (oneDNN's op has no backward) ...
    trained = w.clone().requires_grad_()
    linear.linear(x, trained).sum().backward()
    torch.testing.assert_close(trained.grad, x.sum(0).expand(48, 32))
    assert calls == []
    # ... and the same weight without grad mode is inference again
    with torch.no_grad():
        linear.linear(x, trained)
    assert calls == [(4, 48, 32)]


def test_with_onednn_off_it_is_mkls_f_linear(monkeypatch):
    monkeypatch.setattr(linear, "ONEDNN", False)
    monkeypatch.setattr(linear, "_onednn", lambda *a: pytest.fail("oneDNN called while switched off"))
    g = torch.Generator().manual_seed(2)
    x, w, b = torch.randn(3, 16, generator=g), torch.randn(24, 16, generator=g), torch.randn(24, generator=g)
    assert torch.equal(linear.linear(x, w, b), F.linear(x, w, b))


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


@pytest.mark.parametrize("independent", [True, False])
def test_fixed_calls_only_where_the_measurement_asks_for_them(independent, monkeypatch):
    """A kernel that gives each row its own bits takes the rows as they are, in one call; otherwise calls of exactly
    CPU_ROWS rows, the last padded."""
    monkeypatch.setitem(linear._rows_independent, torch.bfloat16, independent)
    seen, real = [], F.linear
    monkeypatch.setattr(linear.F, "linear", lambda x, w, b=None: seen.append(x.shape[0]) or real(x, w, b))
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(40, 64, generator=g).bfloat16(), torch.randn(48, 64, generator=g).bfloat16()
    with torch.inference_mode():
        y = linear.linear(x, w)
    assert y.shape == (40, 48)
    assert seen == ([40] if independent else [linear.CPU_ROWS, linear.CPU_ROWS])


def test_bass_cpu_fixed_rows_1_keeps_the_fixed_calls_without_measuring(monkeypatch):
    monkeypatch.setattr(linear, "CPU_FIXED_ROWS", True)
    monkeypatch.setattr(linear, "measure_rows_independent", lambda *a, **k: pytest.fail("measured"))
    assert linear.rows_independent(torch.bfloat16) is False


def test_bass_cpu_fixed_rows_is_read_from_the_environment_at_import():
    code = "from bass.models import linear; print(linear.CPU_FIXED_ROWS)"
    for value, want in (("1", "True"), ("0", "False")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parents[3],
                             env={"BASS_CPU_FIXED_ROWS": value, "PATH": "/usr/bin:/bin", "PYTHONPATH": "."}).stdout
        assert out.strip() == want


def test_the_measurement_runs_once_a_process_per_dtype(monkeypatch):
    asked = []
    monkeypatch.setattr(linear, "_rows_independent", {})
    monkeypatch.setattr(linear, "measure_rows_independent", lambda dtype: asked.append(dtype) or True)
    assert linear.rows_independent(torch.bfloat16) and linear.rows_independent(torch.bfloat16)
    assert linear.rows_independent(torch.float16)
    assert asked == [torch.bfloat16, torch.float16]


def test_a_reduced_precision_projection_with_a_gradient_stays_on_f_linear():
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(4, 32, generator=g).bfloat16(), torch.randn(48, 32, generator=g).bfloat16().requires_grad_()
    y = linear.linear(x, w)
    assert torch.equal(y, F.linear(x, w))
    y.float().sum().backward()
    assert w.grad is not None and w.grad.shape == (48, 32)


# ---- which dtype an "auto" engine runs on the CPU ----
def _timer(bf16_seconds: float):
    """A fake timer: 1 s for a float32 projection, `bf16_seconds` for a bf16 one (told apart by what fn returns)."""
    return lambda fn: 1.0 if fn().dtype == torch.float32 else bf16_seconds


def test_the_measurement_takes_bf16_only_where_it_is_clearly_faster():
    assert linear.measure_cpu_dtype(_timer(0.5)) == torch.bfloat16
    assert linear.measure_cpu_dtype(_timer(0.95)) == torch.float32  # within the margin: float32
    assert linear.measure_cpu_dtype(_timer(2.0)) == torch.float32  # a CPU without bf16 matrix units


def test_cpu_dtype_is_the_environments_else_the_measurement_once(monkeypatch):
    monkeypatch.setenv("BASS_CPU_DTYPE", "bfloat16")
    assert linear.cpu_dtype() == torch.bfloat16
    monkeypatch.setenv("BASS_CPU_DTYPE", "float32")
    assert linear.cpu_dtype() == torch.float32
    from bass.runtime.device import resolve_dtype

    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    monkeypatch.setenv("BASS_CPU_DTYPE", "fp8")
    with pytest.raises(ValueError, match="BASS_CPU_DTYPE must be float32 or bfloat16, got 'fp8': unset it"):
        linear.cpu_dtype()
    monkeypatch.delenv("BASS_CPU_DTYPE")
    answers = iter([torch.bfloat16, torch.float32])
    monkeypatch.setattr(linear, "measure_cpu_dtype", lambda: next(answers))
    monkeypatch.setattr(linear, "_cpu_dtype", None)
    assert linear.cpu_dtype() == torch.bfloat16
    assert linear.cpu_dtype() == torch.bfloat16  # measured once a process: the second answer is never asked for
