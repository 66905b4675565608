"""HumanEval within a time budget: the paper's Pass@First / Pass@All experiment, plus unbiased pass@k.

For each problem the engine generates k completions under a wall-clock budget; the sequences that
finished inside it (EOS, stop string or token limit, not cut by the budget) run against the problem's
tests in the sandbox. Per problem (docs/design.md §5):

    Pass@First = the first sequence to finish passes;   Pass@All = some finished sequence passes;
    pass@1, pass@k = 1 - C(n - c, k') / C(n, k')  with n = k samples and c passing ones
                     (a sequence cut by the budget counts as failing);
    time to first pass = prefill + finish time of the earliest passing sequence (`bass.metrics`).

Each sequence is tested the moment it finishes, while the others keep decoding (`bass.eval.verdicts`);
with `stop_at_first_pass` the first passing one cancels its siblings, which then count as unfinished
(so Pass@All and pass@k measure the race, not the whole batch).

With several budgets (`budgets=`), each problem runs once at the largest and the metrics at the others
are derived from the candidates' finish times (`bass.eval.budgets`: exact, since a budget only truncates).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from bass.config import HUMANEVAL_STOPS, EngineConfig, SamplingParams, check_k
from bass.eval.budgets import budget_key, counted_finish_times, record_round_starts
from bass.eval.verdicts import Verdict, VerdictWorker, either, submit_finished
from bass.events import Candidate, GenerationResult
from bass.metrics import (
    candidates_ms_per_token,
    format_seconds_or_none,
    pass_at_all,
    pass_at_first,
    pass_at_k,
    time_to_first_pass,
)

TTFP = "time_to_first_pass_s"
WARMUP_TOKENS = 4  # per problem, untimed, before an eval with warmup (`run_humaneval`)


def problem_row(task_id: str, candidates: Sequence[Candidate], passed: Sequence[bool | None],
                prefill_s: float = 0.0, finish_times: Sequence[float | None] | None = None) -> dict:
    """The per-problem metrics from the candidates and whether each one passed its tests (None: untested).

    `finish_times` (None: a candidate that does not count) replaces the candidates' own, e.g. those that
    count at a smaller budget (`bass.eval.budgets.counted_finish_times`).
    """
    times = list(finish_times) if finish_times is not None else [c.finish_time_or_none for c in candidates]
    ok = [bool(p) and t is not None for p, t in zip(passed, times, strict=True)]
    n, c = len(candidates), sum(ok)
    return {"task_id": task_id, "n": n, "finished": sum(t is not None for t in times), "passed": c,
            "pass_at_first": pass_at_first(times, ok), "pass_at_all": pass_at_all(times, ok),
            "pass_at_1": pass_at_k(n, c, 1), f"pass_at_{n}": pass_at_k(n, c, n),
            "mean_ms_per_token": candidates_ms_per_token(candidates),
            TTFP: time_to_first_pass(prefill_s, times, ok)}


def candidate_rows(candidates: Sequence[Candidate], passed: Sequence[bool | None]) -> list[dict]:
    """Per candidate, in index order: when it finished (decode clock, s), its tokens, why it stopped and
    whether it passed: what tells which candidate Pass@First saw, and why it failed where others passed."""
    return [{"finish_s": c.stats.finish_time_s, "tokens": c.stats.tokens, "reason": c.finish_reason, "passed": p}
            for c, p in zip(candidates, passed, strict=True)]


def summarize(rows: Sequence[dict]) -> dict:
    """Means over problems of every per-problem metric (booleans become rates).

    Time to first pass is averaged over the problems where some candidate passed (None when none did),
    beside the share of problems with a pass within the budget.
    """
    if not rows:
        return {"problems": 0}
    keys = [k for k, v in rows[0].items() if isinstance(v, (bool, int, float)) and k not in ("n", TTFP)]
    out: dict = {"problems": len(rows)}
    for k in keys:
        out[k] = sum(float(r[k]) for r in rows) / len(rows)
    if any(TTFP in r for r in rows):
        firsts = [r[TTFP] for r in rows if r.get(TTFP) is not None]
        out["mean_" + TTFP] = sum(firsts) / len(firsts) if firsts else None
        out["share_with_pass"] = len(firsts) / len(rows)
    return out


def stream_with_verdicts(engine, prompt, worker: VerdictWorker, *, cancel=None,
                         round_starts: dict[int, float | None] | None = None, **request
                         ) -> tuple[GenerationResult, dict[int, Verdict]]:
    """Generate `request`'s candidates (`Engine.stream`'s arguments: k, params, method, drafter, chat), handing
    each to `worker` the moment it finishes by itself, to be tested in the background.

    Sequences cut by the budget or a cancel are not tested. A worker made with `stop_at_first_pass` cancels the
    sequences still decoding at the first passing verdict. Returns the result and the verdicts by sequence.
    `round_starts`, when given, receives for each finished sequence the budget check's reading before its
    last round (`bass.eval.budgets.record_round_starts`).
    """
    result = None
    try:
        for event in engine.stream(prompt, **request, cancel=either(cancel, worker.first_pass)):
            submit_finished(worker, event)
            if round_starts is not None:
                record_round_starts(event, round_starts)
            worker.poll()
            if event.kind == "done":
                result = event.result
    finally:
        worker.close()
    if result is None:
        raise RuntimeError("the engine's stream ended without a result")
    return result, worker.verdicts


def run_humaneval(cfg: EngineConfig, *, k: int, budget_s: float | None = None, method: str,
                  limit: int | None = None, params: SamplingParams | None = None,
                  log: Callable[[str], None] | None = None, engine=None, stop_at_first_pass: bool = False,
                  budgets: Sequence[float] | None = None, warmup: bool = False) -> dict:
    """Generate and check every problem (the first `limit`); return {"config", "summary", "problems"}.

    Candidates are tested as they finish (`stream_with_verdicts`); `stop_at_first_pass` cancels the
    siblings of the first passing one. With `budgets`, each problem runs once at the largest (which is
    then the budget) and the report gains "by_budget": {budget_key(b): {"summary", "problems"}} derived
    for every b (`bass.eval.budgets`); "summary" / "problems" stay those of the largest. `warmup` first runs,
    untimed, a few tokens of every problem and then the longest prompt in full, so no problem's budget is
    spent on compilation: kernels compile per shape class of the prefill (Triton specialises on whether a
    length divides by 16, and skinny GEMM tiles follow the row count), graphs are captured per batch and
    draft width, KV arenas are sized once. Warming up with the longest prompt alone left three problems
    of an H100 run (method bass, a 0.6 s budget) with 0 tokens: their prefills compiled past the budget. A
    drafting method with CUDA graphs then drafts every length once (`Engine.warm_draft_lengths`), so that no timed
    problem captures a draft width's graphs (without it, on the H100, all the candidates of HumanEval/39, /42,
    /118 and /162 but one met the budget after 0.15–1.1 s with 5–22 tokens, where regular decoding finished 1 to 8
    of each: `python -m bass eval humaneval --budgets ...`, method bass against regular).
    """
    if budgets:
        budgets = sorted(budgets)
        if budget_s is not None and budget_s != budgets[-1]:
            raise ValueError(f"budget_s={budget_s} and budgets={budgets}: the run uses the largest budget; "
                             "give only budgets")
        budget_s = budgets[-1]
    if budget_s is None:
        raise ValueError("give budget_s (seconds per problem) or budgets")
    if limit is not None and limit < 1:  # a run of no problem would report zeros as if it had measured them
        raise ValueError(f"limit must be at least 1 problem (None: all of them), got {limit}")
    from bass.engine import Engine
    from sandbox import load_humaneval, shared_service

    check_k(k)  # before any model loads
    check = shared_service().run_humaneval  # the sandbox in its own process: off the engine's host thread
    engine = engine or Engine(cfg)
    params = replace(params or SamplingParams(), time_budget_s=budget_s, stop=HUMANEVAL_STOPS)
    problems = load_humaneval()[:limit]
    if warmup and problems:
        for prob in problems:  # every prefill shape, and the first rounds at the full batch
            engine.generate(prob.prompt, k=k, params=replace(params, time_budget_s=None,
                                                             max_new_tokens=WARMUP_TOKENS), method=method)
        longest = max(problems, key=lambda p: len(engine.encode(p.prompt)[0]))
        engine.generate(longest.prompt, k=k, params=replace(params, time_budget_s=None), method=method)
        if method != "regular" and engine.captures_graphs:  # every draft width's graphs at this batch
            engine.warm_draft_lengths(longest.prompt, params, k=k, method=method)
    rows, by_budget = [], {budget_key(b): [] for b in budgets or ()}
    for i, prob in enumerate(problems):

        def test(items, prob=prob) -> list[bool]:
            return [o.all_passed for o in check([prob] * len(items), [text for _, text in items])]

        starts: dict[int, float | None] = {}
        worker = VerdictWorker(test, bool, stop_at_first_pass=stop_at_first_pass)
        result, verdicts = stream_with_verdicts(engine, prob.prompt, worker, round_starts=starts, k=k, params=params,
                                                method=method)
        passed = [verdicts[i].passed if i in verdicts else None for i in range(len(result.candidates))]
        prefill_s = result.stats.prefill_s
        rows.append(problem_row(prob.task_id, result.candidates, passed, prefill_s))
        rows[-1]["candidates"] = candidate_rows(result.candidates, passed)
        for b in budgets or ():
            times = counted_finish_times(result.candidates, starts, prefill_s, b)
            by_budget[budget_key(b)].append(problem_row(prob.task_id, result.candidates, passed, prefill_s, times))
        if log:
            r = rows[-1]
            log(f"[{i + 1}/{len(problems)}] {prob.task_id}: {r['passed']}/{r['n']} pass, "
                f"{r['finished']} finished, first {'ok' if r['pass_at_first'] else 'fail'}, "
                f"{r['mean_ms_per_token']:.0f} ms/token, first pass {format_seconds_or_none(r[TTFP])}")
    return {"config": {"target": cfg.target, "draft": cfg.draft, "drafter": cfg.drafter,
                       "backend": engine.backend, "method": method, "k": k,
                       "budget_s": budget_s, "temperature": params.temperature,
                       "top_p": params.top_p, "max_new_tokens": params.max_new_tokens, "device": str(engine.device),
                       "dtype": str(engine.dtype).removeprefix("torch."),
                       "stop_at_first_pass": stop_at_first_pass, "budgets": list(budgets or ())},
            "summary": summarize(rows), "problems": rows,
            **({"by_budget": {b: {"summary": summarize(r), "problems": r} for b, r in by_budget.items()}}
               if budgets else {})}


def format_report(report: dict) -> str:
    """A short human-readable table of one evaluation."""
    c, s = report["config"], report["summary"]
    k = c["k"]
    return "\n".join([
        f"HumanEval, {s['problems']} problems, k={k}, budget {c['budget_s']} s, method {c['method']} "
        f"({c['drafter']}), target {c['target']} on {c['device']}" + (f" ({c['dtype']})" if c.get("dtype") else ""),
        f"  Pass@First {s.get('pass_at_first', 0):.3f}   Pass@All {s.get('pass_at_all', 0):.3f}   "
        f"pass@1 {s.get('pass_at_1', 0):.3f}   pass@{k} {s.get(f'pass_at_{k}', 0):.3f}   "
        f"finished/problem {s.get('finished', 0):.2f}   mean {s.get('mean_ms_per_token', 0):.1f} ms/token/seq",
        f"  time to first pass: mean {format_seconds_or_none(s.get('mean_' + TTFP))} over the problems with a "
        f"pass; {s.get('share_with_pass', 0):.1%} of problems have a pass within the budget"
        + ("   (stopping at the first pass)" if c.get("stop_at_first_pass") else ""),
    ])
