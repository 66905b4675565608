"""The sandbox's command line on a candidate and over HumanEval, as JSON: the slow part of test_runner.py."""

import json
import subprocess
import sys

import pytest
from sandbox_cases import ROOT

pytestmark = pytest.mark.slow  # the command line over HumanEval


def test_cli_run_and_humaneval_json(tmp_path):
    candidate, tests = tmp_path / "cand.py", tmp_path / "tests.py"
    candidate.write_text("def twice(x):\n    return 2 * x\n")
    tests.write_text("def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 7\n")
    run = subprocess.run([sys.executable, "-m", "sandbox", "run", str(candidate), str(tests), "--entry-point", "twice",
                          "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    report = json.loads(run.stdout)
    [only] = report["candidates"]
    assert (only["status"], only["tests_passed"], only["tests_total"]) == ("failed", 1, 2)
    assert only["isolation"] and report["statuses"] == {"failed": 1} and run.returncode == 1
    text = subprocess.run([sys.executable, "-m", "sandbox", "humaneval", "--solutions", "canonical"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert "passed 164/164" in text.stdout and "passed=164" in text.stdout and text.returncode == 0
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": "HumanEval/0", "completion": "    return True\n"}) + "\n")
    mine = subprocess.run([sys.executable, "-m", "sandbox", "humaneval", "--solutions", str(samples), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert json.loads(mine.stdout)["statuses"] == {"failed": 1}
