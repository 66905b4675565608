"""bench/attention_configs.py: its plumbing on a tiny shape in the Triton interpreter (the times need a GPU)."""

from __future__ import annotations

import json


def test_attention_configs_times_the_chosen_configuration_beside_the_grid(tmp_path):
    import attention_configs

    rows = attention_configs.main(["--tiny", "--out", str(tmp_path)])
    assert [(r["shape"], r["T"]) for r in rows] == [("tiny", 1), ("tiny", 9)]
    for r in rows:
        assert r["chosen"]["BLOCK_M"] == 16  # decode tiles: 18 rows at T = 9 in two of 16
        assert {str(b["config"]) for b in r["best"]} >= {"chosen"}  # three configurations timed, chosen among them
        assert len(r["best"]) == len(r["timed"]) == 3 and all(b["us"] > 0 for b in r["timed"])
        assert max(b["max_abs_diff"] for b in r["best"]) < 1e-4  # every candidate computes the same attention
    assert json.loads((tmp_path / "attention_configs.json").read_text()) == rows
