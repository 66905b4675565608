"""bench/draft_step_bench.py: its plumbing on a tiny random target and draft (the figures need a GPU)."""

from __future__ import annotations

import json


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
    rows = target.lm_head.weight[draft.vocab].float()  # the target's own rows (folded with W_out), not new weights
    assert draft.folded and torch.equal(draft.head, (rows @ draft.out_proj.weight.float()).to(draft.head.dtype))


def test_kernel_table_sets_the_verify_widths_side_by_side():
    import draft_step_bench

    graphs = [dict(graph="target B8 T3 slot0 + VerifyRule", kernels={"gemm": [4, 30.0], "attn": [2, 12.0]}),
              dict(graph="draft B8 T1 slot0 + DraftRule"),  # no kernels recorded: not a column
              dict(graph="target B8 T1 slot0 + VerifyRule", kernels={"gemm": [4, 25.0], "attn": [2, 7.5],
                                                                     "norm": [3, 2.0]})]
    head, *rows = draft_step_bench.kernel_table(graphs)
    assert head.split()[-2:] == ["T1", "T3"]  # ordered by width, whatever the capture order
    assert [r.split()[0] for r in rows] == ["gemm", "attn", "norm"]  # the dearest in the widest graph first
    assert rows[1].split()[1:] == ["2", "7.5", "2", "12.0"]
    assert rows[2].split()[1:] == ["3", "2.0", "0", "0.0"]  # absent from a width: zero there
    assert draft_step_bench.kernel_table([]) == []
