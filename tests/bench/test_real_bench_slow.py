"""bench/real_bench.py dry-run whole on tiny CPU models, with each of its row switches: the slow part of
test_real_bench.py."""

import json

import pytest
from tiny import make_model

import bench.plot_real as pr

pytestmark = pytest.mark.slow  # whole dry runs


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    import bench.real_bench as rb

    root = tmp_path_factory.mktemp("real")
    target, draft = make_model(root / "target", seed=0), make_model(root / "draft", seed=1)
    out = root / "out"
    rb.main(["--target", str(target), "--draft", str(draft), "--device", "cpu", "--ks", "2", "--prompts", "1",
             "--max-new-tokens", "8", "--repeats", "1", "--policy-k", "2", "--fixed-l", "2,3", "--profile",
             "--cublas-pair", "--chain-pair", "--out", str(out)])
    return out, json.loads((out / "real_bench.json").read_text())


def test_dry_run_rows_and_ratios(dry_run):
    out, res = dry_run
    info, rows = res["info"], res["rows"]
    assert info["drafters"] == ["ngram", "layer-skip", "model"]  # what the engine offered, not a fixed list
    assert info["device"].startswith("CPU") and info["torch"] in info["device"] and info["started"] <= info["finished"]
    assert info["seeds"] == "seed + pass"
    labels = [pr.row_label(r) for r in rows]
    bass = {r["drafter"]: r for r in rows if r["method"] == "bass" and r["policy"] == "auto" and not r.get("pair")}
    assert set(bass) == {"ngram", "layer-skip", "model"} and labels[0] == "regular"
    best = min(bass.values(), key=lambda r: r["ms_per_token"])["drafter"]
    single = [r for r in rows if r["method"] == "single"]
    assert len(single) == 1 and single[0]["drafter"] == best
    assert sorted(r["policy"] for r in rows if r["method"] == "bass" and r["drafter"] == best and not r.get("pair")) \
        == ["auto", "fixed L=2", "fixed L=3", "heuristic"]  # the default, auto, is the drafter's own row
    pair = [r for r in rows if r.get("pair") == "verdicts"]
    assert [r["verdicts"] for r in pair] == [None, "service", "in-process"] and {r["drafter"] for r in pair} == {best}
    ahead = [r for r in rows if r.get("pair") == "look-ahead"]  # the engine's setting (off on the CPU), then on
    assert [(r["method"], r["look_ahead"]) for r in ahead] == [("regular", False), ("bass", False),
                                                              ("regular", True), ("bass", True)]
    assert {r["drafter"] for r in ahead if r["method"] == "bass"} == {best}
    for regular_row, bass_row in (ahead[0:2], ahead[2:4]):  # each against the regular row of its own setting
        assert bass_row["x_regular"] == pytest.approx(regular_row["ms_per_token"] / bass_row["ms_per_token"])
    proj = [r for r in rows if r.get("pair") == "projections"]  # the engine's tuned projections, then cuBLAS
    assert [(r["method"], r["projections"]) for r in proj] == [("regular", "tuned"), ("bass", "tuned"),
                                                               ("regular", "cuBLAS"), ("bass", "cuBLAS")]
    assert pr.row_label(proj[3]) == f"BASS {best} (cuBLAS)"
    for regular_row, bass_row in (proj[0:2], proj[2:4]):
        assert bass_row["x_regular"] == pytest.approx(regular_row["ms_per_token"] / bass_row["ms_per_token"])
    chain = [r for r in rows if r.get("pair") == "proposals"]  # proposals as one graph (default), then step by step
    assert [(r["method"], r["proposals"]) for r in chain] == [("regular", "chained"), ("bass", "chained"),
                                                              ("regular", "step by step"), ("bass", "step by step")]
    assert pr.row_label(chain[3]) == f"BASS {best} (step by step)"
    for regular_row, bass_row in (chain[0:2], chain[2:4]):
        assert bass_row["x_regular"] == pytest.approx(regular_row["ms_per_token"] / bass_row["ms_per_token"])
    regular = next(r for r in rows if r["method"] == "regular")
    for r in rows:
        assert r["k"] == 2 and r["sequences"] == 2 and 2 <= r["tokens"] <= 16
        if r not in ahead and r not in proj and r not in chain:
            assert r["x_regular"] == pytest.approx(regular["ms_per_token"] / r["ms_per_token"])
        assert r["ms_per_token"] == r["ms_per_token_passes"][0]  # one pass: the row is that pass
    assert regular["acceptance"] is None and regular["mean_draft_length"] == 0.0
    assert next(r for r in rows if r["policy"] == "fixed L=2")["mean_draft_length"] <= 2


