"""Two sets of skinny-GEMM candidates and row tiles, alternated in one process: what each makes of a round.

    PYTHONPATH=. python bench/tuning_ab.py --out bench/results/                       (H100: 2-3 minutes, no upload)
    PYTHONPATH=. python bench/tuning_ab.py --shape tiny --k 2 --max-new-tokens 6 --ls 1 (CPU plumbing)

`bass.models.linear.tune` picks, per projection shape and row tile, cuBLAS or the fastest of
`kernels.skinny_gemm.CANDIDATES`. Whether a new candidate or tile pays shows only in the rounds the engine
runs, so this tunes the random-weight pair of `draft_step_bench` (the embedded target's shapes and the
shipped draft) with one set, captures the engine's graphs again, times regular decoding and BASS at fixed
L = --ls (`draft_step_bench.round_ms`), and does the same for the next set in `--order`; a set named twice
is tuned and timed twice, so its spread shows beside the difference. Sets:
  first    the first grid: the ten candidates of the twenty-fourth pass, row tiles 16 / 32 / 64
  current  `CANDIDATES` and `ROW_TILES` as they are
  wide     `CANDIDATES` and the three wider configs of `bench/gemm_bench.py --grid wide` that the sixty-fourth pass
           tuned in and left out (K steps of 64, an 8-warp tile): alternated with the code before them on the real
           target they took regular decoding 1.004x its time, fixed L = 3 1.016x
           (`bench/results/commit_ab_2026-12-02_h200_seed2500_candidates.txt`); the rig told them apart the same
           way, regular decoding level, L = 3 2 % slower (`tuning_ab_2026-12-02_h200_wide.txt`), so a candidate
           can be judged here before it costs an upload
Both are tuned with `tune`'s margin as it is now (cuBLAS only where it wins by `MARGIN`).
On the CPU nothing is tuned (the timer needs CUDA graphs), so both sets run the same kernels.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from draft_step_bench import build_engine, round_ms  # noqa: E402

from bass.config import SamplingParams  # noqa: E402
from bass.device import device_line  # noqa: E402
from bass.models import linear  # noqa: E402
from bass.synthetic import random_prompt  # noqa: E402
from kernels.skinny_gemm import CANDIDATES, SkinnyConfig  # noqa: E402

WIDE = (SkinnyConfig(64, 64, 1, 4), SkinnyConfig(64, 64, 1, 3), SkinnyConfig(128, 64, 1, 3, 8))
SETS = {"first": (CANDIDATES[:10], (16, 32, 64)), "current": (CANDIDATES, linear.ROW_TILES),
        "wide": (CANDIDATES + WIDE, linear.ROW_TILES)}


def use_set(engine, name: str) -> tuple[list[dict], float]:
    """Tune the engine's models with set `name` (forgetting every earlier choice) and capture its graphs again;
    returns the tuning report (empty off CUDA) and the seconds it took."""
    candidates, tiles = SETS[name]
    linear.clear()
    t = time.perf_counter()
    report = []
    linear.ROW_TILES = tiles  # `linear` looks the tile up per call: kept until the next set (main restores it)
    if engine.device.type == "cuda":
        report = [r for m in (engine.target.model, engine.draft.model)
                  for r in linear.tune(m, tiles=tiles, candidates=candidates)]
        engine.use_static_shapes(capture=True)
    return report, time.perf_counter() - t


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="qwen2.5-1.5b", choices=["qwen2.5-1.5b", "llama-7b", "tiny"])
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--ls", default="1,2,3,4,5", help="fixed draft lengths of the BASS rows")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--order", default="first,current,first,current", help="the sets, in the order they run")
    p.add_argument("--out", default="bench/results/")
    a = p.parse_args(argv)
    order = a.order.split(",")
    if unknown := [s for s in order if s not in SETS]:
        p.error(f"unknown set(s) {unknown}: choose from {sorted(SETS)}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    engine = build_engine(a.shape, device)
    prompt = random_prompt(engine.target.config.vocab_size, 160, seed=1)
    params = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=a.max_new_tokens, seed=0)
    ls = [None] + [int(x) for x in a.ls.split(",") if x]
    saved = linear.ROW_TILES
    rows, reports = [], {}
    try:
        for name in order:
            report, seconds = use_set(engine, name)
            tuning = linear.describe(report)
            reports.setdefault(name, tuning)
            ms = [round_ms(engine, prompt, a.k, params, L)["ms_per_round"] for L in ls]
            # every tuning's choices, not only each set's first: a set's choices can differ from load to load
            rows.append(dict(set=name, tune_s=seconds, ms_per_round=dict(zip(map(str, ls), ms, strict=True)),
                             tuning=tuning))
            print(f"{name}: " + json.dumps(rows[-1]), flush=True)
    finally:
        linear.ROW_TILES = saved
        linear.clear()
    info = dict(device=device_line(engine.device), shape=a.shape, k=a.k, max_new_tokens=a.max_new_tokens,
                rows=rows, tuning=reports)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tuning_ab.json").write_text(json.dumps(info, indent=1))
    lines = [info["device"], f"random-weight {a.shape} target + its draft, k = {a.k}, T 0.8, top-p 0.95, "
             "ms per round (L: fixed draft length, None: regular decoding)"]
    lines += [f"--- tuning, set {name} (its first; every one in the JSON)\n{text}" for name, text in reports.items()
              if text]
    lines += ["set      tune s " + " ".join(f"{'L=' + k if k != 'None' else 'regular':>8s}" for k in map(str, ls))]
    lines += [f"{r['set']:8s} {r['tune_s']:6.1f} " + " ".join(f"{v:8.3f}" for v in r["ms_per_round"].values())
              for r in rows]
    (out / "tuning_ab.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return info


if __name__ == "__main__":
    main()
