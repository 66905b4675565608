"""bench/real_bench.py: its report arithmetic and its passes (`real_passes.py`) by hand, and its whole plumbing on
tiny CPU models."""

import json

import pytest
from tiny import make_model

import bench.plot_real as pr


def test_ratios_and_table_by_hand():
    rows = [dict(method="regular", k=8, drafter=None, policy=None, ms_per_token=4.0, throughput=2000.0,
                 acceptance=None, tokens_per_round=1.0, mean_draft_length=0.0),
            dict(method="bass", k=8, drafter="model", policy="auto", ms_per_token=2.5, throughput=3000.0,
                 acceptance=0.6, tokens_per_round=2.9, mean_draft_length=3.5),
            dict(method="bass", k=1, drafter="model", policy="fixed L=4", ms_per_token=2.0, throughput=500.0,
                 acceptance=0.7, tokens_per_round=3.1, mean_draft_length=4.0)]
    pr.add_ratios(rows)
    assert rows[0]["x_regular"] == 1.0 and rows[1]["x_regular"] == pytest.approx(1.6)
    assert rows[1]["x_throughput"] == pytest.approx(1.5)
    assert rows[2]["x_regular"] is None  # no regular row at k=1
    lines = pr.format_table(rows).splitlines()
    assert lines[2].split()[:5] == ["BASS", "model", "8", "2.50", "3000.0"] and lines[2].split()[5] == "1.60"
    assert lines[3].split()[:4] == ["BASS", "model", "fixed", "L=4"] and lines[3].split()[7] == "-"


def test_aggregate_over_prompts_by_hand():
    import bench.real_passes as rb
    from bass.events import BatchStats, Candidate, GenerationResult, SequenceStats

    def result(seq_stats, decode_s, lengths):
        cands = tuple(Candidate(0, i, "", (), "length", s) for i, s in enumerate(seq_stats))
        return GenerationResult(cands, BatchStats("bass", "ngram", "torch", len(cands), 0.1, decode_s, 0, 0, 0, 0,
                                                  0.0, tuple(lengths)))

    # prompt 1: two sequences of 10 tokens ending at 1 s and 2 s; prompt 2: one of 20 tokens ending at 1 s
    a = result([SequenceStats(10, 4, 8, 5, 1.0), SequenceStats(10, 5, 10, 4, 2.0)], 2.0, [2, 2, 3, 3, 2])
    b = result([SequenceStats(20, 10, 20, 10, 1.0)], 1.0, [2] * 10)
    got = rb.aggregate([a, b])
    assert got["ms_per_token"] == pytest.approx((100 + 200 + 50) / 3)  # mean over sequences
    assert got["throughput"] == pytest.approx(40 / 3.0)
    assert got["acceptance"] == pytest.approx(19 / 38)
    assert got["tokens_per_round"] == pytest.approx((40 - 3) / 19)  # first token is the prefill's
    assert got["mean_draft_length"] == pytest.approx(32 / 15)


def test_each_pass_counts_the_graphs_captured_inside_it(monkeypatch):
    """Captures made in the warm-up pass are not counted; each timed pass counts its own, per runner: those
    inside decoding apart from those the engine captured after a generation's "done" (deferred)."""
    import bench.real_passes as rb
    from bass.events import BatchStats, Candidate, GenerationResult, SequenceStats

    made = {"n": 0, "deferred": 0}  # as in `bass.runtime.graphs`: every capture counts in n, a deferred one in both
    shapes: list[str] = []  # what each capture inside decoding was, in order
    monkeypatch.setattr(rb, "decoding_captures", lambda: made["n"] - made["deferred"])
    monkeypatch.setattr(rb, "deferred_captures", lambda: made["deferred"])
    monkeypatch.setattr(rb, "decoding_capture_shapes", lambda: list(shapes))
    calls, seen = {"a": 0, "b": 0}, []

    def runner(name, capture_on, defer_on):
        def run(i, p):
            calls[name] += 1
            seen.append((name, i, p))
            made["n"] += (calls[name] in capture_on) + 2 * (calls[name] in defer_on)
            shapes.extend([f"{name} call {calls[name]}"] * (calls[name] in capture_on))
            made["deferred"] += 2 * (calls[name] in defer_on)  # this call's stream captured two after "done"
            cand = Candidate(0, 0, "", (), "length", SequenceStats(10, 4, 8, 5, 1.0))
            return GenerationResult((cand,), BatchStats("bass", "ngram", "torch", 1, 0.1, 1.0, 0, 0, 0, 0, 0.0, (2,)))
        return run

    # 2 prompts: calls 1-2 are the warm-up, 3-4 the first timed pass, 5-6 the second
    got = rb.measure({"a": runner("a", {1, 4, 6}, {2, 3, 4}), "b": runner("b", {2, 5}, {1, 6})},
                     n_prompts=2, repeats=2)
    assert got["a"]["captures_passes"] == [1, 1] and got["b"]["captures_passes"] == [0, 1]
    # and which shapes: the warm-up's (a's call 1, b's call 2) in none
    assert got["a"]["captured_shapes_passes"] == [["a call 4"], ["a call 6"]]
    assert got["b"]["captured_shapes_passes"] == [[], ["b call 5"]]
    # interleaved prompt by prompt, each call told its pass: 0 the warm-up, then 1 and 2
    assert seen == [(n, i, p) for p in range(3) for i in range(2) for n in "ab"]
    assert got["a"]["deferred_captures_passes"] == [4, 0] and got["b"]["deferred_captures_passes"] == [0, 2]


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


@pytest.mark.slow
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


def test_each_pass_samples_with_its_own_seed_unless_told_otherwise(tmp_path):
    """Pass p samples with seed + p, so regular decoding and fixed lengths draw new texts in every pass (module
    docstring); --same-seeds gives every pass the run's seed."""
    import bench.real_bench as rb

    target = make_model(tmp_path / "target", seed=0)
    args = ["--target", str(target), "--draft", "none", "--device", "cpu", "--prompts", "1", "--max-new-tokens", "6",
            "--seed", "5"]
    for extra, seeds in (([], [5, 6, 7]), (["--same-seeds"], [5, 5, 5])):
        b = rb.Bench(rb.parse_args(args + extra))
        assert [b.pass_params(p).seed for p in range(3)] == seeds
        assert b.pass_params(2).temperature == b.params.temperature
    b = rb.Bench(rb.parse_args(args))
    run = b.runner("regular", 2)
    texts = [[c.text for c in run(0, p).candidates] for p in (1, 1, 2)]
    assert texts[0] == texts[1]  # a pass's seed decides its samples
    assert texts[0] != texts[2]  # and the next pass draws others


@pytest.mark.slow
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


@pytest.mark.slow
def test_no_policy_rows_keeps_regular_and_each_drafter(tmp_path):
    import bench.real_bench as rb

    target, draft = make_model(tmp_path / "target", seed=0), make_model(tmp_path / "draft", seed=1)
    res = rb.main(["--target", str(target), "--draft", str(draft), "--device", "cpu", "--ks", "2", "--prompts", "1",
                   "--max-new-tokens", "4", "--repeats", "1", "--single-ks", "", "--fixed-l", "3", "--no-verdicts",
                   "--drafters", "ngram,model", "--no-policy-rows", "--out", str(tmp_path / "out")])
    assert [(r["method"], r["drafter"], r["policy"], r.get("pair")) for r in res["rows"]] == [
        ("regular", None, None, None), ("bass", "ngram", "auto", None), ("bass", "model", "auto", None)]


@pytest.mark.slow
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


@pytest.mark.slow
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
