"""bench/profile/ab.py by hand: which rows it pairs, its ratios, and its refusals."""

import json
import math

import pytest

import bench.profile.ab as ab


def _row(method, passes, policy=None, prefill_ms=4.0, **extra):
    return dict(method=method, k=8, drafter=None if method == "regular" else "model", policy=policy,
                ms_per_token=sorted(passes)[len(passes) // 2], ms_per_token_passes=passes, prefill_ms=prefill_ms,
                throughput=100.0, **extra)


def _run(regular, default, heuristic, *more):
    return {"rows": [_row("regular", regular), _row("bass", default, "auto"), _row("bass", heuristic, "heuristic"),
                     *more]}


def test_rows_are_paired_by_label_and_same_text_rows_pass_by_pass():
    old = [_run([2.0, 2.2], [1.0, 1.2], [1.0, 1.0]), _run([2.0, 2.0], [1.1, 1.1], [1.0, 1.0])]
    only_here = _row("regular", [3.0], pair="look-ahead", look_ahead=False)
    new = [_run([1.9, 2.2], [0.9, 1.0], [0.9, 1.0]), _run([2.0, 1.8], [1.0, 1.1], [0.95, 0.9], only_here)]
    got = {r["label"]: r for r in ab.compare(old, new)}
    assert set(got) == {"regular", "BASS model", "BASS model heuristic"}  # the look-ahead row is in one run only
    reg = got["regular"]
    assert reg["old"] == [2.0, 2.2, 2.0, 2.0] and reg["new"] == [1.9, 2.2, 2.0, 1.8]
    assert reg["ratio"] == pytest.approx(1.95 / 2.0)
    pairs = [1.9 / 2.0, 2.2 / 2.2, 2.0 / 2.0, 1.8 / 2.0]  # old run i's pass p against new run i's
    assert reg["paired"] == pytest.approx(math.exp(sum(map(math.log, pairs)) / 4))
    assert got["BASS model"]["paired"] == pytest.approx((0.9 / 1.0 * 1.0 / 1.2 * 1.0 / 1.1 * 1.1 / 1.1) ** 0.25)
    assert got["BASS model heuristic"]["paired"] == pytest.approx((0.9 * 1.0 * 0.95 * 0.9) ** 0.25)
    assert got["BASS model"]["x_regular_old"] == pytest.approx(2.0 / 1.1)
    assert got["BASS model"]["x_regular_new"] == pytest.approx(1.95 / 1.0)
    assert reg["x_regular_old"] is None
    assert reg["prefill_old"] == reg["prefill_new"] == 4.0


def test_each_sides_prefill_is_shown_beside_its_decoding():
    """ms/token/seq leaves the prefill out: a change that moves work into it must show there."""
    slow = {"rows": [_row("regular", [1.9], prefill_ms=5.0), _row("regular", [1.0], pair="look-ahead",
                                                                   look_ahead=False, prefill_ms=6.0)]}
    fast = {"rows": [_row("regular", [2.0], prefill_ms=4.0), _row("regular", [1.0], pair="look-ahead",
                                                                   look_ahead=False, prefill_ms=3.0)]}
    got = {r["label"]: r for r in ab.compare([fast, fast], [slow, slow])}
    assert got["regular"]["prefill_old"] == 4.0 and got["regular"]["prefill_new"] == 5.0
    assert got["regular (look-ahead off)"]["prefill_new"] == 6.0
    assert "5.00" in ab.format_table(list(got.values()))


def test_a_label_met_twice_is_told_apart_by_its_order(tmp_path, capsys):
    runs = []
    for scale in (1.0, 1.0, 0.9, 0.9):
        run = _run([2.0 * scale], [1.0 * scale], [1.0 * scale], _row("bass", [1.5 * scale], "auto"))
        path = tmp_path / f"{len(runs)}.json"
        path.write_text(json.dumps(run))
        runs.append(str(path))
    ab.main(["--old", *runs[:2], "--new", *runs[2:], "--out", str(tmp_path / "ab.json")])
    rows = {r["label"]: r for r in json.loads((tmp_path / "ab.json").read_text())["rows"]}
    assert rows["BASS model"]["old_median"] == 1.0 and rows["BASS model #2"]["old_median"] == 1.5
    assert rows["BASS model #2"]["ratio"] == pytest.approx(0.9)
    assert "BASS model #2" in capsys.readouterr().out


def test_unequal_sides_are_refused(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps(_run([2.0], [1.0], [1.0])))
    with pytest.raises(SystemExit):
        ab.main(["--old", str(path), str(path), "--new", str(path)])


def test_a_pairs_row_is_divided_by_the_regular_row_of_its_own_pair():
    """As `real_bench.py` divides a run's rows: BASS with the look-ahead off by regular decoding with it off."""
    def run(scale):
        off = dict(pair="look-ahead", look_ahead=False)
        return _run([1.0 * scale], [0.5 * scale], [0.5 * scale], _row("regular", [2.0 * scale], **off),
                    _row("bass", [1.6 * scale], "auto", **off))
    got = {r["label"]: r for r in ab.compare([run(1.0)], [run(0.9)])}
    assert got["BASS model (look-ahead off)"]["x_regular_old"] == pytest.approx(2.0 / 1.6)
    assert got["BASS model (look-ahead off)"]["x_regular_new"] == pytest.approx(2.0 / 1.6)
    assert got["BASS model"]["x_regular_old"] == pytest.approx(1.0 / 0.5)


def test_bass_rows_are_not_paired_when_the_sides_ran_different_drafts():
    """`ab-draft`: another draft's proposals change what the accept test draws, so a BASS row's pass p is not
    the same text on both sides; regular decoding draws no draft and stays paired."""
    def run(draft, scale):
        return dict(_run([2.0 * scale], [1.0 * scale], [1.0 * scale]), info={"args": {"draft": draft}})
    got = {r["label"]: r for r in ab.compare([run("auto", 1.0)], [run("/tmp/tenth.safetensors", 0.9)])}
    assert got["BASS model"]["paired"] is None and got["BASS model"]["ratio"] == pytest.approx(0.9)
    assert got["BASS model heuristic"]["paired"] is None
    assert got["regular"]["paired"] == pytest.approx(0.9)
    same = {r["label"]: r for r in ab.compare([run("auto", 1.0)], [run("auto", 0.9)])}
    assert same["BASS model"]["paired"] == pytest.approx(0.9)
