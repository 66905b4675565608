"""What a draft step and a BASS round cost at the embedded target's shapes, without its weights.

    PYTHONPATH=. python bench/draft_step_bench.py --out bench/results/            (H100: a minute, no upload)
    PYTHONPATH=. python bench/draft_step_bench.py --shape tiny --k 2 --max-new-tokens 6 --ls 1 (CPU plumbing)

A round's cost depends on the shapes, not on the weights' values: a target of Qwen2.5-Coder-1.5B's
shapes with random weights (its head scaled so that top-p sees peaked distributions, `bass.synthetic`)
and the shipped trained draft (its file, read around that target's tables) launch the same kernels and
read the same bytes as the real pair. So this runs where the 1.1 GB GGUF is not: on a bare GPU machine,
in a minute. (`--shape tiny`: a tiny target and `bass.synthetic.random_feature_draft`, for CI; `--shape llama-7b`: the
synthetic 7B benchmark's pair, `bench/gpu_bench.py`, its draft a separate 2-block model.) Acceptance is not
measured: with random weights nearly nothing is accepted, and fixed L drafts L all the same.

Three views, one engine:
  rounds   ms per round of regular decoding and of BASS at fixed L = --ls, k sequences of one prompt
           (the median of three timed generations after two warm-ups): what each draft length adds;
  graphs   for every captured graph of batch k: nodes (device operations of one replay), device ms per
           replay back to back (`host_costs.measure`), the ordered kernels of one draft step
           (draft_step_<graph>.txt: start µs, duration µs, name), and the verify graphs kernel by kernel, one
           column per width (`kernel_table`; with BASS_PDL=0 in the environment each kernel's own time);
  pipelined  `profile_round.pipelined_round` at fixed L = 1 and 2 and regular (`--pipelined`): wall vs GPU busy
           per round, and the `--top` kernels per round (profile_pipelined_<label>_k<k>.txt; with BASS_PDL=0 each
           kernel's own time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_costs import device_ops, engine_graphs, measure  # noqa: E402
from profile_round import pipelined_round  # noqa: E402

from bass.config import DraftLengthConfig, EngineConfig, SamplingParams  # noqa: E402
from bass.device import device_line  # noqa: E402
from bass.engine import Engine  # noqa: E402
from bass.models.draft import DRAFT_FILE, derive_draft, read_draft_file  # noqa: E402
from bass.models.loader import LoadedModel, build_random  # noqa: E402
from bass.synthetic import (  # noqa: E402
    TARGETS,
    SyntheticTokenizer,
    build_pair,
    head_scale,
    random_feature_draft,
    random_prompt,
)


def build_engine(shape: str, device: str) -> Engine:
    """The random-weight target of `shape` and its draft (module docstring) in an engine; "llama-7b": the
    synthetic benchmark's pair (`bass.synthetic.build_pair`: a 2-block draft model of the target's width)."""
    cfg = TARGETS[shape].with_(tie_word_embeddings=False)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if shape == "llama-7b":
        pair = build_pair(cfg, 2, device=device, dtype=dtype, seed=0)
        return Engine(EngineConfig(target="synthetic", draft="synthetic-draft", drafter="model", device=device),
                      target=pair.target, draft=pair.draft)
    target = build_random(cfg, device=device, dtype=dtype, seed=0)
    with torch.no_grad():
        target.lm_head.weight.mul_(head_scale(cfg, 8.0))
    loaded = LoadedModel(target, SyntheticTokenizer(cfg.vocab_size), cfg, f"random {shape}")
    if shape == "qwen2.5-1.5b":
        config, tensors, meta = read_draft_file(DRAFT_FILE)  # hash-checked: the shipped file's shapes
        model = derive_draft(target, config, tensors, meta["kind"], meta["draft_temperature"])
        draft = LoadedModel(model, loaded.tokenizer, config, "draft")
    else:  # a reduced proposal vocabulary, as the shipped draft has
        draft = random_feature_draft(loaded, seed=0, vocab=cfg.vocab_size // 2)
    return Engine(EngineConfig(target="synthetic", draft=None, drafter="ngram", device=device), target=loaded,
                  draft=draft)


def round_ms(engine: Engine, prompt: list[int], k: int, params: SamplingParams, L: int | None) -> dict:
    """Median ms per round of three generations (after two warm-ups); L None: regular decoding."""
    kw = dict(k=k, params=params, method="regular") if L is None else dict(
        k=k, params=params, method="bass", drafter="model", draft_length=DraftLengthConfig(policy="fixed", l0=L))
    for _ in range(2):
        engine.generate([prompt], **kw)
    runs = [engine.generate([prompt], **kw).stats for _ in range(3)]
    ms = statistics.median(1e3 * s.decode_s / len(s.draft_lengths) for s in runs)
    return dict(L=L, ms_per_round=ms, rounds=len(runs[0].draft_lengths))


def kernel_sequence(replay) -> list[tuple[float, float, str]]:
    """(start µs from the first, duration µs, name) of every device operation of one replay, in order."""
    work = device_ops(replay)
    t0 = work[0].time_range.start if work else 0.0
    return [(e.time_range.start - t0, e.time_range.end - e.time_range.start, e.name[:90]) for e in work]


def kernel_table(graphs: list[dict], top: int = 14) -> list[str]:
    """The target's graphs of batch k (slot 0) side by side, one line per kernel name (the `top` dearest in the
    widest graph): launches and device µs per replay, so what each verify width adds shows kernel by kernel.
    Under PDL a kernel's span includes its wait for the one before it: BASS_PDL=0 attributes time cleanly.
    Every replay advances the cache as a forward does, so each graph timed later sees longer contexts than the
    one before: attention's column grows in the order the graphs were timed, not with the width alone
    (`draft_step_2026-11-26_h100_7b_pdl0.txt`: 287 µs per replay at width 1, timed first, against 804 at width 2
    and 1993 at width 5)."""
    cols = sorted((g for g in graphs if "kernels" in g), key=lambda g: int(g["graph"].split()[2][1:]))  # by width
    if not cols:
        return []
    widest = cols[-1]["kernels"]
    names = sorted({n for g in cols for n in g["kernels"]}, key=lambda n: -widest.get(n, [0, 0.0])[1])[:top]
    head = f"{'kernel (launches, µs per replay)':44s}" + "".join(f"{g['graph'].split()[2]:>14s}" for g in cols)
    cell = [[g["kernels"].get(n, [0, 0.0]) for g in cols] for n in names]
    return [head] + [f"{n[:44]:44s}" + "".join(f"{c:5d} {us:8.1f}" for c, us in row) for n, row in zip(names, cell)]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="qwen2.5-1.5b", choices=["qwen2.5-1.5b", "llama-7b", "tiny"])
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--ls", default="1,2,3,4", help="fixed draft lengths of the BASS rows")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--pipelined", default="1,2,regular",
                   help="the rounds profiled as the engine runs them: fixed draft lengths and/or 'regular'")
    p.add_argument("--top", type=int, default=8, help="kernels listed per profiled round")
    p.add_argument("--out", default="bench/results/")
    a = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    engine = build_engine(a.shape, device)
    prompt = random_prompt(engine.target.config.vocab_size, 160, seed=1)
    params = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=a.max_new_tokens, seed=0)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rounds = [round_ms(engine, prompt, a.k, params, L) for L in [None] + [int(x) for x in a.ls.split(",")]]
    graphs, pipelined = [], []
    if device == "cuda":
        for name, replay in engine_graphs(engine):
            if f"B{a.k} " not in name + " ":
                continue
            row = measure(name, replay)
            graphs.append({key: row[key] for key in ("graph", "nodes", "device_ms", "idle_us")})
            if name.startswith("target") and "slot0" in name:
                graphs[-1]["kernels"] = row["kernels"]
            if name.startswith("draft") and (name.endswith("DraftRule") or " chain " in name):
                lines = [f"{s:8.1f} {d:6.1f} {n}" for s, d, n in kernel_sequence(replay)]
                file = "draft_step_" + name.replace(" + ", "_").replace(" ", "_") + ".txt"
                (out / file).write_text("\n".join(lines) + "\n")
        for L in (None if x == "regular" else int(x) for x in a.pipelined.split(",") if x):
            kw = {} if L is None else dict(draft_length=DraftLengthConfig(policy="fixed", l0=L))
            pipelined.append(pipelined_round(engine, [prompt], a.k, params, "regular" if L is None else "bass",
                                             None if L is None else "model", out,
                                             "regular" if L is None else f"fixedL{L}", a.top, **kw))
    info = dict(device=device_line(engine.device), shape=a.shape, k=a.k, max_new_tokens=a.max_new_tokens,
                rounds=rounds, graphs=graphs, pipelined=pipelined)
    (out / "draft_step.json").write_text(json.dumps(info, indent=1))
    base = rounds[0]["ms_per_round"]
    lines = [info["device"], f"random-weight {a.shape} target + its draft, k = {a.k}, T 0.8, top-p 0.95",
             "L        ms/round   + over regular"]
    lines += [f"{'regular' if r['L'] is None else r['L']!s:8s} {r['ms_per_round']:8.3f} "
              f"{r['ms_per_round'] - base:+10.3f}" for r in rounds]
    lines += ["graph                                      nodes  device ms"]
    lines += [f"{g['graph'][:42]:42s} {g['nodes']:6d} {g['device_ms']:10.3f}" for g in graphs]
    lines += kernel_table(graphs)
    lines += [f"pipelined {r['label']:10s} wall {r['plain_ms_per_round']:.3f} ms/round, GPU busy "
              f"{r['gpu_busy_ms_per_round']:.3f}" for r in pipelined if r["gpu_busy_ms_per_round"] is not None]
    (out / "draft_step.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return info


if __name__ == "__main__":
    main()
