"""Acceptance of each drafter on held-out prompts: the figure that decides whether speculation can pay.

For every drafter (the trained draft, the plain next-token draft, n-gram lookup, layer-skip) and two
prompt sets (all 164 HumanEval prompts; completion-style prompts cut from held-out corpus files), through
the engine's own round loop with a fixed draft length L:

  greedy   k = 1, temperature 0: acceptance = accepted / proposed draft tokens (greedy match)
  sampled  k = 8, T 0.8, top-p 0.95: acceptance per proposed token under lossless sampling

and tokens per round (emitted tokens per verify pass, bonus included). One model load, all rows from one
run; prints a table last and writes JSON.

    python bench/draft_acceptance.py --drafts trained=auto plain=runs/draft/draft-next-token.safetensors
    python bench/draft_acceptance.py --baselines "" --drafts full=FILE_WITHOUT_VOCAB shipped=auto  # two drafts
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bass import DraftLengthConfig, Engine, EngineConfig, SamplingParams  # noqa: E402
from bass.config import HUMANEVAL_STOPS  # noqa: E402
from bass.device import device_line  # noqa: E402
from bass.drafters import build_drafter  # noqa: E402
from bass.models.loader import LoadedModel  # noqa: E402
from sandbox.humaneval import load_humaneval  # noqa: E402

HELDOUT_PROMPTS = Path(__file__).parent / "data" / "heldout_prompts.jsonl"


def prompt_sets(limit: int | None) -> dict[str, list[str]]:
    """{"humaneval": 164 prompts, "heldout-code": prompts from held-out corpus files}, each cut to `limit`."""
    sets = {"humaneval": [p.prompt for p in load_humaneval()]}
    if HELDOUT_PROMPTS.exists():
        sets["heldout-code"] = [json.loads(line)["prompt"] for line in HELDOUT_PROMPTS.read_text().splitlines()]
    return {name: prompts[:limit] for name, prompts in sets.items()}


def measure(engine: Engine, drafter, prompts: list[str], k: int, params: SamplingParams, L: int,
            batch_seqs: int) -> dict:
    """Acceptance and tokens/round of one drafter over `prompts` (batched by `batch_seqs` sequences)."""
    proposed = accepted = rounds = emitted = 0
    t0 = time.perf_counter()
    step = max(1, batch_seqs // k)
    for i in range(0, len(prompts), step):
        kwargs = {"drafter": drafter() if callable(drafter) else drafter}
        result = engine.generate(prompts[i:i + step], k=k, params=params, method="bass",
                                 draft_length=DraftLengthConfig(policy="fixed", l0=L), **kwargs)
        for c in result.candidates:
            proposed, accepted = proposed + c.stats.proposed, accepted + c.stats.accepted
            rounds, emitted = rounds + c.stats.rounds, emitted + max(0, c.stats.tokens - 1)
    return {"acceptance": accepted / proposed if proposed else 0.0,
            "tokens_per_round": emitted / rounds if rounds else 0.0, "proposed": proposed, "accepted": accepted,
            "rounds": rounds, "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="embedded")
    p.add_argument("--drafts", nargs="*", default=["trained=auto"], help="NAME=SPEC pairs of model drafts")
    p.add_argument("--baselines", default="ngram,layer-skip", help="drafters measured beside the drafts ('': none)")
    p.add_argument("--draft-length", type=int, default=5)
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
                r = measure(engine, drafter, prompts, k, params, a.draft_length, a.batch_seqs)
                rows.append({"prompts": set_name, "n": len(prompts), "mode": mode, "k": k, "drafter": name,
                             "draft_temperature": temperature.get(name), **r})
                print(json.dumps(rows[-1]), flush=True)
    device = device_line(engine.device)
    out = {"device": device, "target": engine.target.name, "draft_length": a.draft_length,
           "max_new_tokens": a.max_new_tokens, "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"\ndevice: {device}; target {engine.target.name}; fixed L={a.draft_length}; {a.max_new_tokens} new tokens")
    print(f"{'prompts':<13} {'mode':<13} {'drafter':<11} {'acceptance':>10} {'tokens/round':>12}")
    for r in rows:
        print(f"{r['prompts']:<13} {r['mode']:<13} {r['drafter']:<11} {r['acceptance']:>10.3f} "
              f"{r['tokens_per_round']:>12.2f}")


def _model_drafter(engine: Engine, loaded: LoadedModel, temperature_scale: float = 1.0):
    """A factory of drafters over `loaded` (one per request: a drafter serves one batch): a `FeatureDrafter`
    for a feature draft, else a `ModelDrafter`, drawing at `temperature_scale` times the request's T."""
    from bass.attention import get_backend
    from bass.cache import CacheArena
    from bass.graphs import GraphedModel

    arena = CacheArena(persistent=engine.device.type == "cuda")
    forward = GraphedModel(loaded.model, arena, use_graphs=True) if engine.device.type == "cuda" else None
    attn = get_backend(engine.backend, engine.device)
    return lambda: build_drafter("model", engine.target_forward, loaded.model, attn, draft_forward=forward,
                                 draft_arena=arena, temperature_scale=temperature_scale)


if __name__ == "__main__":
    main()
