"""What a request's prefill costs with and without its CUDA graphs (`bass.prefill_graphs`), side by side.

    PYTHONPATH=. python bench/prefill_bench.py --out bench/results/         (H100: a minute, no upload)
    PYTHONPATH=. python bench/prefill_bench.py --shape tiny --lens 12,40 --repeats 2   (CPU plumbing)

Two engines over the same models (`bench/draft_step_bench.build_engine`: the embedded target's shapes with
random weights and the shipped draft, so no upload): one with `EngineConfig(prefill_graphs=True)`, the default,
its graphs warmed, and one with False. For each prompt length and request kind (BASS with the draft at k = 8,
regular decoding at k = 8 and 1) the engines take turns, and each row reports the median `BatchStats.prefill_s`
(the target's prefill, the fork into the KV arena, the first tokens' draw and the draft's prefill) of
`--repeats` requests of one new token after a warm-up; then whether the two engines decode the same 16 greedy
tokens: a prefill padded to its width bucket multiplies matrices of another shape, so its logits may differ in
their last bits, and at a near tie (random weights make them common) so may a token. On a
CPU the engine with graphs runs the same padding eagerly (`use_static_shapes(capture=False)`): the plumbing,
not a measure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from draft_step_bench import build_engine  # noqa: E402

from bass.config import SamplingParams  # noqa: E402
from bass.device import device_line  # noqa: E402
from bass.engine import Engine  # noqa: E402
from bass.synthetic import random_prompt  # noqa: E402

KINDS = ((8, "bass"), (8, "regular"), (1, "regular"))  # (k, method)


def prefill_ms(engine: Engine, prompt: list[int], k: int, method: str, repeats: int) -> float:
    """Median ms of `repeats` requests' prefills (`BatchStats.prefill_s`), one new token each, after one."""
    params = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=1, seed=0)
    kw = dict(k=k, params=params, method=method) | ({"drafter": "model"} if method == "bass" else {})
    engine.generate([prompt], **kw)
    return statistics.median(1e3 * engine.generate([prompt], **kw).stats.prefill_s for _ in range(repeats))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="qwen2.5-1.5b", choices=["qwen2.5-1.5b", "llama-7b", "tiny"])
    p.add_argument("--lens", default="40,160,320,500,600", help="prompt lengths in tokens")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default="bench/results/")
    a = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    graphed = build_engine(a.shape, device)
    if device == "cpu":
        graphed.use_static_shapes(capture=False)
    eager = Engine(replace(graphed.config, prefill_graphs=False), target=graphed.target, draft=graphed.draft)
    if device == "cpu":
        eager.use_static_shapes(capture=False)
    vocab = graphed.target.config.vocab_size
    warm = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=8, seed=0)
    for engine in (graphed, eager) if device == "cuda" else ():  # decode graphs of both, prefill graphs of one
        engine.warm_draft_lengths(random_prompt(vocab, 160, seed=0), warm, lengths=(1, 2, 3), k=8, method="bass",
                                  drafter="model")
    rows = []
    greedy = SamplingParams(max_new_tokens=16)
    for n in (int(x) for x in a.lens.split(",")):
        prompt = random_prompt(vocab, n, seed=n)
        same = (graphed.generate([prompt], k=1, params=greedy, method="regular").candidates[0].token_ids
                == eager.generate([prompt], k=1, params=greedy, method="regular").candidates[0].token_ids)
        for k, method in KINDS:
            ms = {}
            for _ in range(2):  # the engines take turns
                for name, engine in (("graphs", graphed), ("eager", eager)):
                    ms.setdefault(name, []).append(prefill_ms(engine, prompt, k, method, a.repeats))
            rows.append(dict(prompt_tokens=n, k=k, method=method, graphs_ms=min(ms["graphs"]),
                             eager_ms=min(ms["eager"]), greedy_equal=same))
    info = dict(device=device_line(graphed.device), shape=a.shape, repeats=a.repeats, rows=rows)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "prefill.json").write_text(json.dumps(info, indent=1))
    lines = [info["device"], f"random-weight {a.shape} target + its draft; prefill ms, the better of two medians "
             f"of {a.repeats}", "| prompt tokens | k | method | graphs | eager | eager / graphs | greedy 16 equal |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['prompt_tokens']} | {r['k']} | {r['method']} | {r['graphs_ms']:.2f} | {r['eager_ms']:.2f} | "
              f"{r['eager_ms'] / r['graphs_ms']:.2f}x | {r['greedy_equal']} |" for r in rows]
    (out / "prefill.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return info


if __name__ == "__main__":
    main()
