"""`bass.models.linear` on the CPU: float32 projections by oneDNN, the same numbers as `F.linear` (MKL), which
still serves whatever oneDNN's op cannot (another dtype, a strided weight, autograd)."""

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
    assert torch.equal(linear.linear(x.bfloat16(), w.bfloat16()), F.linear(x.bfloat16(), w.bfloat16()))
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
    import subprocess
    import sys
    from pathlib import Path

    code = "from bass.models import linear; print(linear.ONEDNN)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3],
                         env={"BASS_ONEDNN": "0", "PATH": "/usr/bin:/bin", "PYTHONPATH": "."}).stdout
    assert out.strip() == "False"
