"""CPU micro-benchmark of the per-round sampling work, before and after, side by side.

    python bench/sampling_bench.py [--reps 5] [--threads 1]

- top-p over the 151,936-token vocabulary (T 0.8, top-p 0.95, peaked Zipf logits as in
  bench/round_overhead.py): the previous full sort vs `process_logits` (top 1024 candidates);
- per-round uniforms: the previous per-sequence torch.Generator draws (float64 on the host, then a
  copy) vs `SequenceRNG` (counter-based, blocks drawn ahead on the device).
Times are CPU time of this process (the machine is shared), median of --reps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as `python bench/...`

from bass.config import SamplingParams  # noqa: E402
from bass.sampling import process_logits  # noqa: E402
from bass.streams import SequenceRNG  # noqa: E402
from bench.round_overhead import VOCAB, logit_bank  # noqa: E402


def full_sort_top_p(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """`process_logits` as it was: softmax, then top-p by a sort of the whole vocabulary."""
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
    sorted_p = sorted_p.masked_fill(mass_before >= params.top_p, 0.0)
    probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return probs / probs.sum(-1, keepdim=True)


class GeneratorRNG:
    """The previous SequenceRNG: one torch.Generator per sequence, rows drawn one by one on the host."""

    def __init__(self, seed, keys):
        self._gens = {k: torch.Generator().manual_seed(seed * 1_000_003 + k[0] * 65_537 + k[1]) for k in keys}

    def uniforms(self, keys, n, device):
        rows = [torch.rand(n, generator=self._gens[k], dtype=torch.float64) for k in keys]
        return torch.stack(rows).to(device=device, dtype=torch.float32)


def cpu_ms(fn, reps: int, *args) -> float:
    fn(*args)
    times = []
    for _ in range(reps):
        c0 = time.process_time()
        fn(*args)
        times.append((time.process_time() - c0) * 1e3)
    return statistics.median(times)


def draw_100(rng, keys, n) -> None:
    for _ in range(100):
        rng.uniforms(keys, n, "cpu")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    params = SamplingParams(temperature=0.8, top_p=0.95)
    bank = logit_bank(72, VOCAB)
    print(f"CPU ms per call, median of {a.reps}, {a.threads} thread(s); V={VOCAB}")
    print(f"{'work':40s} {'before':>9s} {'after':>9s} {'ratio':>7s}")
    for rows, what in ((8, "regular k=8"), (32, "regular k=32"), (72, "BASS verify k=8, L=8")):
        x = bank[:rows]
        assert torch.equal(process_logits(x, params) > 0, full_sort_top_p(x, params) > 0)
        before, after = cpu_ms(full_sort_top_p, a.reps, x, params), cpu_ms(process_logits, a.reps, x, params)
        print(f"{'top-p, ' + what + f' [{rows}, V]':40s} {before:9.3f} {after:9.3f} {before / after:6.1f}x")
    for k, n in ((8, 1), (32, 1), (8, 17), (32, 17)):
        keys = [(0, s) for s in range(k)]
        old, new = GeneratorRNG(0, keys), SequenceRNG(0, keys)
        before, after = (cpu_ms(draw_100, a.reps, rng, keys, n) / 100 for rng in (old, new))
        print(f"{f'uniforms, k={k}, {n} per sequence':40s} {before:9.4f} {after:9.4f} {before / after:6.1f}x")


if __name__ == "__main__":
    main()
