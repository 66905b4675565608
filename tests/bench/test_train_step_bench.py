"""bench/train_step_bench.py: its plumbing on a tiny random teacher and feature draft (the figures need a GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


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
