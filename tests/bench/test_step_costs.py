"""bench/step_costs.py: its whole plumbing on tiny CPU models (the figures only mean something on a GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bass"))

from tiny import make_model  # noqa: E402


def test_step_costs_dry_run(tmp_path):
    import step_costs

    target, draft = make_model(tmp_path / "target", seed=0), make_model(tmp_path / "draft", seed=1)
    out = tmp_path / "out"
    info = step_costs.main(["--target", str(target), "--draft", str(draft), "--k", "2", "--widths", "1,3",
                            "--reps", "2", "--max-new-tokens", "6", "--drafters", "ngram", "--out", str(out)])
    assert [s["width"] for s in info["steps"]] == [1, 3]
    assert all(s["forward_ms"] > 0 and s["rule_eager_ms"] > 0 and s["verify_ms"] > 0 for s in info["steps"])
    labels = [r["label"] for r in info["rounds"]]
    assert labels == ["regular", "ngram_fixedL1", "ngram_fixedL3", "ngram_cost"]
    regular = info["rounds"][0]
    assert regular["mean_draft_length"] == 0 and regular["tokens_per_round"] == 1
    for r in info["rounds"]:  # the split adds up to the wall time
        assert abs(r["draft_ms_per_round"] + r["verify_ms_per_round"] + r["host_ms_per_round"]
                   - r["wall_ms_per_round"]) < 1e-6
        assert (out / f"profile_{r['label']}.txt").stat().st_size > 100
    assert info["greedy_identical"] == {"ngram": 2}  # greedy BASS is regular decoding, token for token
    assert json.loads((out / "step_costs.json").read_text())["k"] == 2
    assert "ms/round" in (out / "step_costs.txt").read_text()
