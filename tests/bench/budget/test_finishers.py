"""bench/budget/finishers.py: which candidate Pass@First sees, on hand-made rows and a real CLI report."""

import json

import pytest

import bench.budget.finishers as ff


def _cand(finish_s, tokens, passed, reason="stop"):
    return {"finish_s": finish_s, "tokens": tokens, "reason": reason, "passed": passed}


def test_first_finishers_of_hand_made_rows():
    problems = [
        {"candidates": [_cand(0.3, 30, True), _cand(0.1, 10, False), _cand(0.2, 20, True)]},
        # the first to finish is not the shortest (a batch's slow row); a budget-cut one does not count
        {"candidates": [_cand(0.1, 12, True), _cand(0.2, 8, False), _cand(0.05, 3, True, reason="budget")]},
        {"candidates": [_cand(None, 5, None, reason="budget")]},  # nothing finished: not counted
    ]
    got = ff.first_finishers(problems)
    assert got["problems"] == 2
    assert got["first_passes"] == 0.5 and got["first_is_shortest"] == 0.5
    assert got["finished_pass"] == 3 / 5
    assert got["pass_by_length_rank"] == {0: 0.0, 1: 1.0, 2: 1.0}


def test_main_reads_a_budget_report_and_refuses_one_without_candidates(tmp_path, capsys):
    rows = [{"candidates": [_cand(0.1, 4, False), _cand(0.2, 9, True)]}]
    path = tmp_path / "budget.json"
    path.write_text(json.dumps({"methods": {"bass": {"problems": rows}, "regular": {"problems": rows}}}))
    got = ff.main([str(path)])
    assert set(got) == {"bass", "regular"} and got["bass"]["first_passes"] == 0.0
    assert "first shortest" in capsys.readouterr().out
    path.write_text(json.dumps({"methods": {"bass": {"problems": [{"task_id": "HumanEval/0"}]}}}))
    with pytest.raises(SystemExit, match="no per-candidate rows"):
        ff.main([str(path)])
