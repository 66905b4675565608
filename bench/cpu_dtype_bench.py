"""The CPU's two dtypes side by side: regular decoding and BASS in float32 and in bf16, interleaved in one run.

    PYTHONPATH=. python bench/cpu_dtype_bench.py --target embedded --k 4 --prompts 2 --max-new-tokens 48 \
        --repeats 3 --out bench/results/cpu_dtype.json
    PYTHONPATH=. python bench/cpu_dtype_bench.py --target <tiny folder> --k 2 --prompts 1 --max-new-tokens 8 (a test)

An "auto" engine on the CPU runs bf16 where this machine's projections are faster in it (`bass.models.linear`,
`measure_cpu_dtype`: bf16 calls of a fixed row count, so that greedy BASS keeps regular decoding's tokens; float32 by
oneDNN). This measures what that choice buys end to end: two engines over the target, one per dtype, each with
the draft that ships for it, and the four rows (regular and BASS with the default drafter and policy, in each
dtype) measured by `real_passes.measure` (a warm-up pass, then --repeats passes, the rows interleaved prompt by
prompt; a row is its median pass). At the app's defaults: T 0.8, top-p 0.95, k = 4. Before the timed rows it
also decodes the first prompt greedily in bf16, regularly and with BASS, and reports whether the tokens agree.

Prints a table last (ms/token/seq, each row against regular decoding in its dtype and against its own method in
float32) and writes JSON with the device line and the dtype `measure_cpu_dtype` found on this machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_passes import measure  # noqa: E402

from bass.config import EngineConfig, SamplingParams  # noqa: E402
from bass.device import device_line  # noqa: E402
from bass.engine import Engine  # noqa: E402
from bass.models import linear  # noqa: E402
from sandbox.humaneval import load_humaneval  # noqa: E402

DTYPES = ("float32", "bfloat16")
METHODS = ("regular", "bass")


def run(a: argparse.Namespace, log=print) -> dict:
    """The rows of the module docstring, and the run's facts."""
    chosen = str(linear.measure_cpu_dtype()).removeprefix("torch.")  # this CPU's choice, whatever the env pins
    t0 = time.perf_counter()
    engines = {d: Engine(EngineConfig(target=a.target, device="cpu", dtype=d)) for d in DTYPES}
    log(f"two engines loaded in {time.perf_counter() - t0:.1f} s; cpu_dtype measured {chosen}")
    prompts = [p.prompt for p in load_humaneval()[:a.prompts]]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=a.max_new_tokens)
    ids = {m: [c.token_ids for c in engines["bfloat16"].generate(prompts[0], k=1, params=greedy, method=m).candidates]
           for m in METHODS}
    agree = ids["regular"] == ids["bass"]
    log(f"greedy bf16: BASS {'keeps' if agree else 'DOES NOT keep'} regular decoding's {len(ids['regular'][0])} tokens")

    def runner(dtype: str, method: str):
        def go(i: int, p: int):
            params = SamplingParams(temperature=a.temperature, top_p=a.top_p, max_new_tokens=a.max_new_tokens,
                                    seed=a.seed + p)
            return engines[dtype].generate(prompts[i], k=a.k, params=params, method=method)
        return go

    t0 = time.perf_counter()
    got = measure({(d, m): runner(d, m) for d in DTYPES for m in METHODS}, len(prompts), a.repeats)
    log(f"measured in {time.perf_counter() - t0:.1f} s")
    rows = [dict(dtype=d, method=m, k=a.k, **got[(d, m)]) for d in DTYPES for m in METHODS]
    for r in rows:
        r["x_regular"] = got[(r["dtype"], "regular")]["ms_per_token"] / r["ms_per_token"]
        r["x_float32"] = got[("float32", r["method"])]["ms_per_token"] / r["ms_per_token"]
    info = dict(device=device_line(torch.device("cpu")), target=a.target, k=a.k, prompts=a.prompts,
                max_new_tokens=a.max_new_tokens, repeats=a.repeats, seed=a.seed,
                sampling=f"T {a.temperature}, top-p {a.top_p}", cpu_dtype=chosen, greedy_bf16_agrees=agree,
                date=datetime.date.today().isoformat())
    return dict(info=info, rows=rows)


def format_table(result: dict) -> str:
    """One line per row: ms/token/seq, its passes, and the two ratios."""
    lines = [f"{'dtype':<9} {'method':<8} {'ms/tok/seq':>10}  {'passes':<24} {'x_reg':>6} {'x_fp32':>6} "
             f"{'accept':>6} {'tok/round':>9}"]
    for r in result["rows"]:
        passes = " / ".join(f"{x:.1f}" for x in r["ms_per_token_passes"])
        accept = "–" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        lines.append(f"{r['dtype']:<9} {r['method']:<8} {r['ms_per_token']:>10.1f}  {passes:<24} "
                     f"{r['x_regular']:>5.2f}x {r['x_float32']:>5.2f}x {accept:>6} {r['tokens_per_round']:>9.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="embedded")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench/results/cpu_dtype.json")
    a = p.parse_args(argv)
    result = run(a)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"{result['info']['device']}; {a.target}; k = {a.k}; {result['info']['sampling']}; "
          f"cpu_dtype here: {result['info']['cpu_dtype']}")
    print(format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
