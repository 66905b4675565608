"""bench/load_bench.py end to end on tiny CPU models: the slow part of test_load_bench.py."""

import json

import pytest
from tiny import make_model

from bench import load_bench as lb

pytestmark = pytest.mark.slow  # a whole run on tiny models


def test_end_to_end_on_tiny_cpu_models(tmp_path, capsys):
    target, draft = make_model(tmp_path / "target", seed=0), make_model(tmp_path / "draft", seed=1)
    out = tmp_path / "out"
    res = lb.main(["--target", str(target), "--draft", str(draft), "--device", "cpu", "--k", "2",
                   "--max-new-tokens", "6", "--scenarios", "together:2,poisson:3:20,queued:2:3", "--check-greedy",
                   "--no-warmup", "--repeats", "2", "--out", str(out)])
    assert json.loads((out / "load_bench.json").read_text())["runs"] == json.loads(json.dumps(res["runs"]))
    assert (out / "load_bench.png").stat().st_size > 0 and res["info"]["problems"][0] == "HumanEval/163"
    runs = res["runs"]
    assert [(r["scenario"], r["mode"]) for r in runs] == [(s, m) for s in ("together:2", "poisson:3:20", "queued:2:3")
                                                          for m in lb.MODES]
    for r in runs:
        v = r["visits"]
        assert r["done"] == r["requests"] == len(v) and r["lost"] == 0 and r["peak_gpu_mb"] is None
        assert r["k"] == (3 if r["scenario"].startswith("queued") else 2)
        assert r["p50_done_s"] <= r["p95_done_s"] <= r["wall_s"] and r["tokens"] == sum(x["tokens"] for x in v)
        assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["wall_s"])
        assert all(x["finished"] == x["tested"] == r["k"] and x["error"] is None for x in v)
        assert all(x["arrival_s"] <= x["start_s"] < x["done_s"] <= r["wall_s"] for x in v)
        assert r["greedy"] == (None if r["mode"] == "one-at-a-time" else dict(identical=len(v), requests=len(v)))
        assert len(r["wall_s_runs"]) == 2 and r["wall_s"] in r["wall_s_runs"]  # the median run of two: the faster
        assert r["wall_s"] == min(r["wall_s_runs"]) and r["decoding_captures"] == 0  # (no graphs on the CPU)
        regular = r["mode"] == "batched-regular"
        assert r["mean_draft_length"] == 0 if regular else 0 < r["mean_draft_length"] <= 3  # auto: l0 on the CPU
    poisson = [x["arrival_s"] for x in runs[3]["visits"]]
    assert poisson[0] == 0 and poisson == sorted(poisson) and runs[3]["last_arrival_s"] == poisson[-1] > 0
    assert {(x["scenario"], x["against"]) for x in res["ratios"]} == {
        (s, m) for s in ("together:2", "poisson:3:20", "queued:2:3") for m in ("batched-regular", "one-at-a-time")}
    table = capsys.readouterr().out.rstrip().splitlines()
    assert table[-1].startswith("queued:2:3: batched-bass vs one-at-a-time") and "p95 / a lone visitor's" in table[-1]
