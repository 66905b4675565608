"""The cost policy's acceptance model, replayed offline on what a long fixed draft accepted.

    PYTHONPATH=. python bench/policy_replay.py log --target <gguf> --backend ragged --prompts 164 --k 8 --L 8 \
        --out bench/results/policy_replay_log.json                       (on the GPU: about 2 minutes)
    PYTHONPATH=. python bench/policy_replay.py replay bench/results/policy_replay_log.json   (CPU, seconds)

`log` runs BASS at a fixed draft length L over HumanEval prompts and keeps, per round, how many drafts each
live sequence accepted (a_b) of how many it was asked (n_b). A draft's first L' tokens are drawn, and tested by
the verify, the same way however many come after them, so the same round drafted at L' <= L accepts min(a_b, L')
and emits min(a_b, L') + 1 tokens, in distribution (the round's uniforms are laid out by L, so not draw for draw):
every length's outcome is known for every logged round. (What the rounds after it would have been is not: the
replay keeps the logged text.)

`replay` walks the logged rounds in order and lets each policy pick a round's L from what it saw before it: fixed
lengths; the engine's acceptance estimate (`bass.acceptance`, carried from request to request as `PolicyMemory`
does) with the argmax of `bass.acceptance.best_length` over a known cost table, calibrated as the engine's is
(and beside it uncalibrated); and the oracle, the best L of each
round for the whole log's tokens per ms, knowing every outcome (no policy can beat it). With --margins, the estimate
also chooses with each length margin m (`DraftLengthConfig.length_margin`): the shortest L whose predicted tokens
per ms is within m of the best. A round of length L costs c(L) (--costs, ms; the default is what rounds at batch 8
cost on the H100 in the traced runs of `real_bench_2026-11-26_h100{x,y}_*`). It prints tokens per ms of each, and
the estimate's calibration per chosen L: drafts accepted over those it predicted (below 1: it expected more of that
length than it got).
Costs are fixed here, so the replay isolates the acceptance model from what the live policy also does
(timing rounds, probing, warming up): a policy that leads here and trails live loses there.

The replay weighs every round alike (tokens per ms), while the benchmark's headline, ms/token/seq, charges a round
to every sequence still live: a round at batch 8 counts eight times what a round with one straggler left does. So
each policy is also *simulated* (`simulate`): the logged rounds are turned into each sequence's text, its length n
and the positions where the draft failed (a round that started at p and accepted a < n_b drafts failed at p + a; one
that took all it was asked leaves no failure), and a request is decoded again from position 0 with the policy's own
lengths: a round at L from position p accepts min(L, f − p) drafts, f the next failure, and a sequence leaves the
batch at its length. Greedy, a draft's proposals depend only on the prefix, so this is exact for any L but at one
kind of position: the one after a round that took every draft it was asked, whose match the log cannot tell (taken
as a match). Sampled, it takes the logged text and its failures as fixed, where a rerun would draw both anew.
Every round costs c(L) whatever the batch (on the H100 a round at B = 1 costs what one at B = 8 does, the traced
`round_ms`), L being the longest draft any sequence still gets (none past its text's end), and each policy reports
the mean over sequences of finish time / length (ms/token/seq; prefill left out) and tokens per ms.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bass.acceptance import AcceptanceEstimator, best_length  # noqa: E402
from bass.config import DraftLengthConfig, SamplingParams  # noqa: E402

H100_COSTS_MS = (1.745, 1.98, 2.11, 2.22, 2.47, 2.65, 2.77, 2.87, 3.10)  # L = 0 .. 8 at batch 8 (L = 1 read 1.94-2.0)

Round = tuple[list[int], list[int], list[int]]  # (sequence ids, drafts asked n_b, drafts accepted a_b)
Chooser = Callable[[AcceptanceEstimator | None, Round], int]


def log(a: argparse.Namespace) -> dict:
    """Run the fixed-L BASS requests of the module docstring; return the log (one list of rounds per request)."""
    from bass.config import EngineConfig
    from bass.device import device_line
    from bass.engine import Engine
    from sandbox import load_humaneval

    engine = Engine(EngineConfig(target=a.target, draft=a.draft, backend=a.backend, device=a.device))
    params = SamplingParams(temperature=a.temperature, top_p=a.top_p, max_new_tokens=a.max_new_tokens, seed=a.seed)
    requests = []
    for prob in load_humaneval()[:a.prompts]:
        rounds = []
        for ev in engine.stream(prob.prompt, k=a.k, params=params, method="bass", drafter="model",
                                draft_length=DraftLengthConfig(policy="fixed", l0=a.L)):
            ups = [u for u in ev.updates if u.proposed] if ev.kind == "round" else []
            if ups:
                rounds.append([[u.seq for u in ups], [u.proposed for u in ups], [u.accepted for u in ups]])
        requests.append(rounds)
    return dict(device=device_line(engine.device), L=a.L, k=a.k, temperature=a.temperature, top_p=a.top_p,
                max_new_tokens=a.max_new_tokens, requests=requests)


def replay(requests: list[list[Round]], costs: np.ndarray, choose: Chooser,
           estimator: Callable[[tuple | None], AcceptanceEstimator] | None = None) -> tuple[float, dict]:
    """(tokens per ms, {L: [drafts accepted, predicted]}) of `choose` over the logged rounds; with `estimator`,
    a fresh estimate per request from the one before it (`PolicyMemory.learn`), fed each round's outcome."""
    tokens = ms = 0.0
    calibration: dict[int, list[float]] = {}
    memory = None
    for rounds in requests:
        est = estimator(memory) if estimator is not None else None
        for rnd in rounds:
            seqs, asked, acc = rnd
            L = min(choose(est, rnd), len(costs) - 1)
            got = [min(x, L) for x in acc]
            if est is not None and L > 0:
                c = calibration.setdefault(L, [0.0, 0.0])
                c[0] += sum(got)
                c[1] += est.expected_accepted(seqs, [min(n, L) for n in asked])
            tokens += sum(got) + len(seqs)
            ms += costs[L]
            if est is not None:
                est.observe(seqs, [min(n, L) for n in asked], got)
        if est is not None:
            memory = est.memory()
    return tokens / ms, calibration


