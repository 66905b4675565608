"""Stage 3: train the draft — plain next-token training or distillation from the target.

Windows of `seq_len` tokens are drawn from the corpus (and, for a `completion_share` of each batch, from the
target's own completions). The two losses, per position t of a window:

    next-token   L = −log q(x_{t+1} | x_≤t)
    distill      L = KL(p_target(· | x_≤t) ‖ q(· | x_≤t)) = Σ_v p(v) (log p(v) − log q(v))
    feature      L = Σ_{s=1..S} λ_2^(s−1) KL(p_{t+1} ‖ q(f̂ˢ_{t+1})) + λ_f SmoothL1(f̂¹_{t+1}, f_{t+1})
                     (− λ_α Σ_s λ_2^(s−1) α(p, q(f̂ˢ)): the acceptance objective, `acceptance_loss`, when λ_α > 0)

For the feature draft (EAGLE-style), f̂¹ is predicted from the target's true features (draft step 1) and
f̂ˢ from the draft's own f̂ˢ⁻¹ in their place (draft step s, as while drafting), S = `unroll_steps`. Each
step attends to what the draft's cache would hold at that step: the target's entries before the chain and
its own along it (`FeatureStudent.unroll`, EAGLE-3's training-time test). Step s's weight decays as λ_2^(s−1)
because a draft reaches step s only if the steps before it were accepted; the feature regression keeps f̂
usable as the next step's input.

over the target's whole vocabulary, p computed on the fly by the frozen target (the teacher). Forward KL
teaches q the teacher's full distribution: greedy acceptance needs its argmax, sampled acceptance
(1 − TV(p, q) per token) its mass everywhere; the hard next token only says which one was written.

AdamW with linear warm-up and cosine decay over the steps that fit in `minutes` (timed on the first
steps), from random weights or from an earlier run's file (`init`: one more cycle, a fresh schedule). A run
longer than one command stops after `segment_minutes` and continues from its kept state in the next
(`draft_training.checkpoint`): one schedule, the same steps as a run straight through.
Every `eval_every` steps: held-out loss and the draft's top-1 agreement with the target (the greedy
acceptance of a one-token draft), printed with the elapsed time.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bass.config import SamplingParams
from draft_training.checkpoint import RunState, check_state, load_state, save_state
from draft_training.config import DraftShape, TrainConfig
from draft_training.corpus import load_tokens
from draft_training.model import HEAD_ALIGN, FeatureStudent, Student, Teacher
from draft_training.vocab_loss import fused, kl, step_loss, teacher_targets
from draft_training.windows import Windows, heldout_windows, load_completions

SAMPLED = SamplingParams(temperature=0.8, top_p=0.95)  # the sampled setting (T 0.8, top-p 0.95)
UNTIMED = 10**9  # a timed run's length in steps until its first steps are timed (`cfg.minutes`; max_steps: fixed)


@dataclass
class TrainReport:
    loss: str
    steps: int
    tokens: int
    seconds: float
    history: list[dict] = field(default_factory=list)  # one row per evaluation
    # feature loss: `sampled_acceptance` of the final draft ("final") and of the file it started from ("init")
    acceptance: dict[str, list[dict]] = field(default_factory=dict)
    stopped: bool = False  # the call's segment ended before the run: its state is kept to resume from

    @property
    def final(self) -> dict:
        return self.history[-1] if self.history else {}


def teacher_from(target: torch.nn.Module) -> Teacher:
    """The engine's loaded target as a cache-free teacher, sharing its tensors."""
    with torch.device("meta"):
        teacher = Teacher(target.config)
    teacher.load_state_dict(target.state_dict(), strict=True, assign=True)
    return teacher.eval().requires_grad_(False)


def new_student(teacher: Teacher, shape: DraftShape, seed: int, feature: bool = False,
                vocab: torch.Tensor | None = None, align: int = HEAD_ALIGN) -> Student | FeatureStudent:
    """A freshly initialised draft on the teacher's device, float32 weights: a feature draft with `feature`,
    over the proposal vocabulary `vocab` (target ids) if given, its head's rows padded to a multiple of `align`."""
    device = teacher.head.device
    if shape.fused_layer and not (feature and shape.fused_layer < teacher.config.num_layers):
        raise ValueError(f"--fused-layer {shape.fused_layer}: only a feature draft reads a target layer, and the "
                         f"layer must lie inside the target (1 .. {teacher.config.num_layers - 1})")
    torch.manual_seed(seed)
    config = shape.model_config(teacher.config)
    if feature:
        student = FeatureStudent(config, teacher.embed_tokens.weight, teacher.head, vocab, shape.fused_layer, align)
    else:
        student = Student(config, teacher.embed_tokens.weight, teacher.head)
    student.to(device=device, dtype=torch.float32)
    for name, p in student.named_parameters():
        if "norm" in name:
            torch.nn.init.ones_(p)
        elif name.endswith("bias"):
            torch.nn.init.zeros_(p)
        else:
            torch.nn.init.normal_(p, 0.0, 0.02)
    if not feature:
        student.init_projections()
    return student


