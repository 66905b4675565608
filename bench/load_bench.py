"""Many visitors at once: HumanEval visitors served one at a time (today's app) or handed to the engine together.

    python -m bench.load_bench --target embedded --check-greedy --repeats 3 \
        --scenarios together:1:1,together:1,together:4,poisson:16:32,together:64
    python -m bench.load_bench --target TINY_FOLDER --device cpu --scenarios together:2 --k 2 --max-new-tokens 8

One engine, one run, every mode. Visitor i is one request: problem i (cycling) of the last --pool HumanEval problems
counted from the end (HumanEval/163, /162, ...; the other benchmarks time the first N), k candidates (--k, or a
queued scenario's K) at T --temperature / top-p --top-p, up to --max-new-tokens with HumanEval's stops, seed --seed + i.

Scenarios (t = 0: the start of a mode's run): together:N[:K] (N visitors at t = 0, of k = K if given: together:1:1 is
a lone request of one candidate); poisson:N:RATE (the first at 0, then exponential gaps of mean 1/RATE s, seeded by
--seed); queued:N:K (N requests of k = K at t = 0: the engine's admission by memory, where none may be lost and each
request counts the "queued" events, its place in line, it saw).
Modes: one-at-a-time (one server thread takes the visitors in arrival order and reads each stream to its end before
it starts the next, with --alone-method: today's app); batched-regular (each visitor's own thread calls
`Engine.stream` at its arrival, method "regular"); batched-bass (the same, method "bass"); the engine batches them.

Per scenario and mode: p50 / p95 over visitors of the time from arrival to all k done, and to the first passing
candidate (when it finished decoding; each candidate goes to the sandbox as it finishes, on a tester thread
(`bass.eval.verdicts`), never the timing thread; over the visitors with a pass); tokens/s = generated tokens of every
request / wall time from t = 0 to the last "done"; peak GPU memory (None on the CPU); requests done and lost (a stream
that raised, or gave no "done" within --timeout-s); a lone visitor's time (one-at-a-time's median service time); with
--check-greedy, how many requests decode greedily to the same tokens in a batched mode as each alone; the mean draft
length the engine chose over the rounds of every request (0 for regular decoding); the CUDA graphs captured while a
request decoded (the engine captures at load what its batches meet: `bass.engine.warmup`).

Each scenario runs in every mode --repeats times, the modes' order rotating from one repeat to the next; a row is the
run of median wall time, beside every run's wall time. Before timing (unless --no-warmup): each scenario once in each
mode with other seeds. Writes load_bench.json, .png (p50 / p95 bars) and .txt under --out; prints the table last,
with batched-bass's ratios to the other modes (wall time to all done, tokens/s) and its p95 over a lone visitor's
time.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import random
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bass import HUMANEVAL_STOPS, Engine, EngineConfig, GenerationResult, SamplingParams
from bass.config import check_k
from bass.eval.verdicts import VerdictWorker, submit_finished
from bass.runtime import graphs
from bass.runtime.device import device_line

MODES = ("one-at-a-time", "batched-regular", "batched-bass")
BATCHED_METHODS = {"batched-regular": "regular", "batched-bass": "bass"}
WARMUP_SEED = 10_000  # added to the warm-up's seeds: it samples other texts than the timed run
START_LEAD_S = 0.05  # t = 0 comes this long after the threads start, so that no visitor's thread starts late
SCENARIO_HELP = "together:N[:K], poisson:N:RATE (per second) or queued:N:K, e.g. together:4"


@dataclass(frozen=True)
class Scenario:
    """When the visitors arrive (module docstring)."""

    kind: str
    visitors: int
    rate: float | None = None  # poisson: arrivals per second
    k: int | None = None  # every request's k (queued: always given; otherwise --k where not given)

    def __post_init__(self) -> None:
        if self.kind not in ("together", "poisson", "queued"):
            raise ValueError(f"unknown scenario {self.kind!r}: use {SCENARIO_HELP}")
        if self.visitors < 1:
            raise ValueError(f"a scenario needs at least 1 visitor, got {self.visitors}")
        if (self.kind == "poisson") != (self.rate is not None) or (self.rate is not None and not self.rate > 0):
            raise ValueError(f"poisson takes a rate > 0 per second and only poisson takes one: use {SCENARIO_HELP}")
        if self.kind == "queued" and self.k is None or self.kind == "poisson" and self.k is not None:
            raise ValueError(f"queued takes its k, poisson none: use {SCENARIO_HELP}")
        if self.k is not None:
            check_k(self.k, "a queued scenario's K")

    @property
    def label(self) -> str:
        extra = f":{self.rate:g}" if self.rate is not None else f":{self.k}" if self.k is not None else ""
        return f"{self.kind}:{self.visitors}{extra}"

    def arrivals(self, seed: int) -> list[float]:
        """Seconds after t = 0: all 0, or a Poisson process of rate `rate` whose first arrival is at 0."""
        if self.kind != "poisson":
            return [0.0] * self.visitors
        rng, t, out = random.Random(seed), 0.0, [0.0]
        for _ in range(self.visitors - 1):
            t += rng.expovariate(self.rate)
            out.append(t)
        return out


def parse_scenario(text: str) -> Scenario:
    """A --scenarios item; a malformed one becomes argparse's message, not a traceback."""
    kind, *nums = text.strip().split(":")
    try:
        visitors = int(nums[0])
        if kind == "poisson" and len(nums) == 2:
            return Scenario(kind, visitors, rate=float(nums[1]))
        if kind in ("queued", "together") and len(nums) == 2:
            return Scenario(kind, visitors, k=int(nums[1]))
        if len(nums) != 1:
            raise ValueError(f"wrong number of fields: use {SCENARIO_HELP}")
        return Scenario(kind, visitors)
    except (ValueError, IndexError) as err:
        raise argparse.ArgumentTypeError(f"scenario {text!r}: {err}") from None


