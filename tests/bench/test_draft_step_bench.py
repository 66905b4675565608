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


def test_random_feature_draft_proposes_from_half_the_vocabulary():
    import draft_step_bench
    import torch

    from bass.models.loader import build_random
    from bass.synthetic import TINY

    target = build_random(TINY.with_(tie_word_embeddings=False), seed=0)
    draft = draft_step_bench.random_feature_draft(target)
    assert draft.vocab.tolist() == list(range(0, TINY.vocab_size, 2))
    assert draft.head.shape == (TINY.vocab_size // 2, TINY.hidden_size)
    assert torch.equal(draft.head, target.lm_head.weight[::2])  # the target's own rows, not new weights
