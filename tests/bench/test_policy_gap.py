"""bench/policy_gap.py by hand: which rows it pools, and its six tables."""

import json

import policy_gap as pg
import pytest


def _row(policy, traces, passes, **extra):
    return dict(method="bass", k=8, drafter="model", policy=policy, ms_per_token=sorted(passes)[1],
                ms_per_token_passes=passes, traces=traces, **extra)


# one generation each: [L, B, ms, sample, overlapped, drafts accepted by the batch, predicted or None]
COST = [[6, 8, 4.0, False, False, 8, 20.0], [6, 8, 2.5, True, True, 16, 18.0], [3, 8, 2.0, True, True, 12, 12.0],
        [3, 2, 2.0, True, True, 2, 3.0]]
FIXED = [[3, 8, 3.0, False, False, 8, None], [3, 8, 2.0, True, True, 16, None], [3, 4, 2.0, True, True, 8, None]]
RUN = {"rows": [
    dict(method="regular", k=8, drafter=None, policy=None, ms_per_token=1.7, ms_per_token_passes=[1.7]),
    _row("cost", [COST], [0.95, 0.90, 0.92]),
    _row("fixed L=3", [FIXED], [0.88, 0.86, 0.87]),
    _row("cost, margin 0", [], [0.93, 0.91, 0.99], pair="margin"),
    _row("cost", [COST], [2.0, 2.0, 2.0], look_ahead=False),  # the look-ahead off: not the default engine
    _row("cost", [COST], [0.5, 0.5, 0.5], verdicts="service"),  # the sandbox beside it
    _row("cost, margin 0.05", [COST], [0.5, 0.5, 0.5]),  # another policy
    dict(_row("fixed L=3", [FIXED], [0.1, 0.1, 0.1]), k=32),  # another batch
]}


def test_it_pools_the_default_policys_rows_and_the_fixed_length_of_one_k():
    got = pg.gather({"a.json": RUN, "b.json": {"rows": RUN["rows"][1:2]}}, k=8, drafter="model", fixed=3)
    assert sorted(got["passes"]["cost"]) == sorted([0.95, 0.90, 0.92, 0.93, 0.91, 0.99, 0.95, 0.90, 0.92])
    assert got["passes"]["fixed"] == [0.88, 0.86, 0.87]
    assert got["runs"]["b.json"] == {"cost": [0.95, 0.90, 0.92]}
    assert len(got["traces"]["cost"]) == 2 and len(got["traces"]["fixed"]) == 1


def test_rounds_at_the_full_batch_with_each_generations_first_apart():
    traces = pg.gather({"a.json": RUN}, k=8, drafter="model", fixed=3)["traces"]
    rows = {(r["kind"], r["first"], r["L"]): r for r in pg.rounds_table(traces, k=8)}
    assert set(rows) == {("cost", True, 6), ("cost", False, 6), ("cost", False, 3), ("fixed", True, 3),
                         ("fixed", False, 3)}  # batch 2 and 4 rounds are not at k's bucket
    later6 = rows[("cost", False, 6)]
    assert later6["acc"] == pytest.approx(2.0) and later6["pred"] == pytest.approx(18 / 8)
    assert later6["share"] == pytest.approx(0.5) and later6["tokens_per_ms"] == pytest.approx(3.0 / 2.5)
    first = rows[("cost", True, 6)]
    assert first["share"] == 1.0 and first["acc"] == pytest.approx(1.0) and first["tokens_per_ms"] == pytest.approx(0.5)
    fixed = rows[("fixed", False, 3)]
    assert fixed["pred"] is None and fixed["tokens_per_ms"] == pytest.approx(3.0 / 2.0)


def test_where_charges_each_round_to_the_sequences_live_in_it():
    traces = pg.gather({"a.json": RUN}, k=8, drafter="model", fixed=3)["traces"]
    got = {(w["kind"], w["batch"]): w for w in pg.where_table(traces)}
    # cost: first 4 ms x 8 for 8 + 8 tokens; batch 8: 2.5 x 8 + 2 x 8 for 24 + 20; batch 2: 2 x 2 for 2 + 2
    assert got[("cost", "first")]["seq_ms_per_token"] == pytest.approx(32 / 16)
    assert got[("cost", 8)]["seq_ms_per_token"] == pytest.approx(36 / 44)
    assert got[("cost", 2)]["share"] == pytest.approx(4 / 72)
    assert got[("cost", "all")]["seq_ms_per_token"] == pytest.approx(72 / 64) and got[("cost", "all")]["share"] == 1
    assert [w["batch"] for w in pg.where_table(traces) if w["kind"] == "fixed"] == ["first", 4, 8, "all"]


def test_openings_are_told_apart_per_run_and_length():
    """A first round's time moves with the run, so the table keeps each run's first rounds apart, per L."""
    slow_run = {"rows": [_row("cost", [[[2, 8, 3.5, False, False, 4, 6.0]]] * 3, [1.0, 1.0, 1.0]),
                         _row("fixed L=3", [[[3, 8, 3.4, False, False, 8, None]]], [1.0, 1.0, 1.0])]}
    got = pg.gather({"a.json": RUN, "slow.json": slow_run}, k=8, drafter="model", fixed=3)
    openings = pg.openings_table(got["run_traces"], 8)
    rows = {(o["run"], o["kind"], o["L"]): (o["rounds"], o["median_ms"]) for o in openings}
    # RUN's default-engine rows at k = 8 with traces: one cost row (its margin-0 row has none) and one fixed row
    assert rows == {("a.json", "cost", 6): (1, 4.0), ("a.json", "fixed", 3): (1, 3.0),
                    ("slow.json", "cost", 2): (3, 3.5), ("slow.json", "fixed", 3): (1, 3.4)}
    text = pg.format_report(got, [], [], 3, openings=openings)
    assert "slow.json" in text and "cost L=2: 3 x 3.50   fixed L=3: 1 x 3.40" in text