@dataclass(frozen=True)
class Request:
    """One visitor's request: its problem (`sandbox.Problem`), when it arrives, its k and sampling."""

    visitor: int
    problem: object
    arrival_s: float
    k: int
    params: SamplingParams


@dataclass(frozen=True)
class Served:
    """What serving one request gave; times in seconds since the mode's t = 0."""

    request: Request
    start_s: float  # when its stream was called
    done_s: float | None  # when its "done" event came (None: lost)
    result: GenerationResult | None
    error: str | None
    finished_at: dict[int, float]  # per sequence, when the event that finished it came
    queue_positions: tuple[int | None, ...]  # one per "queued" event
    worker: VerdictWorker | None  # its candidates' tests (None: untested)


def checker(problem) -> VerdictWorker:
    """A tester thread for one request's candidates: the sandbox's helper process, as the app and the eval use."""
    from sandbox import shared_service

    service = shared_service()

    def check(items):
        return [o.all_passed for o in service.run_humaneval([problem] * len(items), [text for _, text in items])]
    return VerdictWorker(check, bool)


def serve(engine: Engine, req: Request, t0: float, method: str, test: bool) -> Served:
    """Read one request's stream to its end; every event's time is read on arrival, off the tester's thread."""
    worker = checker(req.problem) if test else None
    start, done, result, error = time.perf_counter() - t0, None, None, None
    finished_at: dict[int, float] = {}
    positions: list[int | None] = []
    try:
        for ev in engine.stream(req.problem.prompt, k=req.k, params=req.params, method=method):
            now = time.perf_counter() - t0
            if ev.kind == "queued":
                positions.append(getattr(ev, "queue_position", None))
            for u in ev.updates:
                if u.finished:
                    finished_at.setdefault(u.seq, now)
            if worker is not None:
                submit_finished(worker, ev)
            if ev.kind == "done":
                done, result = now, ev.result
    except Exception as err:  # a lost request is a finding of the benchmark, not the end of it
        error = f"{type(err).__name__}: {err}"
    if result is None:
        done, error = None, error or "the stream ended without a 'done' event"
    return Served(req, start, done, result, error, finished_at, tuple(positions), worker)


