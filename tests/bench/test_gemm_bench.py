"""bench/gemm_bench.py: its config grid and, on tiny shapes through the interpreter, its whole plumbing."""

import json

import gemm_bench as gb


def test_grid_tiles_k_exactly_and_keeps_the_program_count_sane():
    for N, K in ((2048, 1536), (1536, 8960), (151936, 1536)):
        grid = gb.config_grid(N, K, sms=132)
        assert grid and all(c.fits(N, K) for c in grid)
        assert all(132 // 3 <= -(-N // c.block_n) * c.split_k <= 32 * 132 for c in grid)
    # the down projection's long K admits splits; K = 128 admits one K tile and no split
    assert any(c.split_k > 1 for c in gb.config_grid(1536, 8960, sms=132))
    assert {(c.block_k, c.split_k) for c in gb.config_grid(96, 128, sms=4)} == {(128, 1)}


def test_cpu_run_checks_every_config_against_float32(tmp_path):
    rows = gb.main(["--models", "tiny", "--rows", "3,17", "--out", str(tmp_path)])
    assert [(r["name"], r["M"]) for r in rows] == [("qkv", 3), ("qkv", 17), ("down", 3), ("down", 17)]
    for r in rows:
        assert r["configs"] and all(e["rel_err"] < 2 ** -7 for e in r["configs"])
        assert "cublas_us" not in r  # untimed on the CPU
    saved = json.loads((tmp_path / "gemm.json").read_text())
    assert saved["device"].startswith("CPU") and len(saved["rows"]) == 4
