"""`bass.models.linear`: the measured choice between cuBLAS and the skinny GEMM, and the model's use of it."""

from __future__ import annotations

import pytest
import torch
from fused_cases import DEVICE, needs_cuda, tiny_logits

import kernels.skinny_gemm as skinny
from bass.models import linear
from bass.models.loader import build_random
from bench.synthetic import TINY
from kernels.skinny_gemm import SkinnyConfig

FAST, SLIGHT = SkinnyConfig(16, 64, 1, 2), SkinnyConfig(32, 64, 2, 2)


# the CPU twins: real kernels through the interpreter, a fake device timer (on CUDA the last test runs instead)
cpu_twin = pytest.mark.skipif(DEVICE == "cuda", reason="the interpreter twin; on CUDA the device test runs")


@pytest.fixture(autouse=True)
def _forget():
    linear.clear()
    yield
    linear.clear()


@pytest.fixture
def spy(monkeypatch) -> list:
    """Every skinny_gemm call's (N, K, config), the kernel still run (the interpreter on the CPU)."""
    calls, real = [], skinny.skinny_gemm

    def recording(x, weight, bias=None, config=FAST, out_dtype=None, defer_sum=False):
        calls.append((weight.shape[0], weight.shape[1], config))
        return real(x, weight, bias, config, out_dtype, defer_sum)

    monkeypatch.setattr(skinny, "skinny_gemm", recording)
    monkeypatch.setattr(skinny, "CANDIDATES", (FAST, SLIGHT))
    return calls


def fake_timer(spy: list, wins: dict):
    """µs per call as a fake device would time it: cuBLAS 10, a config `wins[(N, K)][config]`, else 11."""
    def timer(fn, calls):
        spy.clear()
        fn(0)
        if not spy:
            return 10.0
        N, K, config = spy[-1]
        return wins.get((N, K), {}).get(config, 11.0)
    return timer


@cpu_twin
def test_tune_keeps_a_config_only_where_it_beats_cublas_by_the_margin(spy) -> None:
    model = build_random(TINY, seed=11)
    H, I, V = TINY.hidden_size, TINY.intermediate_size, TINY.vocab_size
    wins = {(2 * I, H): {FAST: 8.0, SLIGHT: 9.0},  # gate_up: FAST by 20 %
            (H, I): {SLIGHT: 10.1},  # down: 1 % slower than cuBLAS, inside the margin: still the kernel
            (V, H): {FAST: 7.0, SLIGHT: 1.0}}  # the LM head; SLIGHT's K split does not fit K = 64: never run
    report = linear.tune(model, timer=fake_timer(spy, wins), tiles=(16, 32))
    shapes = {(r["N"], r["K"]) for r in report}
    q, kv = TINY.num_heads * TINY.head_dim, TINY.num_kv_heads * TINY.head_dim
    assert shapes == {(q + 2 * kv, H), (H, q), (2 * I, H), (H, I), (V, H)}
    assert len(report) == 2 * len(shapes)
    chosen = {(r["N"], r["K"], r["rows"]): r["config"] for r in report if r["config"]}
    assert chosen == {(2 * I, H, t): FAST.__dict__ for t in (16, 32)} | {(V, H, t): FAST.__dict__ for t in (16, 32)} \
        | {(H, I, t): SLIGHT.__dict__ for t in (16, 32)}  # qkv and o: every config 10 % slower, cuBLAS
    assert all(r["weights"] == TINY.num_layers for r in report if r["N"] != V)
    assert "skinny 16/64/1/2" in linear.describe(report) and "cuBLAS" in linear.describe(report)
    # a second model of the same shapes (a second engine) reuses the measurements: nothing is timed again
    def no_timing(fn, calls):
        raise AssertionError("a shape measured before was timed again")

    assert linear.tune(build_random(TINY, seed=16), timer=no_timing, tiles=(16, 32)) == report


@cpu_twin
def test_tune_times_only_the_candidates_it_is_given(spy) -> None:
    model = build_random(TINY, seed=17)
    H, I = TINY.hidden_size, TINY.intermediate_size
    timed = []

    def timer(fn, calls):
        value = fake_timer(spy, {(H, I): {FAST: 5.0, SLIGHT: 8.0}})(fn, calls)  # the down projection
        timed.extend(c for _, _, c in spy)
        return value

    report = linear.tune(model, timer=timer, tiles=(16,), candidates=(SLIGHT,))  # FAST would have won
    assert set(timed) == {SLIGHT}
    assert [(r["N"], r["K"], r["config"]) for r in report if r["config"]] == [(H, I, SLIGHT.__dict__)]


