"""`python -m bass eval humaneval --budgets --methods` end to end on a tiny CPU model, and its plot."""

import json

from tiny import make_model

from bass.cli import main


def test_eval_needs_a_budget(capsys):
    assert main(["eval", "humaneval", "--target", "no-such-model"]) == 2
    assert "--budgets" in capsys.readouterr().err


def test_eval_of_one_method_and_one_budget_prints_its_report_alone(tmp_path, capsys):
    target = make_model(tmp_path / "tiny", seed=0)
    assert main(["eval", "humaneval", "--target", str(target), "--draft", "none", "--drafter", "ngram", "--k", "2",
                 "--budget-s", "60", "--method", "regular", "--limit", "1", "--max-new-tokens", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "methods" not in report  # the report itself, not the several-methods wrapper
    assert report["config"]["method"] == "regular" and report["config"]["budget_s"] == 60.0
    assert len(report["problems"]) == 1
