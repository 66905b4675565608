"""Quick CPU check of the draft-length policies: regular vs BASS (cost / heuristic) per drafter, same engine.

    python bench/draft_policy_cpu.py [--target gemma3-270m] [--k 4] [--tokens 48] [--reps 3]

Runs are interleaved and the median wall time is reported, since this machine is shared; prints the
cost policy's `describe()` (what it measured and chose) for each drafter.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as `python bench/...`

from bass.config import DraftLengthConfig, EngineConfig, SamplingParams
from bass.engine import Engine

PROMPTS = ["def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "def is_prime(n: int) -> bool:\n"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="gemma3-270m")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--drafters", default="ngram,layer-skip")
    a = ap.parse_args()
    engine = Engine(EngineConfig(target=a.target, device="cpu"))
    params = SamplingParams(max_new_tokens=a.tokens)
    runs = [("regular", None, None)] + [(f"bass {d} {p}", d, p) for d in a.drafters.split(",")
                                        for p in ("cost", "heuristic")]
    times: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    described = {}
    engine.generate(PROMPTS, k=a.k, params=SamplingParams(max_new_tokens=4), method="regular")  # warm-up
    for _ in range(a.reps):
        for name, drafter, policy in runs:
            kw = dict(method="regular") if drafter is None else dict(
                method="bass", drafter=drafter, draft_length=DraftLengthConfig(policy=policy))
            t0 = time.perf_counter()
            r = engine.generate(PROMPTS, k=a.k, params=params, **kw)
            times[name].append((time.perf_counter() - t0) / r.stats.tokens)
            if policy == "cost":
                described[name] = {k: v for k, v in r.stats.policy.items() if k != "alpha"}
    base = statistics.median(times["regular"])
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:28s} {m * 1e3:7.2f} ms/token (all sequences)   speed vs regular {base / m:5.2f}x")
    print(json.dumps(described, indent=1))


if __name__ == "__main__":
    main()