def test_a_verify_of_40_rows_takes_the_48_row_choice_not_the_64_row_one() -> None:
    # the kernel pads to 64 rows, but the padding is never read: a config is timed at the rows that are there
    assert [linear.row_tile(n) for n in (8, 16, 17, 32, 33, 40, 48, 49, 64, 65)] == \
        [16, 16, 32, 32, 48, 48, 48, 64, 64, None]


@cpu_twin
def test_a_tuned_model_runs_its_chosen_kernels_and_gives_the_same_logits(spy) -> None:
    model = build_random(TINY, seed=12)
    ref = tiny_logits(model, seed=13)
    H, I = TINY.hidden_size, TINY.intermediate_size
    linear.tune(model, timer=fake_timer(spy, {(2 * I, H): {FAST: 5.0}, (H, I): {SLIGHT: 5.0}}), tiles=(16,))
    spy.clear()
    out = tiny_logits(model, seed=13)
    # the 15-row prefill is within the 16-row tile too; the 9-row step (3 x 3) certainly is
    assert {(n, k, c) for n, k, c in spy} == {(2 * I, H, FAST), (H, I, SLIGHT)}
    assert len([c for c in spy if c[0] == 2 * I]) == 2 * TINY.num_layers  # prefill and step, every layer
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-4)
    linear.clear()
    spy.clear()
    torch.testing.assert_close(tiny_logits(model, seed=13), ref, rtol=0, atol=0)
    assert spy == []


@cpu_twin
def test_rows_past_the_tiles_go_to_cublas(spy) -> None:
    w = torch.randn(64, 64)
    linear.tune(torch.nn.Sequential(linear.Linear(64, 64, bias=False)), timer=fake_timer(spy, {}),
                tiles=(16,))  # cuBLAS 10 % faster than every config: no choice
    spy.clear()  # (the timing ran the configs)
    assert linear.linear(torch.randn(4, 64), w).shape == (4, 64) and spy == []
    linear._choices[("cpu", 64, 64, False, torch.float32, torch.float32, 16)] = FAST
    linear.linear(torch.randn(16, 64), w)
    assert len(spy) == 1
    linear.linear(torch.randn(17, 64), w)  # past the only tuned tile
    assert len(spy) == 1


@cpu_twin
def test_a_choice_holds_for_its_pair_of_dtypes_only(spy) -> None:
    """A float32 module under autocast sees bfloat16 rows: the choice tuned for bfloat16 weights of its shape must
    leave it to F.linear (which casts both), not hand the kernel operands of two dtypes."""
    w = torch.randn(64, 64)
    linear._choices[("cpu", 64, 64, False, torch.bfloat16, torch.bfloat16, 16)] = FAST
    x = torch.randn(16, 64).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = linear.linear(x, w)
    assert spy == [] and y.dtype == torch.bfloat16
    torch.testing.assert_close(linear.linear(x, w.bfloat16()), y, rtol=2e-2, atol=2e-2)
    assert len(spy) == 1


@cpu_twin
def test_a_choice_gives_way_where_a_gradient_is_asked(spy) -> None:
    """The kernel has no backward: a projection asking for a gradient stays on F.linear, and the gradient arrives."""
    w = torch.randn(64, 64, requires_grad=True)
    linear._choices[("cpu", 64, 64, False, torch.float32, torch.float32, 16)] = FAST
    x = torch.randn(16, 64)
    with torch.no_grad():
        y = linear.linear(x, w)
    assert len(spy) == 1
    z = linear.linear(x, w)
    assert len(spy) == 1 and z.requires_grad
    torch.testing.assert_close(z.detach(), y, rtol=1e-4, atol=1e-4)
    z.sum().backward()
    torch.testing.assert_close(w.grad, x.sum(0).expand(64, 64), rtol=1e-5, atol=1e-5)


@needs_cuda
@pytest.mark.gpu
def test_tune_on_cuda_times_both_and_the_tuned_model_agrees() -> None:
    """The device's own timings (CUDA graphs); then the model's logits with whatever was chosen."""
    config = TINY.with_(hidden_size=512, intermediate_size=2048, num_heads=8, num_kv_heads=2, head_dim=64,
                        vocab_size=4096)
    model = build_random(config, device="cuda", dtype=torch.bfloat16, seed=14)
    plain = tiny_logits(model, seed=15)
    report = linear.tune(model)
    shapes = {(w.shape[0], w.shape[1], b is not None) for w, b in linear.projections(model)}
    assert len(report) == len(shapes) * len(linear.ROW_TILES)
    assert all(r["cublas_us"] > 0 and r["best_us"] > 0 for r in report)
    assert all(r["config"] is None or r["best_us"] <= r["cublas_us"] * (1 + linear.MARGIN) for r in report)
    tuned = tiny_logits(model, seed=15)
    assert (tuned - plain).abs().max() < 0.02 * plain.abs().max()
