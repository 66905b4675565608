"""bench/gpu_bench.py dry-run whole on the CPU: the slow part of test_gpu_bench.py."""

import json

import pytest

import bench.gpu_bench as gb

pytestmark = pytest.mark.slow  # whole dry runs


def test_cpu_dry_run(tmp_path, monkeypatch):
    """The whole script on a tiny model: calibration, engine rows, floors, JSON, table."""
    monkeypatch.setattr("sys.argv", ["gpu_bench.py", "--device", "cpu", "--target", "tiny", "--out", str(tmp_path),
                                     "--new-tokens", "8", "--prompt-len", "8", "--ks", "2", "--side-ks", "2",
                                     "--methods", "ragged,regular", "--fixed-l", "", "--calib-grid", "1e-2,1",
                                     "--calib-tokens", "8"])
    gb.main()
    data = json.loads((tmp_path / "gpu_bench.json").read_text())
    methods = {r["method"] for r in data["rows"]}
    assert methods == {"BASS-ragged", "regular (ours)"}
    for r in data["rows"]:
        assert r["floor_ms"] > 0 and r["x_regular"] is not None
        assert r["ms_per_token"] > 0 and r["k"] == 2
    assert set(data["info"]["calibration"]["scales"]) == {"0.6", "0.8", "0.9"}
    assert "synthetic acceptance" in (tmp_path / "gpu_bench.txt").read_text()


def test_cpu_dry_run_policy_rows(tmp_path, monkeypatch):
    """Each BASS row records the draft-length policy it ran (`policy_state`): the default fixed L = 3, and each
    --fixed-l row its own length, never exceeded (shorter only where a sequence nears its token limit)."""
    monkeypatch.setattr("sys.argv", ["gpu_bench.py", "--device", "cpu", "--target", "tiny", "--out", str(tmp_path),
                                     "--new-tokens", "12", "--prompt-len", "8", "--ks", "2", "--side-ks", "2",
                                     "--methods", "ragged,regular", "--fixed-l", "2", "--calib-grid", "1e-2,1",
                                     "--calib-tokens", "8"])
    gb.main()
    rows = {r["method"]: r for r in json.loads((tmp_path / "gpu_bench.json").read_text())["rows"]}
    for name, L in (("BASS-ragged", 3), ("BASS-ragged fixed L=2", 2)):
        r = rows[name]
        state = r["policy_state"]  # the default, "auto", drafts l0 = 3 where no cost table was measured (the CPU)
        assert (state["policy"], state["L"]) == ("auto" if name == "BASS-ragged" else "fixed", L)
        assert 0 < r["mean_draft_length"] <= L and r["draft_passes"] <= L * r["target_passes"]
        assert r["captures"] == 0  # no CUDA graphs on the CPU
    assert rows["regular (ours)"]["mean_draft_length"] == 0
