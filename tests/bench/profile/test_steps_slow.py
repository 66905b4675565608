"""`python -m bench.profile steps` dry-run whole on tiny CPU models (the figures only mean something on a GPU):
the slow part of test_steps.py."""

from __future__ import annotations

import json

import pytest
from tiny import make_model

pytestmark = pytest.mark.slow  # the whole dry run


def test_step_costs_dry_run(tmp_path):
    import bench.profile.steps as step_costs

    target, draft = make_model(tmp_path / "target", seed=0), make_model(tmp_path / "draft", seed=1)
    out = tmp_path / "out"
    info = step_costs.main(["--target", str(target), "--draft", str(draft), "--k", "2", "--widths", "1,3",
                            "--reps", "2", "--max-new-tokens", "6", "--drafters", "ngram", "--pipelined-ks", "2",
                            "--out", str(out)])
    assert [s["width"] for s in info["steps"]] == [1, 3]
    assert all(s["forward_ms"] > 0 and s["rule_eager_ms"] > 0 and s["verify_ms"] > 0 for s in info["steps"])
    assert all(s["rule_graph_ms"] > 0 and s["dense_rule_graph_ms"] > 0 for s in info["steps"])
    labels = [r["label"] for r in info["rounds"]]
    assert labels == ["regular", "ngram_fixedL1", "ngram_fixedL3"]
    regular = info["rounds"][0]
    assert regular["mean_draft_length"] == 0 and regular["tokens_per_round"] == 1
    for r in info["rounds"]:  # the split adds up to the wall time
        assert abs(r["draft_ms_per_round"] + r["verify_ms_per_round"] + r["host_ms_per_round"]
                   - r["wall_ms_per_round"]) < 1e-6
        assert (out / f"profile_{r['label']}.txt").stat().st_size > 100
    assert info["greedy_identical"] == {"ngram": 2}  # greedy BASS is regular decoding, token for token
    saved = json.loads((out / "step_costs.json").read_text())
    assert saved["k"] == 2
    assert "ms/round" in (out / "step_costs.txt").read_text()
    # the pipelined view: regular, then ngram under fixed L = 1 and fixed L = 3, at k = 2
    pipelined = saved["pipelined"]
    assert [(r["label"], r["k"]) for r in pipelined] == [("regular", 2), ("ngram_fixedL1", 2), ("ngram_fixedL3", 2)]
    for r in pipelined:
        assert r["rounds"] > 0 and r["wall_ms_per_round"] > 0 and r["plain_ms_per_round"] > 0
        assert r["gpu_busy_ms_per_round"] is None and r["idle_ms_per_round"] is None  # no GPU: unknown, not 0
        assert r["tokens"] >= r["sequences"] == 2 and r["ms_per_token_per_seq"] > 0
        assert r["launched_ahead"] == 0  # look-ahead is off on the CPU: every round launched in order
        text = (out / f"profile_pipelined_{r['label']}_k2.txt").read_text()
        assert "host ops by self CPU time" in text and "aten::" in text  # the profiler saw the decode's ops
    assert pipelined[0]["mean_draft_length"] == 0 and 0 < pipelined[1]["mean_draft_length"] <= 1  # ngram: L <= 1
    table = (out / "step_costs.txt").read_text().split("pipelined (look-ahead as the engine runs)\n")[1]
    assert len(table.splitlines()) == 1 + len(pipelined) and " - " in table