Text = tuple[int, list[int]]  # one sequence's logged text: (length in tokens, sorted positions the draft failed at)


def texts(rounds: list[Round]) -> list[Text]:
    """Each logged sequence's text, from its rounds in order (module docstring, simulated)."""
    pos: dict[int, int] = {}
    fails: dict[int, list[int]] = {}
    for seqs, asked, acc in rounds:
        for q, n, a in zip(seqs, asked, acc, strict=True):
            p = pos.get(q, 0)
            if a < n:
                fails.setdefault(q, []).append(p + a)
            pos[q] = p + a + 1
    return [(pos[q], fails.get(q, [])) for q in sorted(pos)]


def simulate(requests: list[list[Round]], costs: np.ndarray, choose: Chooser,
             estimator: Callable[[tuple | None], AcceptanceEstimator] | None = None) -> dict:
    """Decode each request's texts again under `choose` (module docstring, simulated): {"ms_per_token_seq", the
    mean over sequences of finish time / tokens; "tokens_per_ms"; "mean_L"}. The estimate is fed and carried from
    request to request as in `replay`."""
    per_seq, tokens, ms, lengths, memory = [], 0, 0.0, [], None
    for rounds in requests:
        est = estimator(memory) if estimator is not None else None
        text = texts(rounds)
        pos, clock = [0] * len(text), 0.0
        live = [i for i, (n, _) in enumerate(text) if n > 0]
        while live:
            L = min(choose(est, (live, [], [])), len(costs) - 1)
            asked = [max(0, min(L, text[i][0] - pos[i] - 1)) for i in live]  # no draft past the text's end
            L = max(asked)  # what the round drafts (and pays for) once every sequence is cut to its text
            got = []
            for i, n_b in zip(live, asked, strict=True):
                n, fails = text[i]
                j = bisect.bisect_left(fails, pos[i])
                got.append(min(n_b, (fails[j] if j < len(fails) else n) - pos[i]))
                pos[i] += got[-1] + 1
            clock += costs[L]
            lengths.append(L)
            if est is not None:
                est.observe(live, asked, got)
            for i in live:
                if pos[i] >= text[i][0]:
                    per_seq.append(clock / text[i][0])
            live = [i for i in live if pos[i] < text[i][0]]
        tokens += sum(n for n, _ in text)
        ms += clock
        if est is not None:
            memory = est.memory()
    return dict(ms_per_token_seq=float(np.mean(per_seq)), tokens_per_ms=tokens / ms, mean_L=float(np.mean(lengths)))


def oracle(requests: list[list[Round]], costs: np.ndarray, iterations: int = 50) -> float:
    """The most tokens per ms any choice of L per round could have made of the logged rounds, knowing each
    round's outcome: max Σ tokens / Σ ms over one L per round, by Dinkelbach's iteration (for a ratio λ, each
    round takes the L of most tokens − λ·ms; λ then becomes the ratio that choice makes, which rises to the
    optimum). No policy that sees only the past can beat it."""
    rounds = [r for req in requests for r in req]
    Ls = np.arange(len(costs))
    tok = np.array([[sum(min(x, L) for x in r[2]) + len(r[2]) for L in Ls] for r in rounds], dtype=float)  # [R, L]
    lam = 0.0
    for _ in range(iterations):
        pick = np.argmax(tok - lam * costs[None, :], axis=1)
        new = tok[np.arange(len(rounds)), pick].sum() / costs[pick].sum()
        if new <= lam + 1e-12:
            break
        lam = new
    return lam


