"""bench/gpu_bench.py: its arithmetic against hand-computed values, and a CPU dry run of its plumbing."""


import pytest
import torch

import bench.gpu_bench as gb
import bench.plot_gpu as pg
from bench.plot_gpu import format_table
from bench.synthetic import TINY, build_pair


def test_kv_and_pass_bytes():
    assert pg.kv_bytes_per_token(32, 32, 128) == 2 * 32 * 32 * 128 * 2  # Llama-7B: 512 KiB per token
    assert pg.pass_bytes(1000, 10, 128, 8, 64.0) == 1000 + 10 * (128 + 8 * 64)


def test_weight_bytes_leave_out_the_embedding():
    pair = build_pair(TINY, 1, dtype=torch.float32)
    H, V, I, D = TINY.hidden_size, TINY.vocab_size, TINY.intermediate_size, TINY.head_dim
    qkv = H * (TINY.num_heads + 2 * TINY.num_kv_heads) * D
    block = qkv + TINY.num_heads * D * H + 3 * H * I + 2 * H  # + the two norms
    assert gb.weight_bytes(pair.target.model) == 4 * (TINY.num_layers * block + H + V * H)
    assert gb.weight_bytes(pair.draft.model) == 4 * (block + H + V * H)  # the shared head is read by both


def test_floor_by_hand():
    # 255 passes of 13.2 GB at 3 TB/s = 1.122 s for 256 tokens
    assert pg.floor_ms_per_token(255, 0, 13.2e9, 0, 3e12, 256) == pytest.approx(1122 / 256)
    # rounds + draft steps
    assert pg.floor_ms_per_token(60, 300, 13e9, 1e9, 2.5e12, 256) == pytest.approx(1e3 * (60 * 13 + 300) / 2500 / 256)
    # 8 sequences one after another: the mean sequence waits for 9/16 of the total
    assert pg.floor_ms_per_token(800, 0, 1e9, 0, 1e12, 100, sequential=8) == pytest.approx(800 * 9 / 16 / 100)


def test_hf_and_sequential_latency_by_hand():
    assert pg.hf_ms_per_token(3.0, 0.44, 256) == pytest.approx(10.0)
    # sequences end at 2.0 - 0.1, 4.0 - 0.1, ... 16.0 - 0.1 s: mean 8.9 s over 256 tokens
    assert pg.sequential_ms_per_token(2.0, 0.1, 8, 256) == pytest.approx(8900 / 256)
    assert pg.sequential_ms_per_token(2.0, 0.1, 1, 256) == pytest.approx(1900 / 256)


def test_derived_columns_by_hand():
    rows = [dict(method="regular (ours)", k=8, ms_per_token=10.0, throughput=800.0),
            dict(method="HF generate (static+compile)", k=8, ms_per_token=8.0, throughput=1000.0),
            dict(method="BASS-ragged", k=8, ms_per_token=4.0, throughput=2000.0),
            dict(method="BASS-ragged", k=2, ms_per_token=4.0, throughput=500.0)]
    pg.add_derived(rows, peak_flops=7e14, flops_per_token=1.4e10)
    bass8, bass2 = rows[2], rows[3]
    assert bass8["util"] == pytest.approx(1.4e10 * 2000 / 7e14)  # 4%
    assert bass8["x_regular"] == pytest.approx(2.5) and bass8["x_hf"] == pytest.approx(2.0)
    assert bass2["x_regular"] is None and bass2["x_hf"] is None
    table = format_table(rows)
    assert "2.50" in table and "4.0" in table.splitlines()[3]  # util% of BASS k=8
    assert table.splitlines()[4].split()[-1] == "-"


def test_stepwise_proposals_reach_both_engines():
    """--stepwise-proposals, the A/B of chained proposals: both engines of the run draft step by step; by
    default both chain."""
    for flag, chained in (([], True), (["--stepwise-proposals"], False)):
        bench = gb.Bench(gb.parse_args(["--device", "cpu", "--target", "tiny", *flag]))
        assert bench.graphed.tuning.proposal_graphs is chained and bench.eager.tuning.proposal_graphs is chained
