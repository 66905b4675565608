"""Real weights: regular decoding vs BASS with every drafter vs single-sequence speculative decoding.

    python -m bench.real_bench --target embedded --prompts 8 --ks 1,8,32 --out bench/results/
    python -m bench.real_bench --target tiny-folder --ks 2 --max-new-tokens 8 --prompts 1  (CPU)

One model load (the target, and the trained draft by default: EngineConfig(draft="auto")); HumanEval
prompts, each a batch of k samples of one prompt (the paper's setting). Rows, largest k first:

  at every k   regular; BASS with each drafter the engine offers (`Engine.available_drafters()`, or
               --drafters); single-sequence speculative decoding with the best drafter at that k;
  at --policy-k  BASS with the best drafter under each draft-length policy (fixed L = 3, the default, is the
               drafter row itself; the paper's heuristic from l0 = 7; fixed L for each --fixed-l), and BASS with the
               best drafter without and with the streaming verdict tester (`bass.eval.verdicts`: each candidate
               goes to the sandbox the moment it finishes), the sandbox in its own process (as the app and
               the eval run it) and in the engine's process, the three interleaved prompt by prompt;
               and regular and BASS with the best drafter with the engine's look-ahead (`bass.decode.pipeline`:
               on CUDA, a round launched before the round before it is read) and without it,
               the four interleaved; with --cublas-pair, regular and BASS with the best drafter with the
               projections the engine tuned at load (`bass.models.linear`) and with cuBLAS throughout (a
               second engine over the same models), the four interleaved; with --chain-pair, the same with
               each of the feature draft's proposals as one graph (the engine's default) and step by step
               (`Tuning.proposal_graphs`). With --interleave,
               regular and the drafters' rows at each k are measured interleaved too (one `measure`), where by
               default each row runs after the one before.

Every configuration (`real_passes.measure`) runs one untimed warm-up pass over the prompts first (CUDA graphs
captured, caches sized; before each k's rows, BASS drafts each length of `bass.engine.WARM_LENGTHS` once at that
batch, `Engine.warm_draft_lengths`); then --repeats passes over the prompts, each row counting the graphs captured
inside their decoding (`captures_passes`, and which shapes: `captured_shapes_passes`, also in the log) and those
captured between their generations (`deferred_captures_passes`, and which: `deferred_shapes_passes`),
and the row is the median pass by ms/token/seq (of an even number, the faster middle one: of two passes,
the faster). Pass p samples with seed + p (pass 0 the warm-up), every row of a pass with the same seed, so that
a row's median is the middle of several draws of the samples (with one seed, a fixed length decodes the same
texts in every pass); --same-seeds samples every pass with --seed (each row's pass-to-pass spread is then the
machine's alone).
Columns (docs/design.md §5, over all sequences of all prompts of that pass):

  ms/tok/seq  mean over sequences of (finish time since decoding began / generated tokens)
  tok/s       generated tokens / decoding wall time (throughput)
  x_reg       regular's ms/tok/seq at the same k / the row's (> 1: faster than regular decoding)
  accept      accepted / proposed draft tokens;  tok/round: tokens per sequence per verify pass
  mean L      mean draft length per round (0 for regular)

and in the log and JSON, on CUDA, each pass's host stalls (`BatchStats.host_stalls`): the time rounds lost while
the host was held up, as a share of the pass's decoding time. They strike any row (on the H100, 5-20 ms of host
time in about 1 % of the rounds of some runs and next to none in others), so a row's passes that disagree
by more than these shares say the machine, not the method.

Writes real_bench.json (rows, device line, dates, arguments), real_bench.png (`bench/plot_real.py`),
real_bench.txt, and with --profile profile_<label>.txt (torch.profiler tables of a few regular steps and
a few BASS rounds at --policy-k) plus a per-round split (drafter / verify / host; `bench.profile.rounds`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bass.config import HUMANEVAL_STOPS, DraftLengthConfig, EngineConfig, SamplingParams
from bass.engine import Engine
from bass.engine.tuning import Tuning
from bass.events import GenerationResult
from bass.models import linear
from bass.runtime.device import device_line
from bench.plot_real import DEFAULT_POLICY, add_ratios, format_table, plot, policy_label, row_label
from bench.profile.rounds import round_breakdown
from bench.real_passes import Runner, measure


class Bench:
    """The engine, prompts and settings shared by every row of one run."""

    def __init__(self, a: argparse.Namespace):
        from sandbox import load_humaneval

        self.a = a
        self.engine = Engine(EngineConfig(target=a.target, draft=None if a.draft == "none" else a.draft,
                                          drafter="auto", backend=a.backend, device=a.device, dtype=a.dtype))
        self.second: dict[str, Engine] = {}  # engines over the same models, made on first use (`_second_runner`)
        self.problems = load_humaneval()[:a.prompts]
        self.prompts = [p.prompt for p in self.problems]
        self.params = SamplingParams(temperature=0.0 if a.greedy else a.temperature,
                                     top_p=1.0 if a.greedy else a.top_p, max_new_tokens=a.max_new_tokens,
                                     stop=HUMANEVAL_STOPS if a.stops else (), seed=a.seed)

    def pass_params(self, p: int) -> SamplingParams:
        """The sampling of pass p (0: the warm-up): the run's seed + p, so that every row draws new samples in
        every pass; with --same-seeds the run's seed in every pass (module docstring: why)."""
        return self.params if self.a.same_seeds else dataclasses.replace(self.params, seed=self.params.seed + p)

    def runner(self, method: str, k: int, drafter: str | None = None,
               draft_length: DraftLengthConfig | None = None, look_ahead: bool | None = None) -> Runner:
        """`look_ahead`: the engine's look-ahead for this runner's generations (None: the engine's own)."""
        kw = dict(k=k, method=method, draft_length=draft_length, look_ahead=look_ahead)
        if drafter is not None:
            kw["drafter"] = drafter
        return lambda i, p: self.engine.generate(self.prompts[i], **kw, params=self.pass_params(p))

    def cublas_runner(self, method: str, k: int, drafter: str | None = None) -> Runner:
        """A runner on a second engine over the same models whose projections are all cuBLAS: its own CUDA
        graphs, captured under `bass.models.linear.cublas_only` (the first engine's keep the tuned kernels)."""
        return self._second_runner("cublas", Tuning(tune_projections=False), linear.cublas_only, method, k, drafter)

    def stepwise_runner(self, method: str, k: int, drafter: str | None = None) -> Runner:
        """A runner on a second engine over the same models that makes each proposal step by step, one graph per
        draft step (`Tuning.proposal_graphs=False`), where the first chains them in one graph."""
        return self._second_runner("stepwise", Tuning(proposal_graphs=False), contextlib.nullcontext, method, k,
                                   drafter)

    def _second_runner(self, name: str, tuning: Tuning, context: Callable, method: str, k: int,
                       drafter: str | None) -> Runner:
        """A runner on the second engine `name`: the bench's config with `tuning`, over the same models, each
        of its generations (and its priming) inside `context()`; made, primed and its draft lengths warmed
        (`Engine.warm_draft_lengths`) on first use."""
        if name not in self.second:
            eng = self.engine
            self.second[name] = Engine(eng.config, target=eng.target, draft=eng.draft, tuning=tuning)
            with context():  # primed and warmed as the first engine's drafting rows are (`run_all`)
                self.prime(k, [drafter or eng.default_drafter], self.second[name])
                self.second[name].warm_draft_lengths(self.prompts[0], self.params, k=k, method="bass",
                                                     drafter=drafter or eng.default_drafter)
        engine = self.second[name]
        kw = dict(k=k, method=method) | ({} if drafter is None else {"drafter": drafter})

        def run(i: int, p: int) -> GenerationResult:
            with context():
                return engine.generate(self.prompts[i], **kw, params=self.pass_params(p))
        return run

    def verdict_runner(self, k: int, drafter: str, where: str) -> Runner:
        """BASS whose finished candidates go to the sandbox in the background (`bass.eval.humaneval`), as the app does;
        `where`: "service" (the sandbox's own process, as the app and the eval run it) or "in-process"."""
        from bass.eval.humaneval import stream_with_verdicts
        from bass.eval.verdicts import VerdictWorker
        from sandbox import run_humaneval, shared_service

        if where == "service":
            run_humaneval = shared_service().run_humaneval  # noqa: F811 (the same function, in the helper)

        def run(i: int, p: int) -> GenerationResult:
            prob = self.problems[i]

            def check(items):
                return [o.all_passed for o in run_humaneval([prob] * len(items), [text for _, text in items])]

            result, _ = stream_with_verdicts(self.engine, prob.prompt, VerdictWorker(check, bool), k=k,
                                             params=self.pass_params(p), method="bass", drafter=drafter)
            return result
        return run

    def prime(self, k: int, drafters: list[str], engine: Engine | None = None) -> None:
        """Size the persistent KV arenas of `engine` (default: the bench's) for the longest prompt at the largest
        k before any graph is captured (a later, larger request would reallocate them under captured graphs:
        see bench/gpu_bench.py)."""
        engine = engine or self.engine
        longest = max(range(len(self.prompts)), key=lambda i: len(engine.encode(self.prompts[i])[0]))
        for d in drafters:
            for ev in engine.stream(self.prompts[longest], k=k, params=self.params, method="bass", drafter=d):
                if ev.kind == "round":  # both prefills done: both arenas allocated
                    break




