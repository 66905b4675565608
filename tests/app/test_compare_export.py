"""Comparison table, bar data and CSV/JSON export."""

from __future__ import annotations

import csv
import json
import os
import time

import pandas as pd
import pytest

from app.compare import display_table, numbers_table, per_sequence_table
from app.export import generation_payload, write_comparison, write_generation
from app.ranking import PassSummary, RankedCandidate, TestReport
from bass.eval.compare_results import Comparison, MethodResult, MethodRun
from bass.events import BatchStats, Candidate, GenerationResult, SequenceStats
from bass.metrics import candidates_ms_per_token


def result(method, per_seq_ms, proposed=0, accepted=0):
    cands = tuple(Candidate(0, i, "t", (), "stop", SequenceStats(10, 5, proposed, accepted, ms / 100))
                  for i, ms in enumerate(per_seq_ms))
    mean = sum(per_seq_ms) / len(per_seq_ms)
    stats = BatchStats(method, None, "torch", len(cands), 0.3, 2.0, 10 * len(cands), 5 * len(cands),
                       proposed * len(cands), accepted * len(cands), mean)
    return GenerationResult(cands, stats)


def one_run(method, res, wall_s, **kw) -> MethodResult:
    """A method measured by one run of `wall_s` seconds."""
    return MethodResult(method, (MethodRun(method, res, wall_s),), **kw)


def runs() -> Comparison:
    return Comparison({"bass": one_run("bass", result("bass", [50.0, 70.0], 20, 15), 3.0),
                       "regular": one_run("regular", result("regular", [120.0, 120.0]), 6.0),
                       "single": one_run("single", result("single", [40.0, 40.0], 20, 15), 9.0)})


def test_table_speed_ups_against_regular():
    by = {r["method"]: r for r in numbers_table(runs()).to_dict("records")}
    assert list(by) == ["BASS", "regular", "single-seq"]
    assert by["BASS"]["ms_per_token"] == 60.0
    assert by["BASS"]["token_speed_up"] == pytest.approx(2.0)
    assert by["BASS"]["wall_speed_up"] == pytest.approx(2.0)  # equal tokens: 6 s / 3 s
    assert by["single-seq"]["wall_speed_up"] == pytest.approx(6 / 9)
    assert by["regular"]["token_speed_up"] == 1.0
    assert by["BASS"]["acceptance"] == 0.75 and pd.isna(by["regular"]["acceptance"])
    shown = display_table(runs())
    assert shown.loc[1, "acceptance"] == "—" and shown.loc[0, "acceptance"] == "75%"
    assert shown.loc[0, "× regular (wall)"] == "2.00x" and shown.loc[0, "wall (median)"] == "3.0 s"


def test_a_sequence_stopped_before_its_first_round_has_no_rate():
    """Single-sequence decoding stopped at the first pass never starts the candidates after it: each holds its
    prefill's one token at the time of the stop. They are left out of the method's mean; the run reads stopped
    and gets no speed-up, as a partial run is no comparison."""
    ran = Candidate(0, 0, "t", (), "stop", SequenceStats(40, 20, 30, 20, 18.0))  # 450 ms/token
    waited = [Candidate(0, i, "", (), "cancelled", SequenceStats(1, 0, 0, 0, 18.0)) for i in (1, 2)]  # 18,000
    cut = Candidate(0, 3, "t", (), "cancelled", SequenceStats(10, 4, 8, 5, 18.0))  # 1,800, cut mid-way
    single = GenerationResult((ran, *waited, cut), BatchStats("single", None, "torch", 4, 0.3, 18.0, 52, 24, 38, 25,
                                                              candidates_ms_per_token((ran, *waited, cut))))
    eos = Candidate(0, 0, "", (), "eos", SequenceStats(1, 0, 0, 0, 0.5))  # 500 ms/token: ended by itself
    base = GenerationResult((eos,), BatchStats("regular", None, "torch", 1, 0.3, 0.5, 1, 0, 0, 0, 500.0))
    table = numbers_table(Comparison({"regular": one_run("regular", base, 1.0),
                                      "single": one_run("single", single, 20.0)}))
    by = {r["method"]: r for r in table.to_dict("records")}
    assert by["single-seq"]["ms_per_token"] == pytest.approx((450 + 1800) / 2)
    assert by["single-seq"]["status"] == "stopped at 20.0 s" and pd.isna(by["single-seq"]["token_speed_up"])
    assert by["regular"]["ms_per_token"] == 500.0


