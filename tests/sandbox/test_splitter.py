import ast

import pytest

from sandbox.humaneval import load_humaneval
from sandbox.splitter import split_tests


def test_check_function_splits_into_one_test_per_assert_statement():
    source = '''
import math
METADATA = {"author": "x"}

def check(candidate):
    xs = [1, 2]
    assert candidate(xs) == 3
    for x in xs:
        assert candidate([x]) == x
    assert candidate([]) == 0, "empty"
    assert True, "this prints if this assert fails"

check(add)
'''
    plan = split_tests(source)
    assert plan.candidate_param == "candidate"
    assert plan.total == 3  # the `for` loop is one test; `assert True` tests nothing
    kinds = [(u.is_test, u.source.split("\n")[0]) for u in plan.units]
    assert kinds == [(False, "import math"), (False, 'METADATA = {"author": "x"}'), (False, "xs = [1, 2]"),
                     (True, "assert candidate(xs) == 3"), (True, "for x in xs:"),
                     (True, 'assert candidate([]) == 0, "empty"')]
    for unit in plan.units:  # line numbers point into the original file
        assert source.splitlines()[unit.lineno - 1].strip() == unit.source.split("\n")[0].strip()
        ast.parse(unit.source)


def test_plain_asserts_and_decorated_helpers():
    source = "import functools\n@functools.cache\ndef f(n):\n    return n\n" \
             "assert add(1, 1) == 2\nassert add(0, 0) == 0\n"
    plan = split_tests(source)
    assert plan.candidate_param is None and plan.total == 2
    assert plan.units[1].source.startswith("@functools.cache") and plan.units[1].lineno == 2


def test_no_tests_and_broken_tests():
    assert split_tests(None).total == 0 and split_tests("  \n").units == ()
    with pytest.raises(ValueError, match="line 2"):
        split_tests("def check(candidate):\n    assert candidate(\n")
    with pytest.raises(ValueError, match="def check\\(candidate\\)"):
        split_tests("def check():\n    assert True\n")


def test_humaneval_counts_match_an_independent_count():
    # Independent count: asserts directly in check's body whose test is not a constant, plus loops holding one.
    for problem in load_humaneval():
        check = next(n for n in ast.parse(problem.test).body if isinstance(n, ast.FunctionDef) and n.name == "check")
        expected = 0
        for node in check.body:
            asserts = [a for a in ast.walk(node) if isinstance(a, ast.Assert)]
            expected += any(not isinstance(a.test, ast.Constant) for a in asserts)
        assert split_tests(problem.test).total == expected > 0, problem.task_id