def row(method: str, k: int, drafter: str | None, policy: str | None, numbers: dict, **extra) -> dict:
    return dict(method=method, k=k, drafter=drafter, policy=policy, **extra, **numbers)


def run_all(b: Bench, ks: list[int], drafters: list[str], policy_k: int, log=print) -> list[dict]:
    """Every row of the module docstring, largest k first."""
    a, rows = b.a, []

    def add(r: dict, t: float) -> None:
        rows.append(r)
        stalls = r.get("host_stall_share_passes") or []
        held = "" if None in stalls or not stalls else \
            ", host stalls " + " / ".join(f"{100 * x:.1f}" for x in stalls) + " % of each pass"
        log(f"  {row_label(r)} k={r['k']}: {r['ms_per_token']:.2f} ms/token/seq, {r['throughput']:.0f} tok/s "
            f"({time.perf_counter() - t:.1f} s{held})")
        for p, shapes in enumerate(r.get("captured_shapes_passes") or [], 1):
            if shapes:  # a timed pass waited for these captures: which shapes the warm-up missed
                log(f"    pass {p} captured: " + ", ".join(shapes))

    def add_pair(k: int, best: str, kind: str, runners: dict[str, tuple[Runner, dict]]) -> None:
        """Regular decoding and BASS with `best`, each in two settings, measured interleaved: one row per
        runner, its setting in its row (`extra`), the rows tagged pair=kind (`plot_real.add_ratios`)."""
        t = time.perf_counter()
        pair = measure({name: run for name, (run, _) in runners.items()}, len(b.prompts), a.repeats)
        for name, (_, extra) in runners.items():
            method = name.split()[0]
            add(row(method, k, best if method == "bass" else None, DEFAULT_POLICY if method == "bass" else None,
                    pair[name], **extra, pair=kind), t)

    for k in ks:
        t = time.perf_counter()
        for d in drafters:  # every length at batch k first: smaller batches run in its graphs (`bass.runtime.graphs`)
            b.engine.warm_draft_lengths(b.prompts[0], b.params, k=k, method="bass", drafter=d)
        log(f"  warm-up of every draft length at k={k}: {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()  # the rows' seconds below are their own measurement's
        if a.interleave:  # regular and every drafter in one `measure`, prompt by prompt
            runners = {"regular": b.runner("regular", k)} | {d: b.runner("bass", k, d) for d in drafters}
            got = measure(runners, len(b.prompts), a.repeats)
            add(row("regular", k, None, None, got["regular"], interleaved=True), t)
            for d in drafters:
                add(row("bass", k, d, DEFAULT_POLICY, got[d], interleaved=True), t)
        else:
            add(row("regular", k, None, None, measure({"r": b.runner("regular", k)}, len(b.prompts),
                                                      a.repeats)["r"]), t)
            for d in drafters:
                t = time.perf_counter()
                add(row("bass", k, d, DEFAULT_POLICY, measure({"r": b.runner("bass", k, d)}, len(b.prompts),
                                                                a.repeats)["r"]), t)
        bass_rows = [r for r in rows if r["method"] == "bass" and r["k"] == k]  # the drafters' rows
        best = min(bass_rows, key=lambda r: r["ms_per_token"])["drafter"]
        if k in a.single_ks:
            t = time.perf_counter()
            add(row("single", k, best, DEFAULT_POLICY, measure({"r": b.runner("single", k, best)}, len(b.prompts),
                                                                 a.repeats)["r"]), t)
        if k != policy_k or a.no_policy_rows:
            continue
        policies = [DraftLengthConfig(policy="heuristic", l0=7)] + \
            [DraftLengthConfig(policy="fixed", l0=n) for n in a.fixed_l]
        for cfg in policies:  # (the default's row, "auto", is the drafter's own)
            t = time.perf_counter()
            add(row("bass", k, best, policy_label(cfg), measure({"r": b.runner("bass", k, best, cfg)}, len(b.prompts),
                                                   a.repeats)["r"]), t)
        other = not b.engine.look_ahead  # the engine's look-ahead setting against the other
        if not a.no_look_ahead_pair:
            add_pair(k, best, "look-ahead", {
                "regular": (b.runner("regular", k), {"look_ahead": not other}),
                "bass": (b.runner("bass", k, best), {"look_ahead": not other}),
                "regular other": (b.runner("regular", k, look_ahead=other), {"look_ahead": other}),
                "bass other": (b.runner("bass", k, best, look_ahead=other), {"look_ahead": other})})
        if a.cublas_pair:  # the tuned projections against cuBLAS throughout
            add_pair(k, best, "projections", {
                "regular": (b.runner("regular", k), {"projections": "tuned"}),
                "bass": (b.runner("bass", k, best), {"projections": "tuned"}),
                "regular cublas": (b.cublas_runner("regular", k), {"projections": "cuBLAS"}),
                "bass cublas": (b.cublas_runner("bass", k, best), {"projections": "cuBLAS"})})
        if a.chain_pair:  # each proposal as one graph against one graph per draft step
            add_pair(k, best, "proposals", {
                "regular": (b.runner("regular", k), {"proposals": "chained"}),
                "bass": (b.runner("bass", k, best), {"proposals": "chained"}),
                "regular stepwise": (b.stepwise_runner("regular", k), {"proposals": "step by step"}),
                "bass stepwise": (b.stepwise_runner("bass", k, best), {"proposals": "step by step"})})
        if not a.no_verdicts:
            t = time.perf_counter()
            where = ("service", "in-process")
            pair = measure({"without": b.runner("bass", k, best), **{w: b.verdict_runner(k, best, w) for w in where}},
                           len(b.prompts), a.repeats)
            for name in ("without", *where):
                add(row("bass", k, best, DEFAULT_POLICY, pair[name], verdicts=None if name == "without" else name,
                        pair="verdicts"), t)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="embedded", help="'embedded', a .gguf file, a folder (tests: a tiny model)")
    p.add_argument("--draft", default="auto", help="'auto' (the trained draft that ships for the target), a "
                   "model spec, a trained draft file, or 'none'")
    p.add_argument("--drafters", default=None, help="comma-separated; default: every drafter the engine offers")
    p.add_argument("--backend", default="auto", help="auto: ragged on CUDA, torch on the CPU (Engine.backend)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help="auto: bf16 on CUDA; on the CPU what `linear.cpu_dtype` measures")
    p.add_argument("--prompts", type=int, default=8, help="the first N HumanEval prompts")
    p.add_argument("--ks", default="1,8,32")
    p.add_argument("--single-ks", default=None, help="ks with a single-sequence row (default: every k)")
    p.add_argument("--policy-k", type=int, default=8, help="k of the policy and verdict-tester rows")
    p.add_argument("--fixed-l", default="4", help="fixed draft lengths compared at --policy-k")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--greedy", action="store_true", help="argmax decoding instead of T/top-p sampling")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--stops", action="store_true", help="stop at HumanEval's stop strings (default: every "
                   "sequence runs to --max-new-tokens or EOS, so the methods do comparable work)")
    p.add_argument("--seed", type=int, default=0, help="pass p (0: the warm-up) samples with seed + p")
    p.add_argument("--same-seeds", action="store_true", help="every pass samples with --seed: "
                   "a fixed length repeats its texts")
    p.add_argument("--cublas-pair", action="store_true", help="at --policy-k, regular and BASS with the tuned "
                   "projections against cuBLAS throughout (bass.models.linear), interleaved")
    p.add_argument("--chain-pair", action="store_true", help="at --policy-k, regular and BASS with each proposal "
                   "replayed as one graph (the default) and step by step (a second engine), interleaved")
    p.add_argument("--interleave", action="store_true", help="at every k, regular and BASS with each drafter "
                   "measured interleaved prompt by prompt, not one row after another (a shared CPU's speed drifts "
                   "by 10 %% over minutes)")
    p.add_argument("--no-verdicts", action="store_true", help="skip the with/without verdict-tester pair")
    p.add_argument("--no-look-ahead-pair", action="store_true", help="skip the look-ahead pair (its four rows, "
                   "interleaved, took 34 of a k = 8 run's 60 s of passes on an H200)")
    p.add_argument("--no-policy-rows", action="store_true", help="skip every row at --policy-k past the drafters' "
                   "own (the heuristic, --fixed-l and the pairs): a CPU run in minutes")
    p.add_argument("--profile", action="store_true", help="also profile regular steps and BASS rounds at --policy-k")
    p.add_argument("--out", default="bench/results/")
    a = p.parse_args(argv)
    a.ks = sorted({int(k) for k in a.ks.split(",")}, reverse=True)  # largest first: the arenas never regrow
    a.single_ks = a.ks if a.single_ks is None else [int(k) for k in a.single_ks.split(",") if k]
    a.fixed_l = [int(n) for n in a.fixed_l.split(",") if n]
    return a


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    b = Bench(a)
    eng = b.engine
    drafters = a.drafters.split(",") if a.drafters else eng.available_drafters()
    policy_k = a.policy_k if a.policy_k in a.ks else a.ks[len(a.ks) // 2]
    info = dict(device=device_line(eng.device), torch=torch.__version__, target=eng.target.name,
                draft=eng.draft.name if eng.draft else None, drafters=drafters, backend=eng.backend,
                dtype=str(eng.dtype), prompts=len(b.prompts), max_new_tokens=a.max_new_tokens, policy_k=policy_k,
                sampling="greedy" if a.greedy else f"T {a.temperature}, top-p {a.top_p}", repeats=a.repeats,
                seeds="the same in every pass" if a.same_seeds else "seed + pass",
                started=started, args={k: v for k, v in vars(a).items()}, load_s=time.perf_counter() - t0)
    print(info["device"], f"| target {info['target']}, draft {info['draft']}, drafters {drafters}", flush=True)
    if eng.projection_report:
        info["projections"] = eng.projection_report
        print("projections (bass.models.linear.tune, at load):\n" + linear.describe(eng.projection_report), flush=True)
    b.prime(max(a.ks + [policy_k]), drafters)
    rows = run_all(b, a.ks, drafters, policy_k, log=lambda s: print(s, flush=True))
    add_ratios(rows)
    if a.profile:
        best = min((r for r in rows if r["method"] == "bass" and r["k"] == policy_k and r["policy"] == DEFAULT_POLICY),
                   key=lambda r: r["ms_per_token"])["drafter"]
        few = dataclasses.replace(b.params, max_new_tokens=min(a.max_new_tokens, 32))
        info["profile"] = [round_breakdown(eng, b.prompts[0], policy_k, few, m, best if m == "bass" else None,
                                           out, f"{m}_k{policy_k}") for m in ("regular", "bass")]
    info.update(finished=datetime.datetime.now().isoformat(timespec="seconds"), seconds=time.perf_counter() - t0)
    results = dict(info=info, rows=rows)
    (out / "real_bench.json").write_text(json.dumps(results, indent=1, default=str))
    try:
        plot(results, out / "real_bench.png")
    except Exception as err:  # the numbers matter more than the picture
        info["plot_error"] = f"{type(err).__name__}: {err}"
    header = (f"{info['device']}\nreal weights: {info['target']} (draft {info['draft']}), {info['prompts']} HumanEval "
              f"prompts x k, {a.max_new_tokens} new tokens, {info['sampling']}, "
              f"median of {a.repeats} passes{' (lower middle)' if a.repeats % 2 == 0 else ''}; "
              f"total {info['seconds']:.0f} s")
    prof = [f"profile {p['label']}: {p['wall_ms_per_round']:.2f} ms/round = drafter {p['draft_ms_per_round']:.2f}"
            f" + verify {p['verify_ms_per_round']:.2f} + host {p['host_ms_per_round']:.2f}"
            for p in info.get("profile", [])]
    text = "\n".join([header, *prof, format_table(rows)])
    (out / "real_bench.txt").write_text(text + "\n")
    print(text)
    return results


if __name__ == "__main__":
    main()
