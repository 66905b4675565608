"""bench/gemm_bench.py: its config grid and, on tiny shapes through the interpreter, its whole plumbing."""

import json

import gemm_bench as gb
import pytest
import torch

CUDA = torch.cuda.is_available()


def test_grid_tiles_k_exactly_and_keeps_the_program_count_sane():
    for N, K in ((2048, 1536), (1536, 8960), (151936, 1536)):
        grid = gb.config_grid(N, K, sms=132)
        assert grid and all(c.fits(N, K) for c in grid)
        assert all(132 // 3 <= -(-N // c.block_n) * c.split_k <= 32 * 132 for c in grid)
    # the down projection's long K admits splits; K = 128 admits one K tile and no split
    assert any(c.split_k > 1 for c in gb.config_grid(1536, 8960, sms=132))
    assert {(c.block_k, c.split_k) for c in gb.config_grid(96, 128, sms=4)} == {(128, 1)}


def test_wide_grid_holds_the_tuners_candidates_and_wider_tiles_once():
    N, K = 17920, 1536  # the gate/up projection, whose best tile the wide grid found
    wide = gb.config_grid(N, K, sms=132, grid="wide")
    assert len(wide) == len(set(wide)) and all(c.fits(N, K) for c in wide)
    assert {c for c in gb.CANDIDATES if c.fits(N, K)} <= set(wide)
    assert any(c.block_n == 256 for c in wide) and any(c.block_k == 64 and c.num_warps == 8 for c in wide)
    assert not any(c.block_n == 256 for c in gb.config_grid(N, K, sms=132))  # the default grid has none


@pytest.mark.skipif(CUDA, reason="the interpreter run; on CUDA the timed run below")
def test_cpu_run_checks_every_config_against_float32(tmp_path):
    rows = gb.main(["--models", "tiny", "--rows", "3,17", "--out", str(tmp_path)])
    assert [(r["name"], r["M"]) for r in rows] == [("qkv", 3), ("qkv", 17), ("down", 3), ("down", 17)]
    for r in rows:
        assert r["configs"] and all(e["rel_err"] < 2 ** -7 for e in r["configs"])
        assert "cublas_us" not in r  # untimed on the CPU
    saved = json.loads((tmp_path / "gemm.json").read_text())
    assert saved["device"].startswith("CPU") and len(saved["rows"]) == 4


@pytest.mark.skipif(not CUDA, reason="times on the device; its CPU twin is the interpreter run above")
def test_cuda_run_times_cublas_and_every_config(tmp_path):
    rows = gb.main(["--models", "1.5b", "--rows", "8", "--reps", "4", "--out", str(tmp_path)])
    assert [r["name"] for r in rows] == ["qkv", "o", "gate_up", "down", "lm_head"]
    for r in rows:
        assert r["cublas_us"] > 0 and r["configs"] and all(e["rel_err"] < 2 ** -7 and e["us"] > 0 for e in r["configs"])
        assert r["best"]["us"] == min(e["us"] for e in r["configs"]) and r["speedup"] > 0
    assert not json.loads((tmp_path / "gemm.json").read_text())["device"].startswith("CPU")
