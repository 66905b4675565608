"""What a verdict means: plain asserts that call `candidate` test the entry point; a suite with no assert
that can fail is refused ("no tests"), never passed; helpers the tests call come from the problem."""

import subprocess
import sys

import pytest
from sandbox_cases import ROOT

from sandbox import Job, Status, load_humaneval, run_candidates, run_humaneval, run_jobs, split_tests

PLAIN = "assert candidate(2) == 5\nassert candidate(3) == 7\n"
HONEST = "def f(x):\n    return 2 * x + 1\n"
DECOY = "def candidate(x):\n    return 2 * x + 1\n\ndef f(x):\n    return 0\n"


def test_plain_asserts_calling_candidate_test_the_entry_point():
    honest, decoy = run_candidates([HONEST, DECOY], PLAIN, entry_point="f")
    assert (honest.status, honest.tests_passed, honest.tests_total) == (Status.PASSED, 2, 2), honest
    assert (decoy.status, decoy.tests_passed) == (Status.FAILED, 0), decoy
    [only] = run_candidates([HONEST], PLAIN)  # no entry point: the candidate's only function
    assert only.status is Status.PASSED
    [two] = run_candidates([HONEST + "def g(x):\n    return x\n"], PLAIN)
    assert two.status is Status.ERROR and "entry-point" in two.first_failure.message


@pytest.mark.parametrize("tests", ["assert True\n1 == 1\n", "assert 1 == 1\nassert 'x'\n",
                                   "def check(candidate):\n    assert True\n    candidate(1) == 2\n"])
def test_a_suite_with_no_assert_that_can_fail_is_no_tests(tests, tmp_path):
    with pytest.raises(ValueError, match="no tests"):
        split_tests(tests)
    (tmp_path / "cand.py").write_text(HONEST)
    (tmp_path / "tests.py").write_text(tests)
    cli = subprocess.run([sys.executable, "-m", "sandbox", "run", str(tmp_path / "cand.py"), str(tmp_path / "tests.py"),
                          "--entry-point", "f"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2 and "no tests" in cli.stderr and "passed" not in cli.stdout, cli


# Wrong completions that redefine the helper their problem's tests call (the helper belongs to the problem).
REDEFINED_HELPERS = {
    "HumanEval/38": "    return s\n\n\ndef encode_cyclic(s):\n    return s\n",
    "HumanEval/50": "    return s\n\n\nencode_shift = lambda s: s\n",
    "HumanEval/32": "    return 0.0\n\n\npoly = lambda xs, x: 0.0\n",
}


def test_helpers_the_tests_call_come_from_the_problem():
    problems = {p.task_id: p for p in load_humaneval()}
    chosen = [problems[task] for task in REDEFINED_HELPERS]
    outcomes = run_humaneval(chosen + chosen, list(REDEFINED_HELPERS.values()) +
                             [p.canonical_solution for p in chosen])
    assert [o.status for o in outcomes[:3]] == [Status.FAILED] * 3, [o.first_failure for o in outcomes[:3]]
    assert [o.status for o in outcomes[3:]] == [Status.PASSED] * 3
    # The same through the generic API: helpers given with the job.
    helper = "def double(x):\n    return 2 * x\n"
    [job] = run_jobs([Job("def f(x):\n    return x\n\ndef double(x):\n    return x\n", "assert f(double(2)) == 4\n",
                          "f", helpers=helper)])
    assert job.status is Status.PASSED, job
