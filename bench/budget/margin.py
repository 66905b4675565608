"""One method's margin over another at every budget, pooled over budget runs (seeds), with its standard error.

    python -m bench.budget margin RUN.json [RUN.json ...] [--method bass] [--against regular] [--out F.json]

Each RUN is the JSON of `python -m bass eval humaneval --budgets ... --methods bass,regular ... --seed S --out`.
One run draws one set of candidates per problem, so on 164 problems a Pass@First moves by several points from
one seed to the next; runs with other seeds (or on other machines) are pooled here.

For a metric x in {Pass@First, Pass@All} (0 or 1 per problem), budget b, problem p and run r:

    d[p, r] = x_method[p, r](b) - x_against[p, r](b)
    margin  = mean over p of  d_p,   d_p = mean over r of d[p, r]
    SE      = sd_p(d_p) / sqrt(P)

Problems are the independent unit: a problem's difficulty is shared by every run, so the runs' differences
on one problem are averaged before the spread is taken (a standard error clustered by problem). A run's
problems are paired, which removes the difficulty common to both methods. "ahead" counts the runs whose
own margin is above zero.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from bass.eval.budgets import budget_key

METRICS = {"pass_at_first": "Pass@First", "pass_at_all": "Pass@All"}


def _per_problem(report: dict, method: str, budget: float, metric: str) -> dict[str, float]:
    rows = report["methods"][method]["by_budget"][budget_key(budget)]["problems"]
    return {r["task_id"]: float(bool(r[metric])) for r in rows}


def margins(reports: list[dict], method: str = "bass", against: str = "regular") -> list[dict]:
    """Per budget shared by every run and per metric: both methods' pooled means, the margin, its SE.

    Only problems that every run has for both methods count (a `--limit` run pools with the same limit).
    """
    for i, r in enumerate(reports):
        missing = {method, against} - set(r["methods"])
        if missing:
            raise ValueError(f"run {i} has no {', '.join(sorted(missing))}: run the eval with "
                             f"--methods {method},{against}")
    budgets = sorted(set.intersection(*(set(r["budgets"]) for r in reports)))
    if not budgets:
        raise ValueError("the runs share no budget: give --budgets with at least one value in common")
    out = []
    for b in budgets:
        for metric, label in METRICS.items():
            mine = [_per_problem(r, method, b, metric) for r in reports]
            theirs = [_per_problem(r, against, b, metric) for r in reports]
            tasks = sorted(set.intersection(*(set(m) & set(t) for m, t in zip(mine, theirs, strict=True))))
            d = [sum(m[t] - o[t] for m, o in zip(mine, theirs, strict=True)) / len(reports) for t in tasks]
            mean = sum(d) / len(d)
            sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1)) if len(d) > 1 else float("nan")
            per_run = [sum(m[t] - o[t] for t in tasks) / len(tasks) for m, o in zip(mine, theirs, strict=True)]
            out.append({
                "budget_s": b, "metric": label, "problems": len(tasks), "runs": len(reports),
                method: sum(sum(m[t] for t in tasks) for m in mine) / (len(tasks) * len(reports)),
                against: sum(sum(o[t] for t in tasks) for o in theirs) / (len(tasks) * len(reports)),
                "margin": mean, "se": sd / math.sqrt(len(d)), "per_run": per_run,
                "runs_ahead": sum(x > 0 for x in per_run)})
    return out


def format_margins(rows: list[dict], method: str, against: str) -> str:
    """The table `main` prints: one line per budget and metric, margins in points."""
    lines = [f"{'budget s':>8} {'metric':<10} {method:>8} {against:>8} {'margin':>7} {'± SE':>5} "
             f"{'ahead':>6}  per run"]
    for r in rows:
        runs = " ".join(f"{100 * x:+.1f}" for x in r["per_run"])
        lines.append(f"{r['budget_s']:>8.3g} {r['metric']:<10} {r[method]:>8.3f} {r[against]:>8.3f} "
                     f"{100 * r['margin']:>+7.1f} {100 * r['se']:>5.1f} {r['runs_ahead']:>3}/{r['runs']:<2}  {runs}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", type=Path, nargs="+", help="budget-run JSONs (`python -m bass eval humaneval --out`)")
    p.add_argument("--method", default="bass")
    p.add_argument("--against", default="regular")
    p.add_argument("--out", type=Path, default=None, help="also write the rows as JSON")
    a = p.parse_args(argv)
    reports = [json.loads(path.read_text()) for path in a.runs]
    rows = margins(reports, a.method, a.against)
    print(f"{len(reports)} runs: " + ", ".join(path.name for path in a.runs))
    print(format_margins(rows, a.method, a.against))
    if a.out:
        a.out.write_text(json.dumps({"runs": [str(x) for x in a.runs], "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
