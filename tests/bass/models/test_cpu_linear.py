"""`bass.models.linear` on the CPU: float32 projections by oneDNN, the same numbers as `F.linear` (MKL), which
still serves whatever oneDNN's op cannot (a strided weight, autograd); bf16 ones in calls of a fixed row count, so
that a row's result is its own, where this CPU's kernels round by row count; and the measured choice between the two
dtypes."""

from __future__ import annotations

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
