"""What a step of the draft's training costs, and where it goes, at the embedded target's shapes without its weights.

    PYTHONPATH=. python bench/train_step_bench.py --out $OUT          (GPU: about a minute, no upload)
    PYTHONPATH=. python bench/train_step_bench.py --shape tiny --seq-len 32 --batch-size 4 --variants 2/eager,4 \
        --steps 2 --rounds 1                                            (CPU plumbing)

A training step's cost depends on the shapes, not on the weights' values: a teacher of Qwen2.5-Coder-1.5B's
shapes with random bf16 weights (`bass.models.loader.build_random`) and the feature draft of the shipped shape
(`draft_training.config.FEATURE_SHAPE`, over a proposal vocabulary of 32,769 ids, as shipped) run the same kernels
on the same sizes as the real pair. So this runs on a bare GPU machine, without the 1.1 GB GGUF. (Its first runs,
on 2026-11-28, drew 32,768 ids, an aligned size the real run does not have: the real step then took 144 ms where
this read 88, and `nopad` with 32,769 ids read 143.98 ms against 95.45 padded, on 2026-11-29.) So that such a gap
shows at once, `--target` (the GGUF, once uploaded) puts the real weights in the teacher and `--work` the
pipeline's token files in the windows (`--shape tiny` picks the tiny draft, for the CPU test):

    PYTHONPATH=. python bench/train_step_bench.py --target $GGUF --work /var/tmp/draft --out $OUT
                                                        (after the completions stage: it reads completions.bin)

Each variant runs `draft_training.train.train_step`, the step the pipeline runs, on its own student and
optimiser, each step on fresh windows drawn as the pipeline draws them (`Windows`, from random token files).
A variant is MICRO/option/option/...: windows per forward and backward (`TrainConfig.micro_batch`), then any of
the vocabulary-sized loss terms `compile`d (the default) or `eager` (`TrainConfig.compile`,
`draft_training.vocab_loss`); the teacher on the engine's `fused` kernels (the default) or on their `torch` forms
(`layers.FUSED_KERNELS` off for the step; the student's forward, which asks for a gradient, takes the torch forms
either way); the windows copied to the device from pinned memory without blocking (`async`, the
default) or from pageable memory (`sync`: the copy waits for the step before); the draft's head rows padded to a
multiple of 64 (`pad`, the default) or not (`nopad`: with the shipped vocabulary's 32,769 ids the logits' rows are
not 16-byte aligned; `FeatureStudent`); each under every acceptance weight asked. The variants are timed in
turn, `--rounds` times over (`step_costs.timed_ms`: each round after one untimed step), and each row is the
median of its rounds (ms per step of `--batch-size` windows of `--seq-len` + 1 tokens, and tokens per second),
with its peak device memory and its time against the first row, all from one process. Then the teacher alone
(its forward and logits, no gradient) on either kernels, and one step of the last variant under torch.profiler:
the top operators by device time (`train_step_profile.txt`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_round import profiler_tables, sync  # noqa: E402
from step_costs import timed_ms  # noqa: E402

from bass.device import device_line  # noqa: E402
from bass.models import layers  # noqa: E402
from bass.models.loader import build_random, load_model  # noqa: E402
from bass.synthetic import TARGETS  # noqa: E402
from draft_training.config import FEATURE_SHAPE, DraftShape, TrainConfig  # noqa: E402
from draft_training.corpus import load_tokens  # noqa: E402
from draft_training.model import HEAD_ALIGN  # noqa: E402
from draft_training.train import new_optimizer, new_student, teacher_from, train_step  # noqa: E402
from draft_training.windows import Windows  # noqa: E402

OPTIONS = ("compile", "eager", "fused", "torch", "async", "sync", "pad", "nopad")  # the first of each pair: the default
TINY_SHAPE = DraftShape(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64)


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark (module docstring); returns what it writes to train_step_bench.json."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=("qwen2.5-1.5b", "tiny"), default="qwen2.5-1.5b")
    p.add_argument("--target", default=None,
                   help="a model spec (`--target` of the pipeline, e.g. the GGUF's path): its real weights as the "
                        "teacher instead of --shape's random ones")
    p.add_argument("--work", default=None,
                   help="the pipeline's work folder: its train.bin and completions.bin as the windows' tokens")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    p.add_argument("--seq-len", type=int, default=TrainConfig.seq_len)
    p.add_argument("--unroll", type=int, default=4)
    p.add_argument("--variants", default="4/eager/torch/sync/nopad,16/eager/torch/sync/nopad,16/eager/fused/sync/nopad,"
                   "16/compile/fused/sync/nopad,16/compile/fused/async/nopad,16",
                   help="comma-separated MICRO/option/... (module docstring); the first is the baseline")
    p.add_argument("--acceptance-weights", default="2.0", help="comma-separated λ_α (the shipped cycles' 2.0)")
    p.add_argument("--draft-vocab", type=int, default=32_769, help="ids the draft proposes from (as shipped)")
    p.add_argument("--steps", type=int, default=5, help="steps per timed round of a variant")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    saved = layers.FUSED_KERNELS  # the torch variants switch the process's kernels off: put the switch back
    try:
        return _bench(args)
    finally:
        layers.FUSED_KERNELS = saved


def _bench(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if args.target:
        model = load_model(args.target, device=device, dtype=dtype).model
        config = model.config
    else:
        config = TARGETS[args.shape]
        model = build_random(config, device=device, dtype=dtype, seed=0)
    teacher = teacher_from(model)
    gen = torch.Generator().manual_seed(0)
    size = min(args.draft_vocab, config.vocab_size)
    vocab = torch.randperm(config.vocab_size, generator=gen)[:size].sort().values
    shape = FEATURE_SHAPE if args.shape != "tiny" else TINY_SHAPE
    if args.work:
        corpus, completions = (load_tokens(Path(args.work) / name) for name in ("train.bin", "completions.bin"))
    else:
        rng = np.random.default_rng(0)
        corpus, completions = (rng.integers(0, config.vocab_size, 50 * args.seq_len, dtype=np.int32)
                               for _ in range(2))
    windows = Windows(corpus, completions, TrainConfig.completion_share, seed=0)
    batch = windows.batch(args.batch_size, args.seq_len, device)  # the teacher's timing and the profile

    variants = []
    for w in (float(x) for x in args.acceptance_weights.split(",")):
        for spec in args.variants.split(","):
            mb, *options = spec.split("/")
            if unknown := set(options) - set(OPTIONS):
                raise SystemExit(f"a variant is MICRO/option/... with options from {OPTIONS}, got {sorted(unknown)}")
            cfg = TrainConfig(loss="feature", batch_size=args.batch_size, micro_batch=int(mb), seq_len=args.seq_len,
                              unroll_steps=args.unroll, acceptance_weight=w, lr=3e-4, compile="eager" not in options)
            align = 1 if "nopad" in options else HEAD_ALIGN
            student = new_student(teacher, shape, 0, feature=True, vocab=vocab, align=align)
            variants.append(dict(label=f"{spec}, λ_α {w:g}", cfg=cfg, student=student, fused="torch" not in options,
                                 non_blocking="sync" not in options, opt=new_optimizer(student, cfg), s=[]))

    def step(v: dict) -> None:
        layers.FUSED_KERNELS = v["fused"]
        fresh = windows.batch(args.batch_size, args.seq_len, device, non_blocking=v["non_blocking"])
        train_step(v["student"], teacher, v["opt"], fresh, v["cfg"])

    line = device_line(device)
    what = f"{args.target} teacher (real weights)" if args.target else f"{args.shape} teacher (random weights)"
    what += f", windows of {args.work}" if args.work else ", random windows"
    print(f"{line}\n{what}, feature draft {shape.hidden_size} wide x "
          f"{shape.num_layers} blocks, proposal vocabulary {size}, {args.batch_size} x {args.seq_len} tokens a "
          f"step, unroll {args.unroll}", flush=True)
    for v in variants:  # warm-up: allocator, cuBLAS heuristics, Triton and torch.compile
        t0 = time.perf_counter()
        for _ in range(2):
            step(v)
        sync()
        v["warmup_s"] = time.perf_counter() - t0
    for _ in range(args.rounds):
        for v in variants:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            v["s"].append(timed_ms(lambda v=v: step(v), args.steps) / 1e3)
            if device.type == "cuda":
                v["peak_gb"] = torch.cuda.max_memory_allocated() / 2**30
    rows = []
    base = statistics.median(variants[0]["s"])
    for v in variants:
        ms = 1e3 * statistics.median(v["s"])
        rows.append(dict(variant=v["label"], ms_per_step=round(ms, 2), rounds_ms=[round(1e3 * s, 2) for s in v["s"]],
                         tokens_per_s=round(args.batch_size * args.seq_len / ms * 1e3),
                         vs_first=round(ms / (1e3 * base), 3), peak_gb=round(v.get("peak_gb", 0.0), 1),
                         warmup_s=round(v["warmup_s"], 1)))

    result = dict(device=line, teacher=what, shape=args.shape, batch=args.batch_size, seq_len=args.seq_len,
                  unroll=args.unroll, draft_vocab=size, date=time.strftime("%Y-%m-%d"), rows=rows)
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    last = variants[-1]
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        def teacher_part():
            for part in batch[:, :-1].split(last["cfg"].micro_batch):
                teacher.hidden(part) @ teacher.head.T
        result["teacher_ms_per_step"] = {}
        for fused in (False, True):
            layers.FUSED_KERNELS = fused
            ms = timed_ms(teacher_part, args.steps)
            result["teacher_ms_per_step"]["fused" if fused else "torch"] = round(ms, 2)
    if not args.no_profile:
        layers.FUSED_KERNELS = last["fused"]
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            train_step(last["student"], teacher, last["opt"], batch, last["cfg"])
            sync()
        tables = profiler_tables(prof, rows=30)
        if out:
            (out / "train_step_profile.txt").write_text(f"{line}\none step of {last['label']}\n\n{tables}\n")

    print(f"\n{'variant':44s} {'ms/step':>9s} {'tokens/s':>10s} {'vs first':>9s} {'peak GiB':>9s} {'warm-up s':>9s}"
          "  rounds (ms)")
    for r in rows:
        print(f"{r['variant']:44s} {r['ms_per_step']:9.2f} {r['tokens_per_s']:10,d} {r['vs_first']:9.3f} "
              f"{r['peak_gb']:9.1f} {r['warmup_s']:9.1f}  {r['rounds_ms']}")
    t = result["teacher_ms_per_step"]
    print(f"the teacher alone (forward and logits, no grad), ms per step: torch forms {t['torch']:.2f}, "
          f"fused kernels {t['fused']:.2f}")
    if out:
        (out / "train_step_bench.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
