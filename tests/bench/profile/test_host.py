"""bench/profile/host.py: its plumbing on tiny CPU models (the launch table needs CUDA; the figures a GPU)."""

from __future__ import annotations

import json

from tiny import make_model


def test_host_costs_dry_run(tmp_path):
    import bench.profile.host as host_costs

    target, draft = make_model(tmp_path / "target", seed=0), make_model(tmp_path / "draft", seed=1)
    out = tmp_path / "out"
    info = host_costs.main(["--target", str(target), "--draft", str(draft), "--k", "2", "--max-new-tokens", "6",
                            "--out", str(out)])
    assert info["launches"] == []  # no CUDA, no graphs
    for label in ("regular", "model fixed L=1"):
        prof = info["python"][label]
        assert prof["rounds"] > 0 and prof["decode_ms_per_round"] > 0
        own = [r["own_us"] for r in prof["by_own"]]
        assert own == sorted(own, reverse=True) and own[0] > 0
        names = [r["function"] for r in prof["by_cumulative"]]
        assert any("__iter__" in n and "pipeline" in n for n in names)  # the round loop itself is profiled
    assert json.loads((out / "host_costs.json").read_text())["k"] == 2
    assert "by own time" in (out / "host_costs.txt").read_text()


def test_engine_graphs_names_forwards_and_chains():
    """Every captured graph gets a name: a forward by batch, width, slot and rule, a draft's chain (a whole
    proposal) by batch, first step's width, L and pool; graphs not captured (the CPU twin's) are left out."""
    from types import SimpleNamespace

    from bass.runtime.graphs import ChainKey, GraphKey
    from bench.profile.host import engine_graphs

    captured = SimpleNamespace(graph=SimpleNamespace(replay=lambda: None))
    class VerifyRule:  # a rule is named by its type
        pass

    forward = GraphKey(8, 4, 1, None, False, None, False, VerifyRule(), (), 1)
    chain = ChainKey(8, 1, ("rule", "attn", 2, 3), (), ("proposal", 0))
    engine = SimpleNamespace(target_forward=SimpleNamespace(_graphs={forward: captured}),
                             _draft_fwd=SimpleNamespace(_graphs={chain: captured,
                                                                 chain._replace(batch=4): SimpleNamespace(graph=None)}))
    assert [name for name, _ in engine_graphs(engine)] == ["target B8 T4 slot1 + VerifyRule",
                                                           "draft B8 chain T2 L3 pool0"]
