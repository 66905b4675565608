"""bench/real_bench.py: its report arithmetic and its passes (`real_passes.py`) by hand, and its whole plumbing on
tiny CPU models."""


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