def load_weights(student: Student | FeatureStudent, path: Path) -> None:
    """Start `student` from a draft file's weights (`TrainConfig.init`): a second cycle of training continues
    the first, whose 10-minute command could not run longer. The file must hold this student's kind and
    shapes; its proposal vocabulary, if any, is not a weight (the export derives it again). A fused feature
    draft may start from an unfused one: its fc gains zero columns for the tapped layer, so it starts as the
    file's draft and learns to read the new input from there."""
    from safetensors.torch import load_file

    tensors = {k: v for k, v in load_file(str(path)).items() if k != "vocab"}
    own = student.state_dict()
    fc = tensors.get("fc.weight")
    if getattr(student, "fused_layer", 0) and fc is not None and fc.shape[1] == 2 * student.target_hidden:
        tensors["fc.weight"] = torch.cat([fc, fc.new_zeros(fc.shape[0], student.target_hidden)], 1)
    wrong = sorted(k for k in own.keys() | tensors.keys() if k not in own or k not in tensors
                   or own[k].shape != tensors[k].shape)
    if wrong:
        raise ValueError(f"{path} is not a draft of this kind and shape (differs in {wrong[:4]}): start from a "
                         "file the same --loss and shape flags wrote, or leave --init out")
    student.load_state_dict(tensors)  # copied into the float32 parameters


def feature_logits(student: FeatureStudent, teacher: Teacher, window: torch.Tensor, cfg: TrainConfig
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """The feature draft's unrolled steps over `window` [B, T+1]: (f, f̂¹, t_logits, [s¹, s², ...]) with f
    [B, T, H] the target's features, f̂¹ [B, T-1, H], the target's logits [B, T-1, V] (bf16 on CUDA) over its
    whole vocabulary, and the draft's at steps 1 .. `cfg.unroll_steps` [B, T-1, V'] over its proposal
    vocabulary (`student.vocab`)."""
    x = window[:, :-1]
    autocast = torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=x.device.type == "cuda")
    with torch.no_grad(), autocast:
        f = teacher.hidden(x, student.fused_layer)  # [B, T, H]: f_t at position t
        tapped = None if teacher.tapped is None else teacher.tapped[:, :-1]  # [B, T-1, H]: a fused draft's m_t
        t_logits = f[:, 1:] @ teacher.head.T  # [B, T-1, V]: p of the token after x_{t+1}
    with autocast:
        # entries (f_t, x_{t+1}) -> f̂_{t+1}; later steps read the draft's own predictions
        steps = student.unroll(f[:, :-1], x[:, 1:], cfg.unroll_steps, cfg.true_context, tapped)
        logits = [student.logits(fs) for fs in steps]  # bf16 on CUDA: the losses read them in float32
    return f, steps[0], t_logits, logits


def feature_loss(student: FeatureStudent, teacher: Teacher, window: torch.Tensor, cfg: TrainConfig,
                 metrics: bool = True) -> tuple[torch.Tensor, dict]:
    """The "feature" loss (module docstring) over `window` [B, T+1]; with `metrics`, agreement at each draft
    step with the target's most likely token over its whole vocabulary (a draft with a proposal vocabulary S
    never agrees where that token lies outside S). With S the target's p in the KL is p restricted to S and
    renormalised, the q that accepts most among those that propose from S."""
    f, f1, t_logits, steps = feature_logits(student, teacher, window, cfg)
    vocab = student.vocab
    compiled = cfg.compile and not metrics  # a training step's shapes; an evaluation's run eagerly, compiled once less
    with torch.no_grad():  # log p_S [B, T-1, V'], and the nucleus [B, T-1, k] where the objective asks for it
        t_logp, p, pos = fused(teacher_targets, t_logits, compiled)(
            t_logits, vocab, SAMPLED if cfg.acceptance_weight else None)
    value = cfg.feature_weight * F.smooth_l1_loss(f1.float(), f[:, 1:].float())
    temperature = SAMPLED.temperature * cfg.acceptance_scale
    for i, s in enumerate(steps):  # step s weighs λ_2^(s-1): KL(p_S ‖ q_s) − λ_α α(p̃, q_s)
        ell = fused(step_loss, s, compiled)(s, t_logp, p, pos, temperature, cfg.acceptance_weight)
        value = value + cfg.second_step_weight ** i * ell
    if not metrics:
        return value, {}
    best = t_logits.argmax(-1)

    def ids(s: torch.Tensor) -> torch.Tensor:
        return s.argmax(-1) if vocab is None else vocab[s.argmax(-1)]

    return value, {("agree" if i == 0 else f"agree_step{i + 1}"): float((ids(s) == best).float().mean())
                   for i, s in enumerate(steps)}


