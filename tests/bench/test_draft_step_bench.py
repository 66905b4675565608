"""bench/draft_step_bench.py: its plumbing on a tiny random target and draft (the figures need a GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def test_draft_step_bench_dry_run(tmp_path):
    import draft_step_bench

    out = tmp_path / "out"
    info = draft_step_bench.main(["--shape", "tiny", "--k", "2", "--max-new-tokens", "6", "--ls", "1,3",
                                  "--out", str(out)])
    assert [r["L"] for r in info["rounds"]] == [None, 1, 3]
    assert all(r["ms_per_round"] > 0 and r["rounds"] > 0 for r in info["rounds"])
    assert info["graphs"] == [] and info["pipelined"] == []  # no CUDA: no graphs, no device timeline
    assert json.loads((out / "draft_step.json").read_text())["k"] == 2
    text = (out / "draft_step.txt").read_text()
    assert "ms/round" in text and text.count("\n") == 3 + 3 + 1


def test_tiny_engine_drafts_from_a_reduced_vocabulary_of_the_targets_own_rows():
    import draft_step_bench
    import torch

    from bass.synthetic import TINY

    engine = draft_step_bench.build_engine("tiny", "cpu")
    draft, target = engine.draft.model, engine.target.model
    assert len(draft.vocab) < TINY.vocab_size  # proposes from a subset, as the shipped draft does
    assert torch.equal(draft.head, target.lm_head.weight[draft.vocab])  # the target's own rows, not new weights
