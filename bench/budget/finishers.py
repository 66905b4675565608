"""Which candidate Pass@First sees, and how often it passes, from a budget run's JSON.

    python -m bench.budget finishers bench/results/budget_2026-12-03_h200_small_single_seed23.json

Pass@First tests the first candidate to finish. In a batch that is mostly the shortest one, and on
HumanEval the shortest completion is the one most often wrong (a `pass` stub, a missing import, a helper
it never wrote). Per method, over the candidates that finished by themselves at the run's largest budget
(`bass.eval.humaneval.candidate_rows`):

  first passes   how often the first to finish passed (Pass@First over the problems with a finisher)
  first shortest how often the first to finish had the fewest tokens (ties count)
  all pass       how often any finished candidate passed (pass@1 of the finishers)
  by length rank how often the candidate of each length rank passed (0: the shortest of its problem)

Single-sequence decoding finishes its candidates one after another, so its first is not the shortest:
that is why its Pass@First sits near its pass@1 while the batched methods' sits below.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bass.events import FINISHED_IN_TIME
from bass.metrics import first_finished


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def first_finishers(problems: list[dict]) -> dict:
    """The module docstring's figures for one method's problem rows (each with "candidates")."""
    firsts, shortest, passes, by_rank = [], [], [], {}
    for p in problems:
        done = [(i, c) for i, c in enumerate(p["candidates"]) if c["reason"] in FINISHED_IN_TIME]
        if not done:
            continue
        first = p["candidates"][first_finished([c["finish_s"] if c["reason"] in FINISHED_IN_TIME else None
                                                for c in p["candidates"]])]
        firsts.append(bool(first["passed"]))
        shortest.append(first["tokens"] == min(c["tokens"] for _, c in done))
        passes += [bool(c["passed"]) for _, c in done]
        for rank, (_, c) in enumerate(sorted(done, key=lambda ic: (ic[1]["tokens"], ic[0]))):
            by_rank.setdefault(rank, []).append(bool(c["passed"]))
    return {"problems": len(firsts), "first_passes": _share(firsts), "first_is_shortest": _share(shortest),
            "finished_pass": _share(passes), "pass_by_length_rank": {r: _share(v) for r, v in sorted(by_rank.items())}}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("budget_json", type=Path, help="the JSON of `python -m bass eval humaneval --budgets ... --out`")
    a = p.parse_args(argv)
    report = json.loads(a.budget_json.read_text())
    methods = report.get("methods", {"run": report})
    out = {}
    print("method    problems  first passes  first shortest  all pass  pass by length rank (0 = shortest)")
    for name, run in methods.items():
        if not run["problems"] or "candidates" not in run["problems"][0]:
            raise SystemExit(f"{a.budget_json}: no per-candidate rows (runs before `candidate_rows` lack them)")
        r = out[name] = first_finishers(run["problems"])
        ranks = " ".join(f"{k}:{v:.2f}" for k, v in r["pass_by_length_rank"].items())
        print(f"{name:9s} {r['problems']:8d} {r['first_passes']:13.3f} {r['first_is_shortest']:15.2f} "
              f"{r['finished_pass']:9.3f}  {ranks}")
    return out


if __name__ == "__main__":
    main()