def window_loss(student: Student | FeatureStudent, teacher: Teacher, window: torch.Tensor, loss: str,
                cfg: TrainConfig | None = None, metrics: bool = True) -> tuple[torch.Tensor, dict]:
    """Mean loss over the positions of `window` [B, T+1], and with `metrics` its top-1 agreement with the
    target. A training step asks for none: each would be an argmax over the vocabulary and a host sync."""
    if loss == "feature":
        return feature_loss(student, teacher, window, cfg or TrainConfig(loss="feature"), metrics)
    x, y = window[:, :-1], window[:, 1:]
    autocast = torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=x.device.type == "cuda")
    with autocast:
        s_logits = student.logits(student.hidden(x)).float()  # [B, T, V]
    s_logp = F.log_softmax(s_logits, -1)
    with torch.no_grad(), autocast:
        t_logits = (teacher.hidden(x) @ teacher.head.T).float()  # [B, T, V]
    t_logp = F.log_softmax(t_logits, -1)
    if loss == "distill":
        value = kl(t_logp, s_logp)
    else:
        value = F.nll_loss(s_logp.flatten(0, 1), y.flatten())
    if not metrics:
        return value, {}
    agree = (s_logits.argmax(-1) == t_logits.argmax(-1)).float().mean()
    next_acc = (s_logits.argmax(-1) == y).float().mean()
    return value, {"agree": float(agree), "next_token_acc": float(next_acc)}


