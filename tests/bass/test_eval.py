"""HumanEval-under-a-budget plumbing: metric arithmetic by hand, and one run on a tiny model."""

import pytest

from bass.eval import problem_row, run_humaneval, summarize
from bass.events import Candidate, SequenceStats


def _cand(reason, t, tokens=10):
    return Candidate(0, 0, "", (1,) * tokens, reason, SequenceStats(tokens, 5, 8, 4, t))


def test_problem_row_by_hand():
    cands = [_cand("stop", 2.0), _cand("budget", 3.0), _cand("eos", 1.0, tokens=20), _cand("length", 2.5)]
    row = problem_row("T/0", cands, [True, True, False, True])
    # the budget-cut sequence counts as failing even though its text would pass
    assert row["finished"] == 3 and row["passed"] == 2
    assert row["pass_at_first"] is False  # seq 2 finished first (1.0 s) and failed
    assert row["pass_at_all"] is True
    assert row["pass_at_1"] == pytest.approx(2 / 4)
    assert row["pass_at_4"] == 1.0
    # ms/token per sequence: 200, 300, 50, 250 -> mean 200
    assert row["mean_ms_per_token"] == pytest.approx(200.0)


def test_summarize_means_over_problems():
    rows = [{"task_id": "a", "n": 2, "pass_at_first": True, "pass_at_1": 0.5, "mean_ms_per_token": 10.0},
            {"task_id": "b", "n": 2, "pass_at_first": False, "pass_at_1": 0.0, "mean_ms_per_token": 30.0}]
    s = summarize(rows)
    assert s == {"problems": 2, "pass_at_first": 0.5, "pass_at_1": 0.25, "mean_ms_per_token": 20.0}


def test_run_on_a_tiny_model(tiny_engine):
    engine = tiny_engine("llama")
    report = run_humaneval(engine.config, k=2, budget_s=30.0, method="bass", limit=2, engine=engine,
                           params=__import__("bass").SamplingParams(max_new_tokens=8))
    assert [r["task_id"] for r in report["problems"]] == ["HumanEval/0", "HumanEval/1"]
    for r in report["problems"]:
        assert r["n"] == 2 and r["finished"] == 2  # 8 tokens take far less than the budget
        assert r["passed"] == 0 and r["pass_at_all"] is False  # random weights write no working code
    assert report["summary"]["problems"] == 2 and report["config"]["method"] == "bass"