def run_mode(engine: Engine, requests: list[Request], mode: str, *, alone_method: str = "bass",
             test: bool = True, timeout_s: float = 600.0) -> list[Served | None]:
    """Serve `requests` in `mode`, each at its arrival; one `Served` per request (None: not done in time)."""
    method = BATCHED_METHODS.get(mode, alone_method)
    lines = [sorted(requests, key=lambda r: r.arrival_s)] if mode == "one-at-a-time" else [[r] for r in requests]
    served: dict[int, Served] = {}
    t0 = time.perf_counter() + START_LEAD_S

    def work(line: list[Request]) -> None:
        for r in line:
            time.sleep(max(0.0, t0 + r.arrival_s - time.perf_counter()))
            served[r.visitor] = serve(engine, r, t0, method, test)

    threads = [threading.Thread(target=work, args=(line,), name=f"visitor-{line[0].visitor}", daemon=True)
               for line in lines]
    for th in threads:
        th.start()
    deadline = t0 + timeout_s
    for th in threads:
        th.join(max(0.0, deadline - time.perf_counter()))
    return [served.get(r.visitor) for r in requests]


def visit_row(req: Request, s: Served | None) -> dict:
    """One visitor's line of the JSON; waits for its candidates' verdicts (after the timing)."""
    row = dict(visitor=req.visitor, task_id=req.problem.task_id, k=req.k, arrival_s=req.arrival_s, start_s=None,
               done_s=None, tokens=0, error="not done within --timeout-s", queued_events=0, queue_positions=[],
               finished=0, tested=0, passed=0, first_pass_s=None)
    if s is None:
        return row
    row.update(start_s=s.start_s, done_s=s.done_s, error=s.error, queued_events=len(s.queue_positions),
               queue_positions=list(s.queue_positions), tokens=s.result.stats.tokens if s.result else 0,
               finished=len(s.finished_at))
    if s.worker is not None:
        s.worker.close()
        passing = [s.finished_at[seq] for seq, v in s.worker.verdicts.items() if v.passed]
        row.update(tested=len(s.worker.verdicts), passed=len(passing), first_pass_s=min(passing, default=None))
    return row


