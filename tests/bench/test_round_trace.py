"""bench/round_trace.py by hand, and real_bench.py --trace on tiny CPU models."""

import json

import pytest
from tiny import make_model

import bench.profile.trace as rt


def test_summary_by_hand():
    # one generation: plain, plain, a drafting warm-up (no sample), two drafting rounds, plain; batch 8 then 3
    gen = [[0, 8, 2.0, True, True], [0, 8, 2.2, True, True], [1, 8, 5.0, False, False],
           [1, 8, 3.0, True, True], [1, 8, 2.8, True, True], [0, 3, 1.0, True, True]]
    got = rt.summarise([gen, [[1, 8, 4.0, True, False]]])
    assert list(got) == [(0, 4), (0, 8), (1, 8)]  # batch 3 is bucket 4
    one = got[(1, 8)]
    assert one["n"] == 4 and one["mean"] == pytest.approx((5 + 3 + 2.8 + 4) / 4) and one["median"] == pytest.approx(3.5)
    assert one["sample"] == pytest.approx(3.0)  # 3.0, 2.8, 4.0
    assert one["same"] == pytest.approx(2.9) and one["switch"] == pytest.approx(5.0)  # the second generation starts
    assert one["ahead"] == pytest.approx(0.5)
    plain = got[(0, 8)]
    assert plain["switch"] is None and plain["same"] == pytest.approx(2.2)
    assert got[(0, 4)]["switch"] == pytest.approx(1.0)
    table = rt.format_summary([{"method": "bass", "drafter": "model", "policy": "cost", "k": 8,
                                "traces": [gen]}], min_rounds=2)
    assert table.splitlines()[1].split()[:6] == ["bass", "model", "cost", "k=8", "0", "8"]


def test_calibration_columns_by_hand():
    """acc: drafts accepted per sequence; pred: what the cost policy expected of the same rounds. Rounds with a
    prediction are compared among themselves; a trace without predictions still shows what was accepted."""
    cost = [[3, 8, 2.3, True, True, 12, 16.0], [3, 8, 2.3, True, True, 14, 15.2], [3, 4, 2.2, True, True, 4, 6.0]]
    got = rt.summarise([cost])
    assert got[(3, 8)]["acc"] == pytest.approx((12 + 14) / 16) and got[(3, 8)]["pred"] == pytest.approx(31.2 / 16)
    assert got[(3, 4)]["acc"] == pytest.approx(1.0) and got[(3, 4)]["pred"] == pytest.approx(1.5)
    fixed = rt.summarise([[[3, 8, 2.3, True, True, 12, None], [3, 8, 2.3, True, True, 10, None]]])[(3, 8)]
    assert fixed["acc"] == pytest.approx(22 / 16) and fixed["pred"] is None
    old = rt.summarise([[[3, 8, 2.3, True, True]]])[(3, 8)]  # a trace from before the accepted drafts
    assert old["acc"] is None and old["pred"] is None
    table = rt.format_summary([{"method": "bass", "drafter": "model", "policy": "cost", "k": 8, "traces": [cost]}],
                              min_rounds=2)
    assert table.splitlines()[0].split()[-2:] == ["acc", "pred"] and table.splitlines()[1].split()[-2:] == ["1.62",
                                                                                                        "1.95"]
    plain_and_old = [[0, 8, 1.7, True, True, 0, 0.0], [3, 8, 2.3, True, True]]  # no prediction: left out
    got = rt.calibration([cost, plain_and_old])
    assert got["rounds"] == 3 and got["acc"] == pytest.approx(30 / 20) and got["pred"] == pytest.approx(37.2 / 20)
    assert rt.calibration([plain_and_old]) is None
    assert table.splitlines()[-1].split()[-6:] == ["rounds", "1.500", "/", "1.860", "=", "0.806"]


@pytest.mark.slow
def test_real_bench_trace_dry_run(tmp_path):
    import bench.real_bench as rb

    target, draft = make_model(tmp_path / "target", seed=0), make_model(tmp_path / "draft", seed=1)
    out = tmp_path / "out"
    rb.main(["--target", str(target), "--draft", str(draft), "--device", "cpu", "--ks", "2", "--prompts", "1",
             "--max-new-tokens", "8", "--repeats", "1", "--policy-k", "2", "--fixed-l", "1", "--drafters", "model",
             "--single-ks", "", "--no-verdicts", "--trace", "--out", str(out)])
    rows = json.loads((out / "real_bench.json").read_text())["rows"]
    traced = [r for r in rows if r["method"] == "bass"]
    assert {r["policy"] for r in traced} == {"cost", "heuristic", "fixed L=1"}
    for r in traced:  # every round the row reports, and only those, in its traces
        assert sum(len(t) for t in r["traces"]) == r["rounds"] > 0
        assert "trace" not in r["policy_state"]
    fixed = next(r for r in traced if r["policy"] == "fixed L=1")
    assert {L for t in fixed["traces"] for L, *_ in t} <= {0, 1}  # (the token limit may cut a draft to 0)
    assert all(rnd[6] is None for t in fixed["traces"] for rnd in t)  # only the cost policy predicts
    cost = next(r for r in traced if r["policy"] == "cost")
    drafting = [rnd for t in cost["traces"] for rnd in t if rnd[0] > 0]
    assert drafting and all(0 <= rnd[6] <= rnd[0] * rnd[1] for rnd in drafting)  # at most every draft accepted
    assert "regular" not in {r["method"] for r in rows if "traces" in r}
    assert "sample" in (out / "real_bench.txt").read_text()  # the summary table is in the report
