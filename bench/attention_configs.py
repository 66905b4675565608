"""Ragged attention's launch configurations at the engine's decode and verify shapes, every candidate timed.

    PYTHONPATH=. python bench/attention_configs.py --out bench/results/        (H100: about 3 minutes)
    TRITON_INTERPRET=1 PYTHONPATH=. python bench/attention_configs.py --tiny     (CPU plumbing)

`kernels.ragged_attention.choose_config` picks blocks, warps, stages and KV splits from shapes alone. This
times what it picks against every candidate of a grid (row tile 16 / 32, key tile 32 / 64 / 128, 2 / 4 warps,
2 / 3 stages, 1 / 2 / 3 splits), where the engine runs the kernel most: the embedded target's attention
(12 query / 2 kv heads, head_dim 128) at batch 8 for 1 .. 6 query tokens, and its trained draft's (8 / 4,
64) for one. Each sequence shares a 160-token prompt and has 100 .. 160 keys of its own, HumanEval's scale.
A candidate's time is per launch (the merge of its splits included), from a CUDA graph holding one launch
per layer on that layer's own K/V, replayed back to back (`profile_round.graphed`, `step_costs.timed_ms`):
the kernel as the engine's graphs run it.
Every candidate's output is checked against the chosen configuration's (bf16 rounding only).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_round import graphed  # noqa: E402
from step_costs import timed_ms  # noqa: E402

from kernels.ragged_attention import choose_config, ragged_attention_tuned  # noqa: E402

PREFIX, OWN = 160, (100, 160)  # shared prompt; own keys per sequence (uniform)
SHAPES = {  # name: (query heads, kv heads, head_dim, layers, query tokens)
    "target": (12, 2, 128, 28, (1, 2, 3, 4, 5, 6)),
    "draft": (8, 4, 64, 2, (1,)),
}


def problem(B: int, T: int, Hq: int, Hkv: int, D: int, device: str, gen: torch.Generator) -> dict:
    """One layer's inputs: B sequences of one prompt, ragged own keys, T query tokens each."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    kv = torch.randint(OWN[0], OWN[1] + 1, (B,), generator=gen) + T
    cap = OWN[1] + 140  # the engine's suffix capacity: new tokens and the draft's slack

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device, dtype)

    ints = dict(device=device, dtype=torch.int32)
    return dict(q=rnd(B, T, Hq, D), prefix_k=rnd(1, PREFIX, Hkv, D), prefix_v=rnd(1, PREFIX, Hkv, D),
                prefix_len=torch.tensor([PREFIX], **ints), seq_group=torch.zeros(B, **ints),
                suffix_k=rnd(B, cap, Hkv, D), suffix_v=rnd(B, cap, Hkv, D), kv_len=kv.to(**ints),
                q_len=torch.full((B,), T, **ints), scale=D ** -0.5)


def launch_us(fn, launches: int, reps: int = 100) -> float:
    """µs per launch of `fn` (which makes `launches` launches), replayed as one CUDA graph back to back; on the
    CPU, eager calls."""
    return 1e3 * timed_ms(graphed(fn), reps) / launches


def candidates(rows: int, tiny: bool) -> list[dict]:
    """The grid (module docstring); row tiles wider than the rows need are left out. `tiny`: two."""
    if tiny:
        return [dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1, NUM_SPLITS=n) for n in (1, 2)]
    out = []
    for bm, bn, w, st, sp in itertools.product((16, 32), (32, 64, 128), (2, 4), (2, 3), (1, 2, 3)):
        if bm <= max(16, triton.next_power_of_2(rows)):
            out.append(dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=st, NUM_SPLITS=sp))
    return out


def sweep(device: str, tiny: bool = False, batch: int = 8) -> list[dict]:
    """One row per (shape, query tokens): the chosen configuration, its µs, the five fastest and every one timed."""
    gen = torch.Generator().manual_seed(0)
    shapes = {"tiny": (4, 2, 16, 2, (1, 9))} if tiny else SHAPES
    rows = []
    for name, (Hq, Hkv, D, layers, Ts) in shapes.items():
        for T in Ts:
            layer_inputs = [problem(batch, T, Hq, Hkv, D, device, gen) for _ in range(layers)]
            chosen = choose_config(batch, T, Hq, Hkv, D, PREFIX + layer_inputs[0]["suffix_k"].shape[1],
                                   torch.device(device))
            ref = ragged_attention_tuned(**layer_inputs[0]).float()
            timed, reps = [], 100 if device == "cuda" else 1
            for cfg in [{}] + candidates(T * Hq // Hkv, tiny):
                err = (ragged_attention_tuned(**layer_inputs[0], **cfg).float() - ref).abs().max().item()
                us = launch_us(lambda cfg=cfg, inputs=layer_inputs: [ragged_attention_tuned(**x, **cfg)
                                                                     for x in inputs], layers, reps)
                timed.append(dict(us=us, max_abs_diff=err, config=cfg or "chosen"))
            rows.append(dict(shape=name, T=T, chosen=chosen, chosen_us=timed[0]["us"],
                             best=sorted(timed, key=lambda r: r["us"])[:5], timed=timed))
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="a tiny shape at batch 2 and two candidates (CPU plumbing)")
    p.add_argument("--out", default=None, help="a folder for attention_configs.json")
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = sweep(device, tiny=args.tiny, batch=2 if args.tiny else 8)  # tiny: the interpreter runs every program
    for r in rows:
        best = r["best"][0]
        print(f"{r['shape']:6s} T{r['T']}  chosen {r['chosen_us']:7.2f} µs  best {best['us']:7.2f} µs "
              f"{best['config']}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "attention_configs.json").write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