def test_dry_run_files_and_profile(dry_run):
    out, res = dry_run
    assert (out / "real_bench.png").stat().st_size > 1000 and "plot_error" not in res["info"]
    text = (out / "real_bench.txt").read_text().splitlines()
    assert text[-1].startswith("BASS") and text[-len(res["rows"]) - 1].startswith("method")  # the table is last
    regular, bass = res["info"]["profile"]
    assert regular["method"] == "regular" and regular["draft_ms_per_round"] == 0.0
    assert regular["verify_ms_per_round"] > 0 and bass["verify_ms_per_round"] > 0
    assert bass["verify_ms_per_round"] + bass["draft_ms_per_round"] <= bass["wall_ms_per_round"]
    for p in (regular, bass):
        assert "top ops by self CPU time" in (out / f"profile_{p['label']}.txt").read_text()


def test_no_policy_rows_keeps_regular_and_each_drafter(tmp_path):
    import bench.real_bench as rb

    target, draft = make_model(tmp_path / "target", seed=0), make_model(tmp_path / "draft", seed=1)
    res = rb.main(["--target", str(target), "--draft", str(draft), "--device", "cpu", "--ks", "2", "--prompts", "1",
                   "--max-new-tokens", "4", "--repeats", "1", "--single-ks", "", "--fixed-l", "3", "--no-verdicts",
                   "--drafters", "ngram,model", "--no-policy-rows", "--out", str(tmp_path / "out")])
    assert [(r["method"], r["drafter"], r["policy"], r.get("pair")) for r in res["rows"]] == [
        ("regular", None, None, None), ("bass", "ngram", "auto", None), ("bass", "model", "auto", None)]


def test_no_look_ahead_pair_keeps_the_policy_rows(tmp_path):
    """--no-look-ahead-pair drops only the pair's four rows: regular, the drafter's, the heuristic and fixed L stay."""
    import bench.real_bench as rb

    target, draft = make_model(tmp_path / "target", seed=0), make_model(tmp_path / "draft", seed=1)
    res = rb.main(["--target", str(target), "--draft", str(draft), "--device", "cpu", "--ks", "2", "--prompts", "1",
                   "--max-new-tokens", "4", "--repeats", "1", "--single-ks", "", "--fixed-l", "2", "--no-verdicts",
                   "--drafters", "model", "--policy-k", "2", "--no-look-ahead-pair", "--out", str(tmp_path / "out")])
    assert [(r["method"], r["policy"], r.get("pair")) for r in res["rows"]] == [
        ("regular", None, None), ("bass", "auto", None), ("bass", "heuristic", None), ("bass", "fixed L=2", None)]


@pytest.fixture
def measured(monkeypatch) -> list[list[str]]:
    """The runners' names of each `measure` call real_bench makes (the calls still run)."""
    import bench.real_bench as rb

    calls: list[list[str]] = []
    measure = rb.measure

    def recording(runners, n_prompts, repeats):
        calls.append(list(runners))
        return measure(runners, n_prompts, repeats)

    monkeypatch.setattr(rb, "measure", recording)
    return calls


def test_interleave_measures_regular_and_the_drafters_together(tmp_path, measured):
    """--interleave: regular and every drafter's row at a k come from one `measure`, prompt by prompt (a shared CPU
    drifts between rows run one after another); the rows and their ratios are those of the default order."""
    import bench.real_bench as rb

    calls = measured
    target, draft = make_model(tmp_path / "target", seed=0), make_model(tmp_path / "draft", seed=1)
    args = ["--target", str(target), "--draft", str(draft), "--device", "cpu", "--ks", "2", "--prompts", "2",
            "--max-new-tokens", "4", "--repeats", "2", "--single-ks", "", "--no-verdicts", "--drafters",
            "ngram,model", "--no-policy-rows"]
    res = rb.main(args + ["--interleave", "--out", str(tmp_path / "a")])
    assert calls == [["regular", "ngram", "model"]]
    rows = res["rows"]
    assert [(r["method"], r["drafter"], r["interleaved"]) for r in rows] == [
        ("regular", None, True), ("bass", "ngram", True), ("bass", "model", True)]
    for r in rows:
        assert len(r["ms_per_token_passes"]) == 2 and r["sequences"] == 4  # two passes over two prompts at k = 2
        assert r["x_regular"] == pytest.approx(rows[0]["ms_per_token"] / r["ms_per_token"])
    calls.clear()
    rb.main(args + ["--out", str(tmp_path / "b")])
    assert calls == [["r"], ["r"], ["r"]]  # by default, each row on its own
