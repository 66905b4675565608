"""bench/pdl_bench.py on the CPU: its plumbing, through a tiny model (PDL cannot run here, so both rows are
the same kernels; on CUDA the H100 run is what counts)."""

import json

import pdl_bench
import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU plumbing; on CUDA the benchmark itself is run")
def test_cpu_run_writes_a_row_per_shape_with_identical_logits(tmp_path):
    result = pdl_bench.main(["--target", "tiny", "--batches", "2", "--widths", "1,2", "--reps", "2",
                             "--prompt", "8", "--out", str(tmp_path)])
    assert [(r["batch"], r["width"]) for r in result["rows"]] == [(2, 1), (2, 2)]
    for row in result["rows"]:
        assert row["off ms"] > 0 and row["pdl ms"] > 0 and row["pdl same logits"]
    (saved,) = tmp_path.glob("pdl_*.json")
    assert json.loads(saved.read_text())["device"].startswith("CPU")
