"""bench/cpu_dtype_bench.py: its four interleaved rows and their ratios, on a tiny model on the CPU."""

import json

import cpu_dtype_bench as cdb
import pytest


def test_four_rows_two_dtypes_and_the_ratios_between_them(tiny_dir, tmp_path, monkeypatch):
    out = tmp_path / "cpu_dtype.json"
    monkeypatch.setenv("BASS_CPU_DTYPE", "float32")  # the run measures this CPU's choice whatever the pin
    assert cdb.main(["--target", str(tiny_dir("llama")), "--k", "2", "--prompts", "1", "--max-new-tokens", "8",
                     "--repeats", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["info"]["cpu_dtype"] in ("float32", "bfloat16")
    assert result["info"]["greedy_bf16_agrees"] is True  # fixed-size calls: bf16 BASS keeps regular's tokens
    rows = {(r["dtype"], r["method"]): r for r in result["rows"]}
    assert set(rows) == {(d, m) for d in ("float32", "bfloat16") for m in ("regular", "bass")}
    for (dtype, method), r in rows.items():
        assert len(r["ms_per_token_passes"]) == 2 and r["ms_per_token"] in r["ms_per_token_passes"]
        assert r["x_regular"] == pytest.approx(rows[(dtype, "regular")]["ms_per_token"] / r["ms_per_token"])
        assert r["x_float32"] == pytest.approx(rows[("float32", method)]["ms_per_token"] / r["ms_per_token"])
        assert r["tokens"] > 0 and r["sequences"] == 2
    assert rows[("float32", "regular")]["x_regular"] == 1.0 and rows[("float32", "bass")]["x_float32"] == 1.0
    table = cdb.format_table(result).splitlines()
    assert len(table) == 5 and table[2].split()[:2] == ["float32", "bass"]