def test_main_prints_and_writes_the_tables(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(RUN))
    out = pg.main([str(path), "--out", str(tmp_path / "gap.json")])
    text = capsys.readouterr().out
    fixed = next(line for line in text.splitlines() if line.split()[:2] == ["fixed", "L=3"])
    assert fixed.split()[2:6] == ["3", "passes", "median", "0.870"]
    assert "run.json" in text and "cost 0.925  fixed 0.870" in text
    assert json.loads((tmp_path / "gap.json").read_text())["passes"]["fixed"] == [0.88, 0.86, 0.87]
    assert out["where"][-1]["batch"] == "all"
    with pytest.raises(SystemExit, match="no BASS row"):
        pg.main([str(path), "--fixed", "5", "--k", "32"])


def test_runs_of_one_file_name_are_told_apart_by_their_folders(tmp_path, capsys):
    """The `ab` stage's runs are old1/real_bench.json, new1/real_bench.json ...: each is pooled, by its folder."""
    paths = []
    for run in ("new1", "new2"):
        (tmp_path / run).mkdir()
        paths.append(tmp_path / run / "real_bench.json")
        paths[-1].write_text(json.dumps(RUN))
    out = pg.main([str(p) for p in paths])
    assert set(out["runs"]) == {"new1/real_bench.json", "new2/real_bench.json"}
    assert len(out["passes"]["fixed"]) == 6
    assert pg.run_names([tmp_path / "a.json", tmp_path / "b.json"]) == ["a.json", "b.json"]


def test_slow_rounds_are_measured_against_their_rows_own_median_of_their_length():
    # one row, batch 8: after a round of its length, L = 3 rounds of 2.0, 2.0, 2.6 ms (median 2.0) and L = 6 rounds
    # of 3.0 and 3.0; the first round, a switch, and a batch-4 round are left out
    trace = [[3, 8, 9.0, False, False, 8, None], [3, 8, 2.0, True, True, 8, None], [3, 8, 2.0, True, True, 8, None],
             [3, 8, 2.6, True, True, 8, None], [6, 8, 5.0, False, True, 8, None], [6, 8, 3.0, True, True, 8, None],
             [6, 8, 3.0, True, True, 8, None], [6, 4, 9.0, True, True, 4, None]]
    got = pg.slow_table({"cost": [[trace]], "fixed": [[FIXED]]}, k=8)
    cost = next(r for r in got if r["kind"] == "cost")
    assert cost["rounds"] == 5  # 2.0 (after the first), 2.0, 2.6; 3.0, 3.0
    assert cost["mean_excess_ms"] == pytest.approx(0.6 / 5)
    assert cost["share_of_round"] == pytest.approx((0.6 / 5) / (12.6 / 5))
    assert cost["share_over"] == pytest.approx(1 / 5)
    assert next(r for r in got if r["kind"] == "fixed")["rounds"] == 1  # FIXED: one batch-8 round after one of its L


def test_shapes_groups_each_pass_by_the_shapes_it_met_against_its_runs_fixed_median():
    run = {"rows": [_row("cost", [], [0.88, 0.90, 0.99], deferred_captures_passes=[0, 3, 9]),
                    _row("fixed L=3", [], [0.88, 0.86, 0.87], deferred_captures_passes=[0, 0, 0])]}
    got = {r["kind"]: r for r in pg.shapes_table(pg.gather({"a.json": run}, k=8, drafter="model", fixed=3))}
    cost = got["cost"]
    assert cost["passes"] == 3 and cost["mean_shapes"] == pytest.approx(4.0)
    assert cost["0-1"] == (1, pytest.approx(0.88 / 0.87)) and cost["2-5"] == (1, pytest.approx(0.90 / 0.87))
    assert cost["6-"] == (1, pytest.approx(0.99 / 0.87))
    assert got["fixed"]["0-1"][0] == 3 and got["fixed"]["6-"] == (0, None)


def test_shapes_names_the_commonest_shapes_the_runs_name():
    """Where a run names the shapes its passes built (`deferred_shapes_passes`), the table lists the commonest per
    kind, counted over every pass and run, and the report prints them; runs from before name none."""
    named = [["chain B8 16/13 pool 0", "chain B2 10/5 pool 1"], [], ["chain B8 16/13 pool 0"]]
    run = {"rows": [_row("cost", [], [0.88, 0.90, 0.99], deferred_captures_passes=[2, 0, 1],
                         deferred_shapes_passes=named),
                    _row("fixed L=3", [], [0.88, 0.86, 0.87], deferred_captures_passes=[0, 0, 0])]}
    got = pg.gather({"a.json": run, "b.json": run}, k=8, drafter="model", fixed=3)
    table = {r["kind"]: r for r in pg.shapes_table(got)}
    assert table["cost"]["commonest"] == [("chain B8 16/13 pool 0", 4), ("chain B2 10/5 pool 1", 2)]
    assert table["fixed"]["commonest"] == []
    report = pg.format_report(got, [], [], 3, shapes=list(table.values()))
    assert "commonest: chain B8 16/13 pool 0 x4, chain B2 10/5 pool 1 x2" in report
    assert report.count("commonest") == 1
