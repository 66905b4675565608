"""Decode-shaped projections: cuBLAS (torch's F.linear) against the skinny Triton GEMM, tile by tile.

    PYTHONPATH=. python bench/gemm_bench.py [--models 1.5b,7b] [--rows 8,16,32] [--grid wide] [--out DIR]

At decode time a projection multiplies a few rows (batch x verify width) by a weight it reads once, so
its floor is the weight's bytes over the memory bandwidth. For each projection of the embedded 1.5B
target (and of the synthetic 7B), each row count, and every `SkinnyConfig` of a grid, this times one call
inside a CUDA graph (how the engine runs it), cycling through enough copies of the weight that the L2
cache never holds the one being read, and prints µs per call and TB/s for cuBLAS and the best config (and
with `--grid wide`, the best of the tuner's own candidates beside it).
Writes gemm.json to --out. On the CPU it checks the plumbing on tiny shapes (the interpreter), untimed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bass.device import device_line  # noqa: E402
from bass.models.linear import graph_timer  # noqa: E402
from kernels.skinny_gemm import CANDIDATES, SkinnyConfig, skinny_gemm  # noqa: E402

# (name, N, K, bias) of one decoder layer's projections and the LM head
SHAPES = {
    "1.5b": [("qkv", 2048, 1536, True), ("o", 1536, 1536, False), ("gate_up", 17920, 1536, False),
             ("down", 1536, 8960, False), ("lm_head", 151936, 1536, False)],
    "7b": [("qkv", 12288, 4096, False), ("o", 4096, 4096, False), ("gate_up", 22016, 4096, False),
           ("down", 4096, 11008, False), ("lm_head", 32000, 4096, False)],
    "tiny": [("qkv", 96, 128, True), ("down", 64, 256, False)],
}
L2_BYTES = 256 << 20  # the weight copies cycled through: well past any GPU's L2


def config_grid(N: int, K: int, sms: int, grid: str = "default") -> list[SkinnyConfig]:
    """The configs tried for [N, K]: tiles that fit K, between a third of the SMs and 32 waves of programs.
    "wide": the tuner's own `CANDIDATES` and wider tiles for verify-sized rows (BN 128 / 256, BK 64, 8 warps),
    which read x fewer times over (a program reads all of x's rows for its K slice, once per column tile)."""
    if grid == "wide":
        tiles = [(64, 64, 4), (64, 128, 4), (128, 64, 4), (128, 64, 8), (128, 128, 8), (256, 64, 8)]
        space = [(bn, bk, split, stages, warps) for (bn, bk, warps), split, stages
                 in itertools.product(tiles, (1, 2, 3, 4, 5, 6, 7, 8), (3, 4))]
        seen = set(CANDIDATES)
        out = [c for c in CANDIDATES if c.fits(N, K)]
    else:
        space = itertools.product((16, 32, 64, 128), (128, 256), (1, 2, 3, 4, 5, 7, 8), (3, 5), (4,))
        seen, out = set(), []
    for bn, bk, split, stages, warps in space:
        c = SkinnyConfig(bn, bk, split, stages, warps)
        programs = -(-N // bn) * split
        if c not in seen and c.fits(N, K) and sms // 3 <= programs <= 32 * sms:
            out.append(c)
    return out


def bench_shape(name: str, N: int, K: int, has_bias: bool, M: int, device: torch.device, reps: int,
                sms: int, gen: torch.Generator, grid: str = "default") -> dict:
    """One projection at M rows: cuBLAS and every config of the grid (the CPU: a correctness check only)."""
    copies = max(1, min(reps, L2_BYTES // (N * K * 2) + 1))
    ws = [torch.randn(N, K, generator=gen).mul_(K ** -0.5).to(device, torch.bfloat16) for _ in range(copies)]
    b = torch.randn(N, generator=gen).to(device, torch.bfloat16) if has_bias else None
    x = torch.randn(M, K, generator=gen).to(device, torch.bfloat16)
    want = F.linear(x.float(), ws[0].float(), None if b is None else b.float())
    row = dict(name=name, N=N, K=K, M=M, bias=has_bias, weight_mb=N * K * 2 / 1e6, configs=[])
    for c in config_grid(N, K, sms, grid):
        try:
            got = skinny_gemm(x, ws[0], b, c)
        except triton.runtime.errors.OutOfResources:  # its pipeline buffers do not fit this GPU's shared memory
            continue
        err = float((got.float() - want).abs().max() / want.abs().max())
        if err > 2 ** -7:
            raise AssertionError(f"{name} M={M} {c}: relative error {err:.2e} against float32")
        entry = dict(config=c.__dict__, rel_err=err)
        if device.type == "cuda":
            entry["us"] = graph_timer(lambda i, c=c: skinny_gemm(x, ws[i % copies], b, c), reps)
        row["configs"].append(entry)
    if device.type == "cuda":
        row["cublas_us"] = graph_timer(lambda i: F.linear(x, ws[i % copies], b), reps)
    if device.type == "cuda" and row["configs"]:  # (a shape too small for the GPU has no config in the grid)
        best = min(row["configs"], key=lambda e: e["us"])
        row["best"] = best
        row["speedup"] = row["cublas_us"] / best["us"]
        tuned = [e for e in row["configs"] if SkinnyConfig(**e["config"]) in CANDIDATES]
        if tuned:  # what the engine's tuner can choose today, beside the grid's best
            row["best_candidate"] = min(tuned, key=lambda e: e["us"])
        for key, us in (("cublas_tbs", row["cublas_us"]), ("best_tbs", best["us"])):
            row[key] = N * K * 2 / us / 1e6
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="1.5b,7b", help=f"shape sets: {','.join(SHAPES)}")
    p.add_argument("--rows", default="8,16,32", help="rows of x: batch x verify width")
    p.add_argument("--reps", type=int, default=40, help="calls per timed graph")
    p.add_argument("--grid", default="default", choices=["default", "wide"], help="the configs tried (config_grid)")
    p.add_argument("--out", default="bench/results/")
    a = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    print(device_line(device), flush=True)
    gen = torch.Generator().manual_seed(0)
    rows, t0 = [], time.perf_counter()
    for model in a.models.split(","):
        for (name, N, K, bias), M in itertools.product(SHAPES[model], [int(m) for m in a.rows.split(",")]):
            row = bench_shape(name, N, K, bias, M, device, a.reps, sms, gen, a.grid)
            row["model"] = model
            rows.append(row)
            if "best" in row:
                print(f"{model:5} {name:8} M={M:<3} cuBLAS {row['cublas_us']:7.1f} µs {row['cublas_tbs']:4.2f} TB/s"
                      f" | best {row['best']['us']:7.1f} µs {row['best_tbs']:4.2f} TB/s {row['speedup']:4.2f}x"
                      f"  {row['best']['config']}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gemm.json").write_text(json.dumps(dict(device=device_line(device), rows=rows), indent=1))
    if device.type == "cuda":
        print(f"\n{'model':5} {'proj':8} {'M':>3} {'MB':>6} {'cuBLAS µs':>10} {'skinny µs':>10} {'ratio':>6} "
              f"{'tuner µs':>9}  best config")
        for r in rows:
            skinny = f"{r['best']['us']:10.1f} {r['speedup']:6.2f}" if "best" in r else f"{'-':>10} {'-':>6}"
            tuned = f"{r['best_candidate']['us']:9.1f}" if "best_candidate" in r else f"{'-':>9}"
            config = "/".join(str(v) for v in r["best"]["config"].values()) if "best" in r else "-"
            print(f"{r['model']:5} {r['name']:8} {r['M']:3d} {r['weight_mb']:6.1f} {r['cublas_us']:10.1f} {skinny} "
                  f"{tuned}  {config}")
    return rows


if __name__ == "__main__":
    main()
