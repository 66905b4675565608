"""`kernels.pdl`: where programmatic dependent launch is used, and that it changes no result."""

from __future__ import annotations

import os

import pytest
import torch
from fused_cases import DEVICE, needs_cuda, tiny_logits

from bass.models import linear
from bass.models.loader import build_random
from bass.runtime.graphs import capture
from bench.synthetic import TINY
from kernels import get_backend, pdl
from kernels.skinny_gemm import SkinnyConfig

pytestmark = pytest.mark.slow  # Triton kernels in the interpreter


def test_pdl_is_used_only_where_it_can_run(monkeypatch):
    """Off on the CPU, in the interpreter, below compute capability 9.0 and when switched off; on otherwise."""
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(pdl, "_supported", lambda index: True)
    monkeypatch.setattr(pdl, "_INTERPRETED", False)
    assert pdl.launch_args(gpu) == {"PDL": True, "launch_pdl": True}
    assert pdl.launch_args(torch.device("cpu")) == {"PDL": False, "launch_pdl": False}
    monkeypatch.setattr(pdl, "ENABLED", False)
    assert not pdl.active(gpu)
    monkeypatch.setattr(pdl, "ENABLED", True)
    monkeypatch.setattr(pdl, "_INTERPRETED", True)  # the interpreter has no griddepcontrol
    assert not pdl.active(gpu)
    monkeypatch.setattr(pdl, "_INTERPRETED", False)
    monkeypatch.setattr(pdl, "_supported", lambda index: False)  # an A100
    assert not pdl.active(gpu)


@pytest.mark.skipif(DEVICE == "cuda", reason="the interpreter twin; on CUDA the graphed test below runs")
def test_the_kernels_compute_the_same_with_pdl_asked_for(monkeypatch):
    """The CPU twin: with PDL switched on, every fused kernel of a forward (tuned projections included) runs
    through the interpreter, which launches them without it, and the logits are the same as switched off."""
    model = build_random(TINY, seed=21)
    linear.clear()
    for w, b in linear.projections(model):  # every projection through the kernel, the long K split in two
        split = 2 if w.shape[1] >= 128 else 1
        linear._choices[linear._key(w, w, b, 16)] = SkinnyConfig(16, 64, split, 2)
    try:
        monkeypatch.setattr(pdl, "ENABLED", True)
        on = tiny_logits(model, seed=22)
        monkeypatch.setattr(pdl, "ENABLED", False)
        off = tiny_logits(model, seed=22)
    finally:
        linear.clear()
    torch.testing.assert_close(on, off, rtol=0, atol=0)


@needs_cuda
@pytest.mark.gpu
def test_a_graphed_forward_with_pdl_gives_the_same_logits(monkeypatch):
    """A bf16 model whose projections go through the skinny GEMM (split-K included), captured in a CUDA graph
    with PDL on and with it off: the same logits, replay after replay (a missing wait would race). Below
    compute capability 9.0 both graphs launch without PDL, and the test checks that asking for it is harmless."""
    config = TINY.with_(hidden_size=512, intermediate_size=2048, num_heads=8, num_kv_heads=2, head_dim=64,
                        vocab_size=4096, num_layers=6, layer_types=())
    model = build_random(config, device="cuda", dtype=torch.bfloat16, seed=23)
    attn = get_backend("ragged")
    gen = torch.Generator().manual_seed(24)
    cache = model.new_cache(8, 48)
    model(torch.randint(0, config.vocab_size, (8, 32), generator=gen).cuda(), cache,
          torch.full((8,), 32, dtype=torch.int32, device="cuda"), attn)
    start = cache.suffix_len.clone()
    step = torch.randint(0, config.vocab_size, (8, 2), generator=gen).cuda()
    q_len = torch.tensor([2, 1, 2, 0, 2, 1, 2, 2], dtype=torch.int32, device="cuda")  # ragged, one row idle

    def forward():  # device work only, as a graph needs
        logits = model(step, cache, q_len, attn)
        cache.truncate(start)
        return logits

    linear.clear()
    linear.tune(model)
    graphs = {}
    try:
        for on in (False, True):
            monkeypatch.setattr(pdl, "ENABLED", on)
            graphs[on] = capture(forward)
    finally:
        linear.clear()
    (g_off, off), (g_on, on) = graphs[False], graphs[True]
    g_off.replay()
    expected = off.clone()
    for _ in range(20):
        g_on.replay()
        torch.testing.assert_close(on, expected, rtol=0, atol=0)

def test_bass_pdl_0_in_the_environment_switches_it_off():
    import subprocess
    import sys

    def start(value: str | None) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k != "BASS_PDL"} | ({} if value is None else {"BASS_PDL": value})
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(pdl.__file__))  # the repository root
        return subprocess.Popen([sys.executable, "-c", "import kernels.pdl as p; print(p.ENABLED)"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def enabled(proc: subprocess.Popen) -> str:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        return out.strip()

    # the three interpreters start side by side (each spends seconds importing torch), then are read in order
    procs = [start(None), start("0"), start("1")]
    assert tuple(enabled(p) for p in procs) == ("True", "False", "True")
