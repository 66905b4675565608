"""bench/budget/margin.py: a method's margin over another pooled over runs, clustered by problem."""

import json
import math

import pytest

import bench.budget.margin as bm


def _report(budgets, firsts: dict[str, dict[float, list[bool]]]) -> dict:
    """A budget report: per method and budget, Pass@First per problem (Pass@All set to the same)."""
    methods = {}
    for method, by_b in firsts.items():
        methods[method] = {"by_budget": {
            repr(float(b)): {"problems": [{"task_id": f"HumanEval/{i}", "pass_at_first": x, "pass_at_all": x}
                                          for i, x in enumerate(by_b[b])]} for b in budgets}}
    return {"budgets": list(budgets), "methods": methods}


def test_margin_averages_each_problem_over_runs_before_taking_the_spread():
    t, f = True, False
    run1 = _report([0.1], {"bass": {0.1: [t, t, f]}, "regular": {0.1: [f, t, f]}})  # d = 1, 0, 0
    run2 = _report([0.1], {"bass": {0.1: [t, f, t]}, "regular": {0.1: [t, f, f]}})  # d = 0, 0, 1
    rows = bm.margins([run1, run2])
    first = next(r for r in rows if r["metric"] == "Pass@First")
    d = [0.5, 0.0, 0.5]  # per problem, averaged over the two runs
    mean = sum(d) / 3
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / 2) / math.sqrt(3)
    assert first["margin"] == pytest.approx(mean) and first["se"] == pytest.approx(se)
    assert first["bass"] == pytest.approx(4 / 6) and first["regular"] == pytest.approx(2 / 6)
    assert first["per_run"] == pytest.approx([1 / 3, 1 / 3]) and first["runs_ahead"] == 2
    assert {r["metric"] for r in rows} == {"Pass@First", "Pass@All"}


def test_only_shared_budgets_and_problems_count():
    a = _report([0.1, 0.2], {"bass": {0.1: [True, True], 0.2: [True, True]},
                             "regular": {0.1: [False, False], 0.2: [True, False]}})
    b = _report([0.2], {"bass": {0.2: [False]}, "regular": {0.2: [True]}})  # one problem: a --limit 1 run
    rows = bm.margins([a, b])
    assert {r["budget_s"] for r in rows} == {0.2} and rows[0]["problems"] == 1
    assert rows[0]["per_run"] == [0.0, -1.0] and rows[0]["runs_ahead"] == 0


def test_a_run_without_the_baseline_is_refused_with_the_flag_to_use(tmp_path, capsys):
    only = _report([0.1], {"bass": {0.1: [True]}})
    with pytest.raises(ValueError, match="--methods bass,regular"):
        bm.margins([only])
    both = _report([0.1], {"bass": {0.1: [True, False]}, "regular": {0.1: [False, False]}})
    path = tmp_path / "run.json"
    path.write_text(json.dumps(both))
    rows = bm.main([str(path), "--out", str(tmp_path / "m.json")])
    assert rows[0]["margin"] == pytest.approx(0.5)
    assert "+50.0" in capsys.readouterr().out
    assert json.loads((tmp_path / "m.json").read_text())["rows"][0]["runs"] == 1
