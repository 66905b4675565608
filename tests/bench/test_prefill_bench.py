"""bench/prefill_bench.py: its plumbing on a tiny random target and feature draft (the figures need a GPU)."""

from __future__ import annotations

import json


def test_prefill_bench_dry_run(tmp_path):
    import prefill_bench

    out = tmp_path / "out"
    info = prefill_bench.main(["--shape", "tiny", "--lens", "12", "--repeats", "2", "--out", str(out)])
    assert [(r["prompt_tokens"], r["k"], r["method"]) for r in info["rows"]] == [
        (12, k, m) for k, m in prefill_bench.KINDS]
    assert all(r["graphs_ms"] > 0 and r["eager_ms"] > 0 for r in info["rows"])
    assert all(r["greedy_equal"] for r in info["rows"])  # on the CPU the padded prefill is exact enough
    assert json.loads((out / "prefill.json").read_text())["repeats"] == 2
    assert (out / "prefill.txt").read_text().count("\n") == 4 + 3
