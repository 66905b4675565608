"""HumanEval within a time budget: the paper's Pass@First / Pass@All experiment, plus unbiased pass@k.

For each problem the engine generates k completions under a wall-clock budget; the sequences that
finished inside it (EOS, stop string or token limit, not cut by the budget) run against the problem's
tests in the sandbox. Per problem (DESIGN.md §2):

    Pass@First = the first sequence to finish passes;   Pass@All = some finished sequence passes;
    pass@1, pass@k = 1 - C(n - c, k') / C(n, k')  with n = k samples and c passing ones
                     (a sequence cut by the budget counts as failing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from bass.config import HUMANEVAL_STOPS, EngineConfig, SamplingParams
from bass.events import Candidate
from bass.metrics import mean_ms_per_token, pass_at_all, pass_at_first, pass_at_k


def problem_row(task_id: str, candidates: Sequence[Candidate], passed: Sequence[bool]) -> dict:
    """The per-problem metrics from the candidates and whether each one passed its tests."""
    times = [c.finish_time_or_none for c in candidates]
    ok = [bool(p) and t is not None for p, t in zip(passed, times, strict=True)]
    n, c = len(candidates), sum(ok)
    return {"task_id": task_id, "n": n, "finished": sum(t is not None for t in times), "passed": c,
            "pass_at_first": pass_at_first(times, ok), "pass_at_all": pass_at_all(times, ok),
            "pass_at_1": pass_at_k(n, c, 1), f"pass_at_{n}": pass_at_k(n, c, n),
            "mean_ms_per_token": mean_ms_per_token([x.stats.finish_time_s for x in candidates],
                                                   [x.stats.tokens for x in candidates])}


def summarize(rows: Sequence[dict]) -> dict:
    """Means over problems of every per-problem metric (booleans become rates)."""
    if not rows:
        return {"problems": 0}
    keys = [k for k, v in rows[0].items() if isinstance(v, (bool, int, float)) and k not in ("n",)]
    out = {"problems": len(rows)}
    for k in keys:
        out[k] = sum(float(r[k]) for r in rows) / len(rows)
    return out


def run_humaneval(cfg: EngineConfig, *, k: int, budget_s: float, method: str, limit: int | None = None,
                  params: SamplingParams | None = None, log: Callable[[str], None] | None = None,
                  engine=None) -> dict:
    """Generate and check every problem (the first `limit`); return {"config", "summary", "problems"}."""
    from bass.engine import Engine
    from sandbox import load_humaneval
    from sandbox import run_humaneval as check

    engine = engine or Engine(cfg)
    params = replace(params or SamplingParams(), time_budget_s=budget_s, stop=HUMANEVAL_STOPS)
    problems = load_humaneval()[:limit]
    rows = []
    for i, prob in enumerate(problems):
        result = engine.generate(prob.prompt, k=k, params=params, method=method)
        cands = result.candidates
        outcomes = check([prob] * len(cands), [c.text for c in cands])
        rows.append(problem_row(prob.task_id, cands, [o.all_passed for o in outcomes]))
        if log:
            r = rows[-1]
            log(f"[{i + 1}/{len(problems)}] {prob.task_id}: {r['passed']}/{r['n']} pass, "
                f"{r['finished']} finished, first {'ok' if r['pass_at_first'] else 'fail'}, "
                f"{r['mean_ms_per_token']:.0f} ms/token")
    return {"config": {"target": cfg.target, "draft": cfg.draft, "drafter": cfg.drafter, "backend": cfg.backend,
                       "method": method, "k": k, "budget_s": budget_s, "temperature": params.temperature,
                       "top_p": params.top_p, "max_new_tokens": params.max_new_tokens, "device": str(engine.device)},
            "summary": summarize(rows), "problems": rows}


def format_report(report: dict) -> str:
    """A short human-readable table of one evaluation."""
    c, s = report["config"], report["summary"]
    k = c["k"]
    return "\n".join([
        f"HumanEval, {s['problems']} problems, k={k}, budget {c['budget_s']} s, method {c['method']} "
        f"({c['drafter']}), target {c['target']} on {c['device']}",
        f"  Pass@First {s.get('pass_at_first', 0):.3f}   Pass@All {s.get('pass_at_all', 0):.3f}   "
        f"pass@1 {s.get('pass_at_1', 0):.3f}   pass@{k} {s.get(f'pass_at_{k}', 0):.3f}   "
        f"finished/problem {s.get('finished', 0):.2f}   mean {s.get('mean_ms_per_token', 0):.1f} ms/token/seq",
    ])