def test_no_regular_run_means_no_speed_up():
    without = Comparison({m: v for m, v in runs().results.items() if m != "regular"})
    assert numbers_table(without)["wall_speed_up"].isna().all()


def test_per_sequence_rows():
    per = per_sequence_table(runs())
    assert len(per) == 6
    assert list(per[per["method"] == "BASS"]["ms/token"]) == [50.0, 70.0]


def test_write_comparison_csv_and_json(tmp_path):
    r = runs()
    csv_path, json_path = write_comparison(r, numbers_table(r), per_sequence_table(r), {"k": 2, "seed": 0},
                                           out_dir=tmp_path)
    lines = list(csv.reader(csv_path.open()))
    said = "BASS wrote the 2 candidates (20 tokens, the same for every method) 2.0x faster than regular decoding " \
           "(3.0 s vs 6.0 s) and 3.0x faster than single-sequence speculative decoding (3.0 s vs 9.0 s) in wall time."
    assert lines[:2] == [["comparison"], [said]]
    assert lines[3][0] == "method" and lines[4][0] == "BASS"
    assert any(row and row[0] == "method" and "seq" in row for row in lines[5:])  # per-sequence section
    data = json.loads(json_path.read_text())
    assert data["settings"] == {"k": 2, "seed": 0} and data["sentence"] == said
    assert data["summary"][0]["token_speed_up"] == pytest.approx(2.0)
    assert data["runs"]["BASS"]["wall_s"] == 3.0 and len(data["runs"]["BASS"]["candidates"]) == 2
    assert data["runs"]["BASS"]["state"] == "complete" and data["runs"]["BASS"]["walls_s"] == [3.0]


def test_generation_payload_round_trips(tmp_path):
    rows = [RankedCandidate(1, 0, "code", "shown", TestReport("passed", 2, 2, "", 0.1), 5, 9.0, 0.5, "stop", 1.0),
            RankedCandidate(2, 1, "code2", "shown2", None, 5, 9.0, None, "budget", 1.0)]
    payload = generation_payload(rows, PassSummary(True, True, True, 1, 2), {"tokens": 10}, {"k": 2})
    path = write_generation(payload, out_dir=tmp_path)
    data = json.loads(path.read_text())
    assert data["pass"] == {"pass_at_first": True, "pass_at_all": True, "passed": 1, "total": 2,
                            "time_to_first_pass_s": None}
    assert data["candidates"][0]["tests"] == {"passed": 2, "total": 2, "first_failure": "", "run_time_s": 0.1}
    assert data["candidates"][1]["tests"] is None and data["candidates"][1]["status"] == "untested"


def test_exports_share_one_process_folder_and_old_ones_are_pruned():
    from app import export

    first = write_generation({"candidates": []})
    root = export.export_root()
    assert first.parent.parent == root and first.read_text().startswith("{")
    stale, fresh = root / "stale", root / "fresh"
    stale.mkdir()
    fresh.mkdir()
    old = time.time() - export.KEEP_S - 60
    os.utime(stale, (old, old))
    second = write_generation({"candidates": []})  # an export prunes what is past its keep
    assert not stale.exists() and fresh.exists() and first.exists() and second.parent.parent == root
    assert second.parent != first.parent  # one folder per export: visitors never overwrite each other
    assert export.prune_exports(root, keep_s=0, now=time.time() + 1) >= 3
    assert list(root.iterdir()) == []