def percentile(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def summarize(scenario: Scenario, mode: str, requests: list[Request], served: list[Served | None],
              peak_bytes: int | None) -> dict:
    """One row of the table: the module docstring's figures for one scenario in one mode."""
    visits = [visit_row(r, s) for r, s in zip(requests, served, strict=True)]
    done = [v for v in visits if v["done_s"] is not None]
    to_done = [v["done_s"] - v["arrival_s"] for v in done]
    to_pass = [v["first_pass_s"] - v["arrival_s"] for v in done if v["first_pass_s"] is not None]
    wall = max((v["done_s"] for v in done), default=None)
    tokens = sum(v["tokens"] for v in done)
    lengths = [L for s in served if s is not None and s.result is not None for L in s.result.stats.draft_lengths]
    return dict(scenario=scenario.label, mode=mode, k=requests[0].k, requests=len(visits), done=len(done),
                lost=len(visits) - len(done), last_arrival_s=max(r.arrival_s for r in requests),
                p50_done_s=percentile(to_done, 50), p95_done_s=percentile(to_done, 95),
                p50_first_pass_s=percentile(to_pass, 50), p95_first_pass_s=percentile(to_pass, 95),
                with_pass=len(to_pass), wall_s=wall, tokens=tokens, tokens_per_s=tokens / wall if wall else None,
                service_s=statistics.median([v["done_s"] - v["start_s"] for v in done]) if done else None,
                peak_gpu_mb=None if peak_bytes is None else peak_bytes / 2**20,
                saw_position=sum(any(p is not None for p in v["queue_positions"]) for v in visits),
                mean_draft_length=statistics.mean(lengths) if lengths else None, greedy=None, visits=visits)


def tokens_of(result: GenerationResult | None) -> list[tuple[int, ...]] | None:
    return None if result is None else result.token_ids


def greedy_identity(engine: Engine, requests: list[Request], mode: str, timeout_s: float) -> dict:
    """Greedy decoding of each request alone, then all of them served in `mode` (at the same arrivals): how many
    requests decode to the same tokens, every candidate, both ways."""
    greedy = [dataclasses.replace(r, params=dataclasses.replace(r.params, temperature=0.0, top_p=1.0))
              for r in requests]
    method = BATCHED_METHODS[mode]
    alone = [engine.generate(r.problem.prompt, k=r.k, params=r.params, method=method) for r in greedy]
    together = run_mode(engine, greedy, mode, test=False, timeout_s=timeout_s)
    same = sum(s is not None and tokens_of(s.result) == tokens_of(a) for a, s in zip(alone, together, strict=True))
    return dict(identical=same, requests=len(requests))


def ratios(runs: list[dict]) -> list[dict]:
    """Per scenario, batched-bass against each other mode (x > 1: batched-bass is better), and against
    one-at-a-time its p95 time to all done over a lone visitor's (one-at-a-time's median service time)."""
    by = {(r["scenario"], r["mode"]): r for r in runs}
    out = []
    for sc in dict.fromkeys(r["scenario"] for r in runs):
        bass = by.get((sc, "batched-bass"))
        for other in ("batched-regular", "one-at-a-time"):
            o = by.get((sc, other))
            if bass is None or o is None or not bass["wall_s"] or not o["wall_s"]:
                continue
            lone = o["service_s"] if other == "one-at-a-time" else None
            out.append(dict(scenario=sc, against=other, wall_x=o["wall_s"] / bass["wall_s"],
                            tokens_per_s_x=bass["tokens_per_s"] / o["tokens_per_s"] if o["tokens_per_s"] else None,
                            p95_over_lone=bass["p95_done_s"] / lone if lone else None))
    return out


def fmt(x, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def format_table(runs: list[dict], rows_of_ratios: list[dict]) -> str:
    head = (f"{'scenario':<18}{'mode':<17}{'done/lost':>10}{'p50 done':>10}{'p95 done':>10}{'p50 pass':>10}"
            f"{'p95 pass':>10}{'wall s':>9}{'tok/s':>9}{'mean L':>8}{'captures':>9}{'in line':>9}{'greedy =':>10}")
    lines = [head, "-" * len(head)]
    for r in runs:
        g = "-" if r["greedy"] is None else f"{r['greedy']['identical']}/{r['greedy']['requests']}"
        lines.append(f"{r['scenario']:<18}{r['mode']:<17}{r['done']:>6}/{r['lost']:<3}{fmt(r['p50_done_s']):>10}"
                     f"{fmt(r['p95_done_s']):>10}{fmt(r['p50_first_pass_s']):>10}{fmt(r['p95_first_pass_s']):>10}"
                     f"{fmt(r['wall_s']):>9}{fmt(r['tokens_per_s'], '.0f'):>9}{fmt(r['mean_draft_length'], '.2f'):>8}"
                     f"{r.get('decoding_captures', 0):>9}{r['saw_position']:>9}{g:>10}")
    for x in rows_of_ratios:
        lines.append(f"{x['scenario']}: batched-bass vs {x['against']}: wall {x['wall_x']:.2f}x, "
                     f"tokens/s {fmt(x['tokens_per_s_x'], '.2f')}x"
                     + ("" if x["p95_over_lone"] is None else f"; p95 / a lone visitor's {x['p95_over_lone']:.2f}"))
    return "\n".join(lines)


def plot(runs: list[dict], path: Path) -> None:
    """p50 (solid) and p95 (light) time to all done, one group of bars per mode, one panel per scenario."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(r["scenario"] for r in runs))
    fig, axes = plt.subplots(1, len(scenarios), figsize=(4.5 * len(scenarios), 3.6), squeeze=False)
    for ax, sc in zip(axes[0], scenarios, strict=True):
        rows = [r for r in runs if r["scenario"] == sc]
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [r["p50_done_s"] or 0 for r in rows], 0.4, label="p50", color="tab:blue")
        ax.bar(x + 0.2, [r["p95_done_s"] or 0 for r in rows], 0.4, label="p95", color="tab:blue", alpha=0.45)
        ax.set_xticks(x, [r["mode"] for r in rows], rotation=15, fontsize=8)
        ax.set_title(sc, fontsize=10)
        ax.set_ylabel("arrival to all k done (s)")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def requests_for(scenario: Scenario, pool: list, a: argparse.Namespace, seed: int) -> list[Request]:
    """The scenario's visitors: visitor i asks pool[i mod len(pool)] with seed `seed` + i."""
    k = scenario.k or a.k
    return [Request(i, pool[i % len(pool)], t, k,
                    SamplingParams(temperature=a.temperature, top_p=a.top_p, max_new_tokens=a.max_new_tokens,
                                   stop=HUMANEVAL_STOPS, seed=seed + i))
            for i, t in enumerate(scenario.arrivals(seed))]


def warm_up(engine: Engine, a: argparse.Namespace, pool: list, log) -> None:
    """Each scenario once in each mode, with other seeds: nothing of it is timed. (The engine captured and timed
    its batches' rounds at load; this settles what is particular to the scenarios' prompts.)"""
    t = time.perf_counter()
    for sc in a.scenarios:
        for mode in a.modes:
            run_mode(engine, requests_for(sc, pool, a, a.seed + WARMUP_SEED), mode, alone_method=a.alone_method,
                     test=False, timeout_s=a.timeout_s)
    log(f"warm-up: {time.perf_counter() - t:.1f} s")


def measure(engine: Engine, a: argparse.Namespace, pool: list, log) -> list[dict]:
    """Every scenario in every mode, --repeats times, on the one engine; one summary row each, of the run of median
    wall time."""
    runs: dict[tuple[str, str], list[dict]] = {}
    for i in range(a.repeats):
        order = a.modes[i % len(a.modes):] + a.modes[:i % len(a.modes)]
        for sc in a.scenarios:
            for mode in order:
                runs.setdefault((sc.label, mode), []).append(measure_one(engine, a, pool, sc, mode, log, greedy=i == 0))
    rows = []
    for tried in runs.values():
        walls = [r["wall_s"] for r in tried if r["wall_s"] is not None]
        row = dict(sorted(tried, key=lambda r: r["wall_s"] or float("inf"))[(len(tried) - 1) // 2])
        row["wall_s_runs"], row["greedy"] = walls, tried[0]["greedy"]  # (checked in the first run)
        rows.append(row)
    order = {(sc.label, m): j for j, (sc, m) in enumerate((sc, m) for sc in a.scenarios for m in a.modes)}
    return sorted(rows, key=lambda r: order[(r["scenario"], r["mode"])])


def measure_one(engine: Engine, a: argparse.Namespace, pool: list, sc: Scenario, mode: str, log,
                greedy: bool = True) -> dict:
    """One scenario in one mode: its summary row (with --check-greedy and `greedy`, the greedy identity too)."""
    cuda = engine.device.type == "cuda"
    requests = requests_for(sc, pool, a, a.seed)
    if cuda:
        torch.cuda.synchronize(engine.device)
        torch.cuda.reset_peak_memory_stats(engine.device)
    engine.scheduler.settle()  # the captures the last mode queued happen before this one, untimed
    captured = graphs.decoding_captures()
    served = run_mode(engine, requests, mode, alone_method=a.alone_method, test=not a.no_tests,
                      timeout_s=a.timeout_s)
    peak = torch.cuda.max_memory_allocated(engine.device) if cuda else None
    row = summarize(sc, mode, requests, served, peak)
    row["decoding_captures"] = graphs.decoding_captures() - captured  # CUDA graphs a request waited for
    if a.check_greedy and greedy and mode in BATCHED_METHODS:
        row["greedy"] = greedy_identity(engine, requests, mode, a.timeout_s)
    log(f"  {sc.label} {mode}: {row['done']} done, {row['lost']} lost, last arrival "
        f"{row['last_arrival_s']:.3f} s, wall {fmt(row['wall_s'])} s, p95 to done {fmt(row['p95_done_s'])} s, "
        f"mean L {fmt(row['mean_draft_length'], '.2f')}, {row['decoding_captures']} graphs captured while "
        "decoding")
    return row


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.load_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="embedded", help="'embedded', a .gguf file, or a model folder")
    p.add_argument("--draft", default="auto", help="'auto' (the draft that ships for the target), a spec, or 'none'")
    p.add_argument("--backend", default="auto")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--scenarios", default="together:1:1,together:1,together:4,poisson:16:32,together:64",
                   type=lambda s: [parse_scenario(x) for x in s.split(",") if x.strip()], help=SCENARIO_HELP)
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--alone-method", default="bass", choices=("bass", "regular"), help="one-at-a-time's method")
    p.add_argument("--k", type=int, default=8, help="candidates per visitor (a queued scenario gives its own)")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--pool", type=int, default=32, help="visitors ask the last N HumanEval problems")
    p.add_argument("--seed", type=int, default=0, help="visitor i samples with seed + i; Poisson arrivals use it")
    p.add_argument("--check-greedy", action="store_true", help="each batched mode: greedy alone vs batched")
    p.add_argument("--no-tests", action="store_true", help="do not test candidates (no time to first pass)")
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--repeats", type=int, default=1, help="runs of each scenario in each mode (the median's row)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="a mode's requests not done by then are lost")
    p.add_argument("--out", default="bench/results/latest/load/")
    a = p.parse_args(argv)
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not a.modes or any(m not in MODES for m in a.modes):
        p.error(f"--modes takes a comma-separated list of {', '.join(MODES)}; got {','.join(a.modes)!r}")
    if not a.scenarios:
        p.error(f"--scenarios needs at least one scenario: {SCENARIO_HELP}")
    try:
        check_k(a.k, "--k")
        SamplingParams(temperature=a.temperature, top_p=a.top_p, max_new_tokens=a.max_new_tokens)
    except ValueError as err:
        p.error(str(err))
    if not 1 <= a.pool <= 164:
        p.error(f"--pool takes 1 .. 164 HumanEval problems, got {a.pool}")
    return a


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    from sandbox import load_humaneval

    started = datetime.datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    try:
        engine = Engine(EngineConfig(target=a.target, draft=None if a.draft == "none" else a.draft, drafter="auto",
                                     backend=a.backend, device=a.device, dtype=a.dtype))
    except ValueError as err:
        raise SystemExit(f"load_bench: {err}") from None
    pool = load_humaneval()[::-1][:a.pool]
    info = dict(device=device_line(engine.device), torch=torch.__version__, target=engine.target.name,
                draft=engine.draft.name if engine.draft else None, drafter=engine.default_drafter,
                backend=engine.backend, dtype=str(engine.dtype), k=a.k, max_new_tokens=a.max_new_tokens,
                sampling=f"T {a.temperature}, top-p {a.top_p}", stops=list(HUMANEVAL_STOPS),
                problems=[p.task_id for p in pool], started=started, load_s=time.perf_counter() - t0,
                args={k: v for k, v in vars(a).items() if k != "scenarios"} | {"scenarios": [s.label for s in
                                                                                          a.scenarios]})
    table = engine.runner.cost_table
    info["cost_table"] = None if table is None else table.to_dict()  # what "auto" reads (`bass.engine.warmup`)
    print(info["device"], f"| target {info['target']}, draft {info['draft']}; loaded (and warmed) in "
          f"{info['load_s']:.1f} s", flush=True)
    if table is not None:
        print("cost table, ms a round (rows x L):", " ".join(f"{k}={v:.2f}" for k, v in
                                                         info["cost_table"]["round_ms"].items()), flush=True)
    def log(line: str) -> None:
        print(line, flush=True)

    if not a.no_warmup:
        warm_up(engine, a, pool, log)
    runs = measure(engine, a, pool, log)
    results = dict(info=info, runs=runs, ratios=ratios(runs))
    info.update(finished=datetime.datetime.now().isoformat(timespec="seconds"), seconds=time.perf_counter() - t0)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        plot(runs, out / "load_bench.png")
    except Exception as err:  # the numbers matter more than the picture
        info["plot_error"] = f"{type(err).__name__}: {err}"
    (out / "load_bench.json").write_text(json.dumps(results, indent=1, default=str))
    header = (f"{info['device']}\n{info['target']} (draft {info['draft']}), k = {a.k}, {a.max_new_tokens} new tokens, "
              f"{info['sampling']}, HumanEval stops; seconds from arrival; total {info['seconds']:.0f} s")
    text = header + "\n" + format_table(runs, results["ratios"])
    (out / "load_bench.txt").write_text(text + "\n")
    print(text)
    return results


if __name__ == "__main__":
    main()
