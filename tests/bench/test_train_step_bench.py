"""bench/train_step_bench.py: its plumbing on a tiny random teacher and feature draft (the figures need a GPU)."""

from __future__ import annotations

import json

import pytest


def test_train_step_bench_dry_run(tmp_path):
    import train_step_bench

    out = tmp_path / "out"
    result = train_step_bench.main(["--shape", "tiny", "--seq-len", "16", "--batch-size", "4", "--draft-vocab", "101",
                                    "--variants", "2/eager/torch/sync/nopad,4", "--steps", "1", "--rounds", "2",
                                    "--out", str(out)])
    assert [r["variant"] for r in result["rows"]] == ["2/eager/torch/sync/nopad, λ_α 2", "4, λ_α 2"]
    assert all(r["ms_per_step"] > 0 and len(r["rounds_ms"]) == 2 for r in result["rows"])
    assert result["rows"][0]["vs_first"] == 1.0 and result["draft_vocab"] == 101
    assert set(result["teacher_ms_per_step"]) == {"torch", "fused"}
    assert json.loads((out / "train_step_bench.json").read_text())["rows"] == result["rows"]
    assert "top ops by self CPU time" in (out / "train_step_profile.txt").read_text()


def test_an_unknown_option_is_refused():
    import train_step_bench

    with pytest.raises(SystemExit, match="options from"):
        train_step_bench.main(["--shape", "tiny", "--variants", "4/compiled"])


def test_train_step_bench_on_a_real_teacher_and_token_files(tmp_path):
    """`--target` loads a model file as the teacher (a tiny HF folder here), `--work` draws the windows from the
    pipeline's token files: the step runs on them and the row says so."""
    import numpy as np
    import train_step_bench
    from tiny import make_model

    target = make_model(tmp_path, "qwen2", seed=0)
    work = tmp_path / "work"
    work.mkdir()
    rng = np.random.default_rng(1)
    for name in ("train.bin", "completions.bin"):
        rng.integers(0, 100, 400, dtype=np.uint32).tofile(work / name)
    result = train_step_bench.main(["--target", str(target), "--work", str(work), "--seq-len", "16", "--batch-size",
                                    "4", "--draft-vocab", "64", "--variants", "2/eager", "--steps", "1", "--rounds",
                                    "1", "--no-profile", "--shape", "tiny"])
    assert result["teacher"].startswith(f"{target} teacher (real weights), windows of {work}")
    assert result["rows"][0]["ms_per_step"] > 0 and result["draft_vocab"] == 64