def policies(costs: np.ndarray, cfg: DraftLengthConfig, margins: tuple[float, ...] = ()
             ) -> dict[str, tuple[Chooser, Callable | None]]:
    """Every policy `replay` compares: name -> (chooser, estimator factory or None)."""
    out: dict[str, tuple[Chooser, Callable | None]] = {
        f"fixed L={L}": ((lambda e, r, L=L: L), None) for L in range(len(costs))}
    def fresh(cfg: DraftLengthConfig) -> Callable:
        return lambda memory: AcceptanceEstimator(cfg, *(() if memory is None else memory))

    def choose(margin: float = 0.0) -> Chooser:  # the live policy's argmax, over the calibrated reach
        return lambda e, r: best_length(e.expected_tokens(r[0], len(costs) - 1), costs, margin)

    out["acceptance estimate"] = (choose(), fresh(cfg))
    out["estimate, uncalibrated"] = (choose(), fresh(dataclasses.replace(cfg, calibrate=False)))
    for m in margins:
        out[f"estimate, margin {m:g}"] = (choose(m), fresh(cfg))
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    lg = sub.add_parser("log")
    lg.add_argument("--target", default="embedded")
    lg.add_argument("--draft", default="auto", help="'auto' (the target's shipped draft), or a draft model's spec")
    lg.add_argument("--backend", default="torch")
    lg.add_argument("--device", default="auto")
    lg.add_argument("--prompts", type=int, default=164)
    lg.add_argument("--k", type=int, default=8)
    lg.add_argument("--L", type=int, default=8)
    lg.add_argument("--temperature", type=float, default=0.8)
    lg.add_argument("--top-p", type=float, default=0.95)
    lg.add_argument("--max-new-tokens", type=int, default=128)
    lg.add_argument("--seed", type=int, default=0)
    lg.add_argument("--out", required=True)
    rp = sub.add_parser("replay")
    rp.add_argument("logs", nargs="+")
    rp.add_argument("--costs", default=",".join(map(str, H100_COSTS_MS)), help="ms per round for L = 0, 1, ..")
    rp.add_argument("--first", type=int, default=None, help="only each log's first N requests")
    rp.add_argument("--passes", type=int, default=1, help="the requests this many times in turn, the estimate's "
                    "memory carried (real_bench's passes over its 8 prompts: --first 8 --passes 5)")
    rp.add_argument("--margins", default="", help="length margins for the estimate's extra rows, e.g. 0.01,0.02")
    rp.add_argument("--out", default=None, help="write the table as JSON here")
    a = p.parse_args(argv)
    if a.command == "log":
        out = log(a)
        Path(a.out).write_text(json.dumps(out))
        print(f"{len(out['requests'])} requests, {sum(map(len, out['requests']))} rounds -> {a.out}")
        return out
    requests, top = [], None
    for path in a.logs:
        d = json.loads(Path(path).read_text())
        requests += d["requests"][:a.first]
        top = d["L"] if top is None else min(top, d["L"])
    requests *= a.passes
    costs = np.array([float(x) for x in a.costs.split(",")])[:top + 1]  # no length past the logged one
    print(f"{len(requests)} requests, {sum(map(len, requests))} rounds, logged at L = {top}; "
          f"costs {[float(c) for c in costs]} ms")
    table = {"oracle": dict(tokens_per_ms=oracle(requests, costs))}
    print(f"  {'oracle':20s} {table['oracle']['tokens_per_ms']:.4f} tokens/ms")
    margins = tuple(float(m) for m in a.margins.split(",") if m)
    for name, (choose, estimator) in policies(costs, DraftLengthConfig(), margins).items():
        rate, cal = replay(requests, costs, choose, estimator)
        sim = simulate(requests, costs, choose, estimator)
        table[name] = dict(tokens_per_ms=rate, calibration={L: c[0] / c[1] for L, c in sorted(cal.items()) if c[1]},
                           simulated=sim)
        shown = " ".join(f"L={L} {c[0] / c[1]:.3f} ({c[1]:.0f})" for L, c in sorted(cal.items()) if c[1])
        print(f"  {name:20s} {rate:.4f} tokens/ms   simulated: {sim['ms_per_token_seq']:.4f} ms/token/seq, "
              f"{sim['tokens_per_ms']:.3f} tokens/ms, mean L {sim['mean_L']:.2f}"
              + (f"   calibration: {shown}" if shown else ""))
    if a.out:
        Path(a.out).write_text(json.dumps(table, indent=1))
    return table


if __name__ == "__main__":
    main()
