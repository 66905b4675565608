"""Acceptance of each drafter on held-out prompts: the figure that decides whether speculation can pay.

For every drafter (the trained draft, the plain next-token draft, n-gram lookup, layer-skip) and two
prompt sets (all 164 HumanEval prompts; completion-style prompts cut from held-out corpus files), through
the engine's own round loop with a fixed draft length L:

  greedy   k = 1, temperature 0: acceptance = accepted / proposed draft tokens (greedy match)
  sampled  k = 8, T 0.8, top-p 0.95: acceptance per proposed token under lossless sampling

and tokens per round (emitted tokens per verify pass, bonus included). Beside the ratio over all proposals,
each row gives the acceptance at each draft position s (EAGLE's "s-alpha"): of the rounds that proposed a
token at position s and accepted the s - 1 before it, the share that accepted it too,

    alpha_s = #{rounds: n >= s, a >= s} / #{rounds: n >= s, a >= s - 1}      (n proposed, a accepted)

and over all positions, accepted / tested (`per_tested`: the per-token acceptance of `bench/gpu_bench.py`).
Accepted over proposed at a fixed L mixes these with the chance of reaching each position,
sum_s P(a >= s) / L, so it falls as L grows even for a draft whose alpha_s are flat; alpha_s is what a draft
does at each step of its chain. `--draft-length 1,2,3,4,5` measures several fixed lengths in one run. One model
load, all rows from one run; prints a table last and writes JSON.

    python -m bench.draft_acceptance --drafts trained=auto plain=runs/draft/draft-next-token.safetensors
    python -m bench.draft_acceptance --baselines "" --drafts full=FILE_WITHOUT_VOCAB shipped=auto  # two drafts
    python -m bench.draft_acceptance --baselines "" --draft-length 1,2,3,4,5  # the shipped draft along L
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bass import DraftLengthConfig, Engine, EngineConfig, SamplingParams
from bass.config import HUMANEVAL_STOPS
from bass.drafters import DrafterSettings, DraftModel, build_drafter
from bass.models.loader import LoadedModel
from bass.runtime.device import device_line
from sandbox.humaneval import load_humaneval

HELDOUT_PROMPTS = Path(__file__).parent / "data" / "heldout_prompts.jsonl"


def prompt_sets(limit: int | None) -> dict[str, list[str]]:
    """{"humaneval": 164 prompts, "heldout-code": prompts from held-out corpus files}, each cut to `limit`."""
    sets = {"humaneval": [p.prompt for p in load_humaneval()]}
    if HELDOUT_PROMPTS.exists():
        sets["heldout-code"] = [json.loads(line)["prompt"] for line in HELDOUT_PROMPTS.read_text().splitlines()]
    return {name: prompts[:limit] for name, prompts in sets.items()}


def tally_positions(reached: list[int], passed: list[int], rounds: list[tuple[int, int]]) -> None:
    """Add to reached[s - 1] / passed[s - 1] (s = 1 .. len(reached)) the rounds, given as (n proposed,
    a accepted) pairs, that tested draft position s (n >= s and the s - 1 before it accepted) and that
    accepted it (a >= s)."""
    for n, a in rounds:
        for s in range(min(n, a + 1, len(reached))):
            reached[s] += 1
            passed[s] += a > s


def measure(engine: Engine, drafter, prompts: list[str], k: int, params: SamplingParams, L: int,
            batch_seqs: int) -> dict:
    """Acceptance, tokens/round and the acceptance at each draft position (module docstring) of one drafter
    over `prompts` (batched by `batch_seqs` sequences) at fixed draft length L."""
    proposed = accepted = rounds = emitted = 0
    reached, passed = [0] * L, [0] * L  # per draft position s = 1 .. L: rounds that tested it, that accepted it
    t0 = time.perf_counter()
    step = max(1, batch_seqs // k)
    for i in range(0, len(prompts), step):
        kwargs = {"drafter": drafter() if callable(drafter) else drafter}
        result = None
        for event in engine.stream(prompts[i:i + step], k=k, params=params, method="bass",
                                   draft_length=DraftLengthConfig(policy="fixed", l0=L), **kwargs):
            if event.kind == "round":
                tally_positions(reached, passed, [(up.proposed, up.accepted) for up in event.updates])
            result = event.result or result
        for c in result.candidates:
            proposed, accepted = proposed + c.stats.proposed, accepted + c.stats.accepted
            rounds, emitted = rounds + c.stats.rounds, emitted + max(0, c.stats.tokens - 1)
    return {"acceptance": accepted / proposed if proposed else 0.0,
            "tokens_per_round": emitted / rounds if rounds else 0.0, "proposed": proposed, "accepted": accepted,
            "proposed_per_round": proposed / rounds if rounds else 0.0,
            "rounds": rounds, "position_acceptance": [p / r if r else None for p, r in zip(passed, reached)],
            "position_tested": reached, "per_tested": sum(passed) / sum(reached) if sum(reached) else 0.0,
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="embedded")
    p.add_argument("--drafts", nargs="*", default=["trained=auto"], help="NAME=SPEC pairs of model drafts")
    p.add_argument("--baselines", default="ngram,layer-skip", help="drafters measured beside the drafts ('': none)")
    p.add_argument("--draft-length", default="5", help="fixed draft length L, or several: 1,2,3,4,5")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--limit", type=int, default=None, help="prompts per set (default: all)")
    p.add_argument("--batch-seqs", type=int, default=64)
    p.add_argument("--backend", default="auto", help="auto: ragged on CUDA, torch on the CPU (Engine.backend)")
    p.add_argument("--modes", default="greedy,sampled", help="greedy and/or sampled (T 0.8, top-p 0.95, k 8)")
    p.add_argument("--draft-temperatures", default="auto", help="sampled mode: each model draft at these multiples "
                   "of T (EngineConfig.draft_temperature; auto: the draft file's own)")
    p.add_argument("--out", default="bench/results/draft_acceptance.json")
    a = p.parse_args(argv)
    scales = a.draft_temperatures.split(",")
    try:
        lengths = [int(x) for x in a.draft_length.split(",")]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 1:
        p.error(f"--draft-length takes lengths of at least 1, e.g. 5 or 1,2,3; got {a.draft_length!r}")

    engine = Engine(EngineConfig(target=a.target, draft=None, drafter="ngram", backend=a.backend))
    drafters: dict[str, object] = {name: name for name in a.baselines.split(",") if name}
    temperature: dict[str, float] = {}  # a model draft's label -> the multiple of T it draws at
    for pair in a.drafts:
        name, spec = pair.split("=", 1)
        loaded = engine.load_draft(spec, {"progress": None, "device": engine.device, "dtype": engine.dtype})
        if loaded is None:
            print(f"note: no draft for {name}={spec}; skipped")
            continue
        for t in scales:  # a scale of the temperature changes nothing greedy: measured sampled only
            tau = getattr(loaded.model, "temperature_scale", 1.0) if t == "auto" else float(t)
            label = name if t == scales[0] else f"{name} x{tau:g}T"
            drafters[label], temperature[label] = _model_drafter(engine, loaded, tau), tau
    modes = {"greedy": (1, SamplingParams(temperature=0.0, max_new_tokens=a.max_new_tokens, stop=HUMANEVAL_STOPS)),
             "sampled T0.8": (8, SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=a.max_new_tokens,
                                                stop=HUMANEVAL_STOPS, seed=1))}
    modes = {m: v for m, v in modes.items() if m.split()[0] in a.modes.split(",")}
    rows = []
    for set_name, prompts in prompt_sets(a.limit).items():
        for mode, (k, params) in modes.items():
            for name, drafter in drafters.items():
                if mode == "greedy" and " x" in name:
                    continue
                for L in lengths:
                    r = measure(engine, drafter, prompts, k, params, L, a.batch_seqs)
                    rows.append({"prompts": set_name, "n": len(prompts), "mode": mode, "k": k, "drafter": name,
                                 "draft_length": L, "draft_temperature": temperature.get(name), **r})
                    print(json.dumps(rows[-1]), flush=True)
    device = device_line(engine.device)
    out = {"device": device, "target": engine.target.name, "draft_lengths": lengths,
           "max_new_tokens": a.max_new_tokens, "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"\ndevice: {device}; target {engine.target.name}; fixed L in {lengths}; {a.max_new_tokens} new tokens")
    print(f"{'prompts':<13} {'mode':<13} {'drafter':<14} {'L':>2} {'acceptance':>10} {'tokens/round':>12} "
          f"{'proposed/round':>14} {'per tested':>10}  acceptance at positions 1 .. L")
    for r in rows:
        at = " ".join("-" if x is None else f"{x:.3f}" for x in r["position_acceptance"])
        print(f"{r['prompts']:<13} {r['mode']:<13} {r['drafter']:<14} {r['draft_length']:>2} "
              f"{r['acceptance']:>10.3f} {r['tokens_per_round']:>12.2f} {r['proposed_per_round']:>14.2f} "
              f"{r['per_tested']:>10.3f}  {at}")


def _model_drafter(engine: Engine, loaded: LoadedModel, temperature_scale: float = 1.0):
    """A factory of drafters over `loaded` (one per request: a drafter serves one batch): a `FeatureDrafter`
    for a feature draft, else a `ModelDrafter`, drawing at `temperature_scale` times the request's T."""
    from bass.runtime.attention import get_backend
    from bass.runtime.cache import CacheArena
    from bass.runtime.graphs import GraphedModel

    arena = CacheArena(persistent=engine.device.type == "cuda")
    forward = GraphedModel(loaded.model, arena, use_graphs=True) if engine.device.type == "cuda" else None
    attn = get_backend(engine.backend, engine.device)
    return lambda: build_drafter("model", engine.target_forward, DraftModel(loaded.model, forward, arena), attn,
                                 DrafterSettings(temperature_scale=temperature_scale))


if __name__ == "__main__":
    main()
