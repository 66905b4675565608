"""`python -m draft_training STAGE`: the pipeline's command line, a thin layer over its config dataclasses.

    python -m draft_training all --target embedded --work runs/draft      # every stage, then export
    python -m draft_training corpus --work runs/draft                      # CPU: token ids + prompts
    python -m draft_training completions --target X.gguf --work runs/draft # GPU: the target's completions
    python -m draft_training train --target X.gguf --work runs/draft --loss distill --out draft.safetensors
    python -m draft_training vocab --work runs/draft --out draft.safetensors  # CPU: its proposal vocabulary

`all` trains each of `--losses` (next-token, distill, feature: the last is the EAGLE-style feature draft)
for the same wall-clock budget, keeps the one whose top-1 agreement with the target on held-out files is
highest, and writes it to `--out` (default: the shipped file's path). A feature draft's file also gets its
proposal vocabulary, the corpus's `--draft-vocab` most frequent tokens (`draft_training.vocab`; 0: all).

Each cycle samples fresh completions (WORK/completions.bin); `--kept-completions` adds the files of earlier
cycles, kept, to what the training reads.

A run longer than one command goes in segments: `--minutes 17 --segment-minutes 9` stops after 9 minutes and
keeps the run (`draft_training.checkpoint`); the same command with `--resume` continues it to the end.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from bass.models.draft import DRAFT_FILE
from draft_training.checkpoint import check_state, state_path
from draft_training.config import LOSSES, CorpusConfig, DraftShape, TrainConfig, default_shape
from draft_training.vocab import DEFAULT_SIZE


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    try:
        stages = {"corpus": _corpus, "completions": _completions, "train": _train, "vocab": _vocab, "all": _all}
        return stages[args.stage](args, work)
    except ValueError as err:
        print(f"error: {err}")
        return 2


def _corpus(args, work: Path) -> int:
    from transformers import AutoTokenizer

    from bass.models.loader import _resolve
    from draft_training.corpus import build_corpus

    folder, _ = _resolve(args.target, None)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    cfg = CorpusConfig(max_train_tokens=args.max_train_tokens, prompts=args.prompts, seed=args.seed)
    manifest = build_corpus(cfg, work, tokenizer)
    print(f"[corpus] {manifest['tokens']} tokens, {manifest['files']} files, {manifest['prompts']} prompts "
          f"in {manifest['seconds']} s")
    return 0


def _load_target(spec: str):
    from bass.models.loader import load_model

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    t0 = time.perf_counter()
    loaded = load_model(spec, device=device, dtype=dtype)
    print(f"[load] {loaded.name} on {device} in {time.perf_counter() - t0:.1f} s")
    return loaded


def _completions(args, work: Path, loaded=None) -> int:
    from bass import Engine, EngineConfig
    from draft_training.completions import generate_completions

    loaded = loaded or _load_target(args.target)
    # backend "auto": the ragged kernel on a GPU (the reference attention is O(T^2) memory)
    engine = Engine(EngineConfig(target=args.target, draft=None, drafter="ngram"), target=loaded)
    eot = json.loads((work / "manifest.json").read_text())["end_of_text_id"]
    stats = generate_completions(engine, work / "prompts.jsonl", work / "completions.bin", samples=args.samples,
                                 max_new_tokens=args.max_new_tokens, seed=args.seed, end_of_text=eot,
                                 limit=args.limit_prompts)
    print(f"[completions] {stats}")
    (work / "completions.json").write_text(json.dumps(stats, indent=1))
    return 0


def _train_one(args, work: Path, loaded, loss: str, minutes: float, out: Path) -> dict:
    from draft_training.export import export_draft
    from draft_training.train import best_scale, teacher_from, train
    from draft_training.vocab import corpus_vocab

    base = default_shape(loss)
    hidden, heads = args.hidden or base.hidden_size, args.heads or base.num_heads
    shape = DraftShape(hidden_size=hidden, num_layers=args.layers or base.num_layers, num_heads=heads,
                       num_kv_heads=args.kv_heads or base.num_kv_heads, head_dim=hidden // heads,
                       intermediate_size=args.intermediate or base.intermediate_size, fused_layer=args.fused_layer)
    cfg = TrainConfig(loss=loss, minutes=minutes, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
                      seed=args.seed, max_steps=args.max_steps, eval_every=args.eval_every, init=args.init,
                      unroll_steps=args.unroll, true_context=args.context == "true",
                      acceptance_weight=args.acceptance_weight, acceptance_scale=args.acceptance_scale,
                      micro_batch=args.micro_batch, compile=not args.eager,
                      segment_minutes=args.segment_minutes, segment_steps=args.segment_steps)
    teacher = teacher_from(loaded.model)
    vocab = None  # a feature draft trains over the proposal vocabulary it ships with: (ids, recipe)
    if loss == "feature" and args.draft_vocab:
        vocab = corpus_vocab(work, args.draft_vocab, teacher.config.vocab_size, teacher.config.eos_token_ids)
    state = state_path(work, loss)  # a run in segments: where a stopped one is kept
    student, report = train(teacher, work / "train.bin", _completion_files(args, work), work / "heldout.bin",
                            shape, cfg, vocab=None if vocab is None else torch.from_numpy(vocab[0]),
                            state_file=state, resume=args.resume)
    if report.stopped:
        return {"stopped": True, "state": str(state), "steps": report.steps, "seconds": report.seconds}
    recipe = {"shape": asdict(shape), "train": asdict(cfg), "steps": report.steps, "tokens": report.tokens,
              "seconds": report.seconds, "final": report.final, "target": loaded.name}
    if vocab is not None:
        recipe["vocab"] = vocab[1]
    if report.acceptance.get("final"):  # the engine draws this draft's proposals at its best temperature scale
        recipe["draft_temperature"] = best_scale(report.acceptance["final"])
    sha = export_draft(student, teacher, out, recipe, vocab, recipe.get("draft_temperature"))
    summary = {**recipe, "file": str(out), "sha256": sha, "bytes": out.stat().st_size, "history": report.history,
               "sampled_acceptance": report.acceptance}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    print(f"[train {loss}] {report.steps} steps, {report.tokens:,} tokens in {report.seconds} s -> {out} "
          f"({out.stat().st_size / 1e6:.1f} MB, sha256 {sha}); held-out {report.final}")
    return summary


def _check_runs(args, work: Path, losses: list[str]) -> None:
    """A resume with nothing kept, a new run over a kept one, or a kept completions file that is not there,
    refused before the target loads."""
    for loss in losses:
        check_state(state_path(work, loss), args.resume)
    _completion_files(args, work)


def _completion_files(args, work: Path) -> list[Path]:
    """WORK/completions.bin where the completions stage wrote it, then every `--kept-completions` file."""
    kept = [Path(p) for p in args.kept_completions.split(",") if p]
    if missing := [str(p) for p in kept if not p.exists()]:
        raise ValueError(f"--kept-completions: no file {', '.join(missing)} (an earlier cycle's completions.bin, "
                         "kept): give the files that exist, or leave the flag out")
    fresh = work / "completions.bin"
    return ([fresh] if fresh.exists() else []) + kept


def _train(args, work: Path) -> int:
    _check_runs(args, work, [args.loss])
    loaded = _load_target(args.target)
    _train_one(args, work, loaded, args.loss, args.minutes, Path(args.out or work / f"draft-{args.loss}.safetensors"))
    return 0


def _vocab(args, work: Path) -> int:
    from bass.models.draft import file_sha256
    from draft_training.vocab import add_vocab

    out = Path(args.out or DRAFT_FILE)
    recipe = add_vocab(out, work, args.draft_vocab)
    print(f"[vocab] {out}: {recipe}; sha256 {file_sha256(out)}")
    return 0


def _all(args, work: Path) -> int:
    t0 = time.perf_counter()
    losses = args.losses.split(",")
    if unknown := set(losses) - set(LOSSES):
        raise ValueError(f"unknown losses {sorted(unknown)}: choose from {LOSSES}")
    _check_runs(args, work, losses)
    if not (work / "train.bin").exists():
        _corpus(args, work)
    loaded = _load_target(args.target)
    if not (work / "completions.bin").exists() and args.samples > 0:
        _completions(args, work, loaded)
    runs = {loss: _train_one(args, work, loaded, loss, args.minutes, work / f"draft-{loss}.safetensors")
            for loss in losses}
    if stopped := [loss for loss, run in runs.items() if run.get("stopped")]:
        print(f"[all] {', '.join(stopped)} stopped at the segment's end, nothing exported: the same command "
              f"with --resume continues; {time.perf_counter() - t0:.0f} s in all")
        return 0
    best = max(runs, key=lambda loss: runs[loss]["final"].get("agree", 0.0))
    out = Path(args.out or DRAFT_FILE)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(Path(runs[best]["file"]).read_bytes())
    out.with_suffix(".json").write_text(Path(runs[best]["file"]).with_suffix(".json").read_text())
    print(f"[all] kept {best} (held-out agreement "
          + ", ".join(f"{k} {v['final'].get('agree')}" for k, v in runs.items())
          + f") -> {out}, sha256 {runs[best]['sha256']}; {time.perf_counter() - t0:.0f} s in all")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m draft_training", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=("corpus", "completions", "train", "vocab", "all"))
    p.add_argument("--target", default="embedded", help="the target: 'embedded', a .gguf file or an HF folder")
    p.add_argument("--work", default="runs/draft", help="folder for the corpus, completions and trained files")
    p.add_argument("--out", default=None, help="where the trained draft goes (all: default the shipped file)")
    p.add_argument("--seed", type=int, default=0)
    c, t = CorpusConfig(), TrainConfig()
    p.add_argument("--max-train-tokens", type=int, default=c.max_train_tokens)
    p.add_argument("--prompts", type=int, default=c.prompts)
    p.add_argument("--samples", type=int, default=2, help="completions per prompt (0: none)")
    p.add_argument("--kept-completions", default="",
                   help="comma-separated token files of earlier cycles' completions (their completions.bin, kept), "
                   "trained on beside WORK/completions.bin: more of the target's own text at no decoding cost")
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--limit-prompts", type=int, default=None)
    p.add_argument("--loss", choices=LOSSES, default=t.loss)
    p.add_argument("--losses", default=",".join(LOSSES), help="all: the losses to train and choose from")
    p.add_argument("--minutes", type=float, default=t.minutes,
                   help="wall-clock budget of each training run (all its segments together)")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--segment-minutes", type=float, default=None,
                   help="a run longer than one command: stop this call after so many minutes of training and keep "
                   "the run's state in WORK/draft-LOSS.state.pt (its schedule spans all of --minutes)")
    p.add_argument("--segment-steps", type=int, default=None, help="as --segment-minutes, in steps")
    p.add_argument("--resume", action="store_true",
                   help="continue the run a segment stopped (the same command again, with this flag)")
    p.add_argument("--batch-size", type=int, default=t.batch_size)
    p.add_argument("--seq-len", type=int, default=t.seq_len)
    p.add_argument("--micro-batch", type=int, default=t.micro_batch,
                   help="windows per forward/backward (lower it where device memory is short)")
    p.add_argument("--eager", action="store_true", help="the feature loss's vocabulary terms without torch.compile")
    p.add_argument("--lr", type=float, default=t.lr)
    p.add_argument("--eval-every", type=int, default=t.eval_every)
    p.add_argument("--init", default=None, help="a draft file to continue from (its loss and shape; a fresh "
                   "schedule): a longer training in 10-minute runs")
    p.add_argument("--unroll", type=int, default=t.unroll_steps,
                   help="feature loss: the draft steps each window trains (each fed the step before's guesses)")
    p.add_argument("--context", choices=("true", "predicted"), default="true" if t.true_context else "predicted",
                   help="feature loss: what later steps attend to before their chain: the target's entries, as "
                   "drafting has them (true), or their own predictions (predicted: the first three cycles)")
    p.add_argument("--acceptance-weight", type=float, default=t.acceptance_weight,
                   help="feature loss: weight of the expected sampled acceptance subtracted beside the KL "
                   "(draft_training.acceptance_loss; 0: the KL alone)")
    p.add_argument("--acceptance-scale", type=float, default=t.acceptance_scale,
                   help="feature loss: the draft temperature, as a multiple of T, the acceptance term trains q at")
    p.add_argument("--draft-vocab", type=int, default=DEFAULT_SIZE,
                   help="a feature draft proposes from the corpus's N most frequent tokens (0: every token)")
    p.add_argument("--fused-layer", type=int, default=0,
                   help="feature loss, an experiment: the draft also reads the target's residual stream after this "
                   "many blocks (EAGLE-3's fused features; 0: none). The engine cannot run such a draft yet")
    # the draft's shape: by default the loss's own (config.default_shape)
    for flag in ("--hidden", "--layers", "--heads", "--kv-heads", "--intermediate"):
        p.add_argument(flag, type=int, default=None)
    return p
