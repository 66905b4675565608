"""What programmatic dependent launch (`kernels.pdl`) saves a decode step: one graph, launched with and without.

    PYTHONPATH=. python bench/pdl_bench.py --out bench/results/            (CUDA, compute capability 9.0)
    PYTHONPATH=. python bench/pdl_bench.py --target tiny --batches 2 --reps 3 (CPU: the plumbing CI checks)

A random model of the embedded target's shapes (Qwen2.5-1.5B: 28 blocks of width 1536, a 151,936-token head;
random weights move the same bytes as trained ones), a cache prefilled with `--prompt` tokens per sequence.
For each batch and verify width, the target's forward is captured in a CUDA graph with PDL off and with it
on, both with the projections tuned with PDL off, and each graph is replayed `--reps` times back to back
(median of 5 such runs, device time between two events); the logits must be bit for bit the same. Then the
projections are tuned again with PDL on, as an engine tunes them at load (a kernel that overlaps its
neighbours may now beat cuBLAS where it lost before), and the forward is timed once more.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bass.attention import resolve_backend  # noqa: E402
from bass.device import device_line  # noqa: E402
from bass.graphs import capture  # noqa: E402
from bass.models import linear  # noqa: E402
from bass.models.loader import build_random  # noqa: E402
from bass.synthetic import TARGETS  # noqa: E402
from kernels import get_backend, pdl  # noqa: E402

MODES = {"off": False, "pdl": True}


def step_ms(fn, reps: int) -> float:
    """Median over 5 runs of ms per call, `reps` calls of fn back to back (device time on CUDA)."""
    fn()
    times = []
    for _ in range(5):
        if torch.cuda.is_available():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / reps)
        else:
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            times.append(1e3 * (time.perf_counter() - t) / reps)
    return statistics.median(times)


def forward_fn(model, batch: int, width: int, prompt: int, attn, device):
    """A function running the target's forward over [batch, width] new tokens on a cache prefilled with
    `prompt` tokens per sequence (rolled back after each call, so every call does the same work)."""
    vocab = model.config.vocab_size
    cache = model.new_cache(batch, prompt + width + 8)
    gen = torch.Generator(device="cpu").manual_seed(0)
    with torch.inference_mode():
        model(torch.randint(0, vocab, (batch, prompt), generator=gen).to(device), cache,
              torch.full((batch,), prompt, dtype=torch.int32, device=device), attn)
    start = cache.suffix_len.clone()
    tokens = torch.randint(0, vocab, (batch, width), generator=gen).to(device)
    q_len = torch.full((batch,), width, dtype=torch.int32, device=device)

    def forward():
        with torch.inference_mode():
            logits = model(tokens, cache, q_len, attn)
            cache.truncate(start)
        return logits
    return forward


def run_mode(model, mode: str, shapes, args, attn, device) -> dict:
    """{(batch, width): (ms, logits)} with PDL on or off as `mode` says."""
    pdl.ENABLED = MODES[mode]
    out = {}
    for batch, width in shapes:
        fn = forward_fn(model, batch, width, args.prompt, attn, device)
        if device.type == "cuda":
            graph, logits = capture(fn, device=device)
            ms = step_ms(graph.replay, args.reps)
        else:
            logits = fn()
            ms = step_ms(fn, args.reps)
        out[(batch, width)] = (ms, logits.clone())
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="qwen2.5-1.5b", choices=sorted(TARGETS))
    ap.add_argument("--batches", default="8,32")
    ap.add_argument("--widths", default="1,2")
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    info = device_line(device)
    model = build_random(TARGETS[args.target], device=device, dtype=dtype)
    attn = get_backend(resolve_backend("auto", device))
    shapes = [(int(b), int(w)) for b in args.batches.split(",") for w in args.widths.split(",")]
    if device.type == "cuda":
        pdl.ENABLED = False
        linear.tune(model)
    results = {mode: run_mode(model, mode, shapes, args, attn, device) for mode in MODES}
    if device.type == "cuda":  # the choices an engine makes at load: tuned with PDL on
        linear.clear()
        pdl.ENABLED = True
        print("projections tuned with PDL on:\n" + linear.describe(linear.tune(model)), flush=True)
        results["pdl, tuned with it"] = run_mode(model, "pdl", shapes, args, attn, device)
        linear.clear()
    pdl.ENABLED = True
    rows = []
    for batch, width in shapes:
        base_ms, base_logits = results["off"][(batch, width)]
        row = {"batch": batch, "width": width}
        for mode, res in results.items():
            ms, logits = res[(batch, width)]
            row[f"{mode} ms"] = round(ms, 4)
            row[f"{mode} same logits"] = bool(torch.equal(logits, base_logits))
        rows.append(row)
    modes = list(results)
    lines = [info, f"target {args.target}, prompt {args.prompt}, {args.reps} replays x 5",
             "batch  width  " + "  ".join(f"{m:>22}" for m in modes)]
    for row in rows:
        cells = [f"{row[m + ' ms']:.3f} ({row['off ms'] / row[m + ' ms']:.3f}x){'' if row[m + ' same logits'] else '*'}"
                 for m in modes]
        lines.append(f"{row['batch']:5d}  {row['width']:5d}  " + "  ".join(f"{c:>22}" for c in cells))
    lines.append("ms per forward (speed-up over off); * logits differ from off (expected only after retuning)")
    print("\n".join(lines))
    result = {"device": info, "target": args.target, "prompt": args.prompt, "reps": args.reps, "rows": rows}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y-%m-%d")
        (args.out / f"pdl_{stamp}.json").write_text(json.dumps(result, indent=1))
        (args.out / f"pdl_{stamp}.txt").write_text("\n".join(lines) + "\n")
    return result


if __name__ == "__main__":
    main()
