"""bench/vocab_ops_bench.py: the alternatives it times compute what the rule computes (CPU)."""

from __future__ import annotations

import json

import torch


def test_alternatives_compute_the_same_and_the_table_is_written(tmp_path, monkeypatch):
    import vocab_ops_bench as vb

    monkeypatch.setattr(vb.sampling, "TOP_P_CANDIDATES", 32)  # the verify rule's kernels, interpreted: a short sort

    z = torch.randn(6, 512) * 3
    torch.testing.assert_close(vb.softmax_by_logsumexp(z), torch.softmax(z, -1))
    p = torch.softmax(z, -1)
    p[0, 100:140] = p[0, 7]  # ties across chunks at values inside the top k
    want = torch.topk(p, 64, dim=-1)
    for chunks in (2, 4, 8):
        values, ids = vb.topk_two_stage(p, 64, chunks)
        assert torch.equal(values, want.values)
        assert torch.equal(p.gather(-1, ids), values)  # each id holds its value
        assert all(len(set(r.tolist())) == 64 for r in ids)  # no token twice
    rows = vb.main(["--rows", "1,2", "--vocab", "2048", "--draft-vocab", "512", "--chunks", "4", "--reps", "1",
                    "--verify-widths", "1,3", "--batch", "2", "--out", str(tmp_path)])
    assert [r["rows"] for r in rows] == [1, 2] and all(r["topk_two_stage_4_us"] > 0 for r in rows)
    assert all(r["candidates_kernel_us"] > 0 and r["candidates_kept_mass_max_diff"] < 1e-5 for r in rows)
    assert all(r["draft_rule_kernel_us"] > 0 and r["draft_rule_same_token"] == 1.0 for r in rows)
    assert all(r["draft_rule_candidates_us"] > 0 and r["draft_rule_candidates_same_token"] == 1.0 for r in rows)
    saved = json.loads((tmp_path / "vocab_ops.json").read_text())
    verify = saved["verify"]  # the verify rule's variants, the kernels' outputs equal to the torch tail's
    assert verify["verify_w1_same_outputs"] is True and verify["verify_w3_same_outputs"] is True
    assert all(verify[f"verify_w{w}_{v}_us"] > 0 for w in (1, 3) for v in vb.VERIFY_VARIANTS)
    # float32 rounding of probabilities up to 1 reads about 1e-6 on some CPUs (1.07e-6 on an AMD EPYC); a wrong
    # normalisation reads orders of magnitude more
    assert saved["rows"][0]["k"] == 512 and saved["rows"][0]["softmax_max_abs_diff"] < 1e-5
