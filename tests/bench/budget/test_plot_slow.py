"""`python -m bass eval humaneval --budgets --methods` end to end on a tiny CPU model, then its plot: the slow
part of test_plot.py."""

import json

import pytest
from tiny import make_model

import bench.budget.plot as pb
from bass.cli import main
from bass.eval.budgets import budget_key

pytestmark = pytest.mark.slow  # the budget experiment run end to end


def test_eval_with_budgets_and_methods_then_plot(tmp_path, capsys):
    target = make_model(tmp_path / "tiny", seed=0)
    out = tmp_path / "budgets.json"
    assert main(["eval", "humaneval", "--target", str(target), "--draft", "none", "--drafter", "ngram", "--k", "2",
                 "--budgets", "60,1e-9", "--methods", "bass,regular", "--limit", "2", "--max-new-tokens", "4",
                 "--temperature", "0.8", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["budgets"] == [1e-9, 60.0] and list(report["methods"]) == ["bass", "regular"]
    assert report["device"].startswith("CPU")
    for method, r in report["methods"].items():
        assert r["config"]["method"] == method and r["config"]["budget_s"] == 60.0
        big = r["by_budget"][budget_key(60.0)]
        # the largest budget is the run itself (whose rows also list their candidates)
        assert big["problems"] == [{k: v for k, v in row.items() if k != "candidates"} for row in r["problems"]]
        assert all(len(row["candidates"]) == 2 for row in r["problems"])
        # a budget shorter than any prefill keeps only sequences that ended on the prefill's first token
        tiny = r["by_budget"][budget_key(1e-9)]["problems"]
        for row, full in zip(tiny, r["problems"], strict=True):
            assert row["finished"] <= full["finished"] and row["task_id"] == full["task_id"]
    lines = capsys.readouterr().out.splitlines()  # the budget table, 2 methods x 2 budgets, then the device
    assert "Pass@First" in lines[-6] and [line.split()[:2] for line in lines[-5:-1]] == \
        [["bass", "1e-09"], ["bass", "60"], ["regular", "1e-09"], ["regular", "60"]]
    got = pb.curves(report)
    assert [b for b, _ in got["bass"]["pass_at_all"]] == [1e-9, 60.0]
    parts = [{**report, "methods": {m: r}} for m, r in report["methods"].items()]  # one run per method
    assert pb.merge(parts)["methods"] == report["methods"]
    with pytest.raises(ValueError, match="same --budgets"):
        pb.merge([parts[0], {**parts[1], "budgets": [1.0]}])
    pb.plot(report, tmp_path / "budgets.png")
    assert (tmp_path / "budgets.png").stat().st_size > 1000
