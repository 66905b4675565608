"""bench/tuning_ab.py: its plumbing on a tiny random pair (the figures need a GPU)."""

from __future__ import annotations

import json

import pytest


def test_tuning_ab_dry_run_times_every_set_in_order_and_restores_the_tiles(tmp_path):
    import tuning_ab

    from bass.models import linear

    tiles = linear.ROW_TILES
    info = tuning_ab.main(["--shape", "tiny", "--k", "2", "--max-new-tokens", "6", "--ls", "2",
                           "--order", "current,first,current", "--out", str(tmp_path)])
    assert [r["set"] for r in info["rows"]] == ["current", "first", "current"]
    assert all(set(r["ms_per_round"]) == {"None", "2"} and min(r["ms_per_round"].values()) > 0 for r in info["rows"])
    assert all(r["tuning"] == "" for r in info["rows"])  # no CUDA: nothing tuned, and every row says so
    assert tiles == linear.ROW_TILES and not linear._choices
    assert json.loads((tmp_path / "tuning_ab.json").read_text())["k"] == 2
    assert (tmp_path / "tuning_ab.txt").read_text().splitlines()[-1].startswith("current")


def test_the_first_grid_is_the_current_grid_before_this_pass_added_to_it():
    import tuning_ab

    first, current = tuning_ab.SETS["first"], tuning_ab.SETS["current"]
    assert current[0][:10] == first[0] and len(current[0]) > len(first[0])
    assert 48 in current[1] and 48 not in first[1]
    wide = tuning_ab.SETS["wide"]
    assert wide[0][:len(current[0])] == current[0] and not set(tuning_ab.WIDE) & set(current[0])
    with pytest.raises(SystemExit):
        tuning_ab.main(["--order", "first,nope"])