def train(teacher: Teacher, corpus: Path, completions: Path | Sequence[Path] | None, heldout: Path,
          shape: DraftShape, cfg: TrainConfig, log=print, vocab: torch.Tensor | None = None,
          state_file: Path | None = None, resume: bool = False) -> tuple[Student, TrainReport]:
    """Train one draft under `cfg`; return it and the report of its evaluations. `vocab`: a feature draft's
    proposal vocabulary (target ids), trained as it ships; None: every token. A call that reaches
    `cfg.segment_minutes` (or `segment_steps`) before the run's end stops and keeps the run's state in
    `state_file` (`report.stopped`); `resume` continues the run kept there (`draft_training.checkpoint`)."""
    if vocab is not None and cfg.loss != "feature":
        raise ValueError("only a feature draft proposes from a reduced vocabulary: leave vocab out for this loss")
    if (resume or cfg.segment_minutes or cfg.segment_steps) and state_file is None:
        raise ValueError("a run in segments keeps its state in a file: give state_file")
    if state_file is not None:
        check_state(state_file, resume)
    device = teacher.head.device
    student = new_student(teacher, shape, cfg.seed, feature=cfg.loss == "feature", vocab=vocab)
    if cfg.init is not None and not resume:  # a resumed run's weights come from its kept state
        load_weights(student, Path(cfg.init))
    comp = load_completions(completions)
    data = Windows(load_tokens(corpus), comp, cfg.completion_share, cfg.seed)
    if comp is not None:
        log(f"[train {cfg.loss}] completions: {comp.size:,} tokens")
    eval_windows = heldout_windows(heldout, cfg, device)
    opt = new_optimizer(student, cfg)
    report = TrainReport(cfg.loss, 0, 0, 0.0)
    measure_acceptance = cfg.loss == "feature" and bool(cfg.draft_temperature_scales)
    settings = run_settings(cfg, shape, vocab, comp)
    step, total, spent = 0, cfg.max_steps or UNTIMED, 0.0
    if resume:
        run = load_state(state_file, student, opt, settings)
        step, total, spent = run.step, run.total, run.seconds
        data.rng.bit_generator.state = run.rng
        report.history, report.acceptance = run.history, run.acceptance
        log(f"[train {cfg.loss}] resumed at step {step}/{total} after {spent:.0f} s of training")
    elif cfg.init is not None:  # the cycle's starting point, on the windows its end is measured on
        report.history.append({**evaluate(student, teacher, eval_windows, cfg), "step": 0})
        if measure_acceptance:
            report.acceptance["init"] = sampled_acceptance(student, teacher, eval_windows,
                                                           cfg.draft_temperature_scales, cfg=cfg)
        log(f"[train {cfg.loss}] from {cfg.init}: {report.history[0]}")
    t0, timed_from, first = time.perf_counter(), None, step
    while step < total:
        if step == 5:  # compile/allocator warm-up done: time from here
            if device.type == "cuda":
                torch.cuda.synchronize()
            timed_from = time.perf_counter()
        if step == 25 and cfg.max_steps is None:
            if device.type == "cuda":
                torch.cuda.synchronize()
            per_step = (time.perf_counter() - timed_from) / 20
            # the evaluations every `eval_every` steps share the budget (one timed here, not logged)
            t_eval = time.perf_counter()
            evaluate(student, teacher, eval_windows, cfg)
            per_step_in_all = per_step + (time.perf_counter() - t_eval) / cfg.eval_every
            left = cfg.minutes * 60 - spent - (time.perf_counter() - t0)
            total = max(26, int(left / per_step_in_all) + 25)
            log(f"[train {cfg.loss}] {per_step * 1000:.0f} ms/step ({per_step_in_all * 1000:.0f} with the "
                f"evaluations), {cfg.batch_size * cfg.seq_len / per_step:,.0f} tokens/s: {total} steps fit in "
                f"{cfg.minutes} min")
        lr = cfg.lr * _schedule(step, total, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        value = train_step(student, teacher, opt, data.batch(cfg.batch_size, cfg.seq_len, device), cfg)
        step += 1
        if step % cfg.eval_every == 0 or step == total:
            row = evaluate(student, teacher, eval_windows, cfg)
            row.update(step=step, train_loss=round(float(value.detach()), 4), lr=lr,
                       seconds=round(spent + time.perf_counter() - t0, 1))
            report.history.append(row)
            log(f"[train {cfg.loss}] step {step}/{total} {row}")
        # a segment stops only once the schedule's length is laid out (before step 25 of a timed run): a run resumed
        # past that step would never lay it out
        if total < UNTIMED and step < total and _segment_over(cfg, step - first, time.perf_counter() - t0):
            seconds = round(spent + time.perf_counter() - t0, 1)
            save_state(state_file, student, opt, RunState(step, total, seconds, data.rng.bit_generator.state,
                                                          report.history, report.acceptance), settings)
            report.steps, report.tokens, report.seconds = step, step * cfg.batch_size * cfg.seq_len, seconds
            report.stopped = True
            log(f"[train {cfg.loss}] segment over at step {step}/{total} ({seconds:.0f} s of training): the run's "
                f"state is in {state_file}; the same command with --resume continues it")
            return student.eval(), report
    report.steps, report.tokens = step, step * cfg.batch_size * cfg.seq_len
    if measure_acceptance:
        report.acceptance["final"] = sampled_acceptance(student, teacher, eval_windows, cfg.draft_temperature_scales,
                                                        cfg=cfg)
        log(f"[train {cfg.loss}] held-out sampled acceptance (T {SAMPLED.temperature}, top-p {SAMPLED.top_p}) by "
            f"draft temperature scale: {report.acceptance}")
    report.seconds = round(spent + time.perf_counter() - t0, 1)
    if resume:  # the run is over: a later --resume must not continue it again
        state_file.unlink()
    return student.eval(), report


def run_settings(cfg: TrainConfig, shape: DraftShape, vocab: torch.Tensor | None,
                 completions: np.ndarray | None = None) -> dict:
    """What a resumed run must share with the stopped one (`checkpoint.load_state` compares them): its settings,
    shape and proposal vocabulary, and how many completion tokens it reads (a kept file forgotten or added on a
    resume would train another run)."""
    ids = None if vocab is None else hashlib.sha256(vocab.cpu().numpy().astype(np.int64).tobytes()).hexdigest()
    return {**asdict(cfg), "shape": asdict(shape), "vocab": ids,
            "completion_tokens": 0 if completions is None else int(completions.size)}


def _segment_over(cfg: TrainConfig, steps: int, seconds: float) -> bool:
    """Whether this call's segment of the run has reached its steps or minutes."""
    return (cfg.segment_steps is not None and steps >= cfg.segment_steps) or (
        cfg.segment_minutes is not None and seconds >= cfg.segment_minutes * 60)


def new_optimizer(student: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW (β 0.9 / 0.95) at `cfg.lr`, weight decay on the matrices only (not on norms and biases)."""
    decay = [p for p in student.parameters() if p.ndim == 2]
    keep = [p for p in student.parameters() if p.ndim < 2]
    fused = next(student.parameters()).device.type == "cuda"
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": keep, "weight_decay": 0}],
                             lr=cfg.lr, betas=(0.9, 0.95), fused=fused)


def train_step(student: Student | FeatureStudent, teacher: Teacher, opt: torch.optim.Optimizer,
               batch: torch.Tensor, cfg: TrainConfig) -> torch.Tensor:
    """One optimiser step on `batch` [B, T+1]: the loss's gradient summed over micro-batches of
    `cfg.micro_batch` windows (they bound the [rows, T, V] logits the losses materialise), clipped to norm 1.
    Returns the last micro-batch's loss (not synchronised: reading it waits for the device)."""
    opt.zero_grad(set_to_none=True)
    for part in batch.split(cfg.micro_batch):
        value, _ = window_loss(student, teacher, part, cfg.loss, cfg, metrics=False)
        (value * part.shape[0] / batch.shape[0]).backward()
    torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
    opt.step()
    return value.detach()


@torch.no_grad()
def evaluate(student: Student | FeatureStudent, teacher: Teacher, windows: list[torch.Tensor], cfg: TrainConfig
             ) -> dict:
    """Held-out loss, top-1 agreement with the target and next-token accuracy, averaged over `windows`."""
    rows = [window_loss(student, teacher, part, cfg.loss, cfg) for w in windows for part in w.split(4)]
    out = {"heldout_loss": sum(float(v) for v, _ in rows) / len(rows)}
    for key in rows[0][1]:
        out[key] = round(sum(r[key] for _, r in rows) / len(rows), 4)
    out["heldout_loss"] = round(out["heldout_loss"], 4)
    return out


def expected_acceptance(p: torch.Tensor, s_logits: torch.Tensor, params: SamplingParams, scale: float = 1.0,
                        vocab: torch.Tensor | None = None) -> torch.Tensor:
    """A draft step's expected acceptance under lossless sampling at each position [...] of the target's
    processed distribution p [..., V] (`bass.decode.sampling.process_logits` of its logits under `params`).

    Speculative sampling accepts x ~ q with probability min(1, p(x) / q(x)), so a step accepts with

        α = E_{x~q} min(1, p(x) / q(x)) = Σ_v min(p(v), q(v)) = 1 − TV(p, q),

    p being the target's processed distribution (temperature T, top-p) and q the draft's at temperature
    `scale`·T with the same top-p. Sampling stays exact for any q the verify is given, so the scale is free.
    With `vocab` the draft's logits [..., V'] are those of target ids vocab (q = 0 elsewhere).
    """
    from bass.decode.sampling import process_logits

    q = process_logits(s_logits.float(), replace(params, temperature=params.temperature * scale))
    return torch.minimum(p if vocab is None else p[..., vocab], q).sum(-1)


@torch.no_grad()
def sampled_acceptance(student: FeatureStudent, teacher: Teacher, windows: list[torch.Tensor],
                       scales: tuple[float, ...], params: SamplingParams = SAMPLED,
                       cfg: TrainConfig | None = None) -> list[dict]:
    """`expected_acceptance` of the feature draft on `windows`, per draft temperature scale τ: one row per τ,
    averaged over the positions at each unrolled draft step (`cfg.unroll_steps`; step s fed the draft's own
    f̂, as while drafting).

    Why scales: a draft trained with forward KL is mass-covering, flatter than the target where it agrees
    with it, and a lower τ puts more of q where p is. q here is over the draft's proposal vocabulary with exact
    top-p; the engine's draft applies top-p within its 256 most likely tokens (nearly the same q).
    """
    from bass.decode.sampling import process_logits

    cfg = cfg or TrainConfig(loss="feature")
    sums = {tau: [0.0] * cfg.unroll_steps for tau in scales}
    n = 0
    for part in (w for ws in windows for w in ws.split(4)):
        _, _, t_logits, steps = feature_logits(student, teacher, part, cfg)
        p = process_logits(t_logits.float(), params)  # [b, T-1, V], once for every scale and step
        for tau in scales:
            for i, s in enumerate(steps):
                sums[tau][i] += float(expected_acceptance(p, s, params, tau, student.vocab).sum())
        n += t_logits.shape[0] * t_logits.shape[1]
    return [{"scale": tau, **{f"step{i + 1}": round(a / n, 4) for i, a in enumerate(row)}}
            for tau, row in sums.items()]


def best_scale(rows: list[dict]) -> float:
    """The draft temperature scale of `sampled_acceptance`'s rows that accepts most over the draft steps."""
    return max(rows, key=lambda r: sum(v for k, v in r.items() if k.startswith("step")))["scale"]


def _schedule(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine from 1 down to `min_lr_ratio`."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
