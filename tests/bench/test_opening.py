"""bench/opening.py: its plumbing on tiny CPU models (device busy and the waits need a GPU)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tiny import make_model


def test_opening_dry_run(tmp_path):
    import opening

    target, draft = make_model(tmp_path / "target", seed=0), make_model(tmp_path / "draft", seed=1)
    out = tmp_path / "out"
    report = opening.main(["--target", str(target), "--draft", str(draft), "--k", "2", "--prompts", "2",
                           "--max-new-tokens", "8", "--repeats", "1", "--out", str(out)])
    for mode in ("benchmarked", "synced"):
        for policy in ("cost", "fixed L=3"):
            s = report["opening"][mode][policy]
            assert s["requests"] == 2 and s["prefill_ms"] > 0 and s["round1_ms"] > 0 and s["round2_ms"] > 0
            assert (s["idle_in_ms"] is None) == (mode == "benchmarked")
    assert report["opening"]["synced"]["fixed L=3"]["L1"] == 3
    for policy, prof in report["profiles"].items():
        names = [name for _, _, name in prof["spans"]]
        for label in ("prefill target", "prefill draft", "policy.lengths", "launch", "verify", "policy.update"):
            assert label in names, (policy, label)
        assert "propose" in names or policy == "cost"  # (the cost policy may choose plain steps on a CPU)
        assert [w["window"] for w in prof["windows"]] == ["prefill", "round 1", "round 2"]
        assert all(w["ms"] > 0 and w["device_busy_ms"] is None for w in prof["windows"])  # no device on a CPU
        assert [s[0] for s in prof["spans"]] == sorted(s[0] for s in prof["spans"])
    for per in report["host"].values():  # the synced requests' host clocks, unprofiled
        assert list(per) == ["prefill", "round 1", "round 2"]
        assert per["prefill"]["prefill target"] > 0 and per["prefill"]["read"] >= 0
        assert per["round 1"]["read"] >= 0  # each round's results come back through a HostRead too
        assert per["round 1"]["launch"] >= per["round 1"]["verify"] > 0
    assert json.loads((out / "opening.json").read_text())["k"] == 2
    assert "profile: cost" in (out / "opening.txt").read_text()


def test_labels_are_removed_after_the_block():
    import opening

    import bass.speculative as spec
    from bass.draft_length import DraftLengthPolicy

    before = (spec._launch, DraftLengthPolicy.lengths, DraftLengthPolicy.update)
    with opening.labelled():
        assert spec._launch is not before[0] and DraftLengthPolicy.lengths is not before[1]
    assert (spec._launch, DraftLengthPolicy.lengths, DraftLengthPolicy.update) == before


def test_opening_of_splits_the_first_two_rounds():
    import opening

    stats = SimpleNamespace(prefill_s=0.004, round_ends_s=(0.003, 0.005, 0.007), round_waits_s=(0.001, 0.0005, 0.0),
                            draft_lengths=(3, 6, 6))
    got = opening.opening_of(SimpleNamespace(stats=stats))
    assert got["prefill_ms"] == 4.0 and got["L1"] == 3 and got["L2"] == 6
    assert abs(got["round1_ms"] - 3.0) < 1e-9 and abs(got["round2_ms"] - 2.0) < 1e-9
    assert abs(got["wait1_ms"] - 1.0) < 1e-9 and abs(got["wait2_ms"] - 0.5) < 1e-9
    s = opening.summary([got, {**got, "round1_ms": 5.0, "L1": 2}, {**got, "round1_ms": 4.0}])
    assert s["round1_ms"] == 4.0 and s["L1"] == 3 and s["requests"] == 3


def test_host_split_puts_each_span_in_the_window_it_starts_in():
    import opening

    us = 1e3  # spans in µs
    spans = [(0, 2 * us, "prefill target"), (2 * us, 3 * us, "read"), (3 * us, 4 * us, "policy.lengths"),
             (4 * us, 5 * us, "launch"), (4 * us, 5 * us, "verify"), (5 * us, 6 * us, "read"),
             (6 * us, 7 * us, "policy.update"),
             (7 * us, 9 * us, "launch"), (9 * us, 10 * us, "policy.update"), (10 * us, 11 * us, "launch")]
    assert opening.windows_of(spans) == [("prefill", 0, 3 * us), ("round 1", 3 * us, 7 * us),
                                         ("round 2", 7 * us, 10 * us)]
    got = opening.host_split(spans)
    assert got["prefill"] == {"prefill target": 2.0, "read": 1.0}  # the read before the first round: the first tokens
    assert got["round 1"] == {"policy.lengths": 1.0, "launch": 1.0, "verify": 1.0, "read": 1.0, "policy.update": 1.0}
    assert got["round 2"] == {"launch": 2.0, "policy.update": 1.0}  # the third launch is past the opening
