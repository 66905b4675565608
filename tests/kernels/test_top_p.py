"""Top-p candidates straight from the logits: the Triton kernel (interpreted on the CPU) against its torch
twin, on the kernel's own probabilities, and those probabilities against torch's softmax."""

from __future__ import annotations

import pytest
import torch
from fused_cases import DEVICE, fresh_gen, needs_cuda, poison

import kernels.top_p as mod
from kernels.top_p import tempered_probs_fused, top_p_candidates_fused, top_p_candidates_ref

pytestmark = pytest.mark.slow  # Triton kernels in the interpreter


def _rows(V: int, gen: torch.Generator) -> torch.Tensor:
    """Peaked, flat, tied and spiked rows [6, V]."""
    rows = [torch.randn(V, generator=gen) * 4,  # peaked
            torch.zeros(V),  # flat: all V tokens in one bin, more than K
            torch.randint(0, 200, (V,), generator=gen).float() / 20,  # tie groups of ~15 tokens
            torch.where(torch.arange(V) % 37 == 0, 9.0, 0.0),  # one tie group of V / 37 tokens on top
            torch.cat([torch.tensor([30.0]), torch.zeros(V - 1)]),  # all the mass on token 0
            torch.randn(V, generator=gen) * 2 - torch.arange(V) / V * 20]  # a long tail
    return torch.stack(rows).to(DEVICE)


@pytest.mark.parametrize("K", [64, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("chunk", [256, 4096], ids=["12 chunks", "one chunk"])
def test_candidates_are_the_twins_on_the_kernels_own_probabilities(monkeypatch, K, dtype, chunk) -> None:
    poison(monkeypatch, mod)
    monkeypatch.setattr(mod, "CHUNK", chunk)  # many chunks: the offsets where each writes its candidates
    logits = _rows(3000, fresh_gen()).to(dtype)
    vals, ids = top_p_candidates_fused(logits, 0.8, K)
    probs = tempered_probs_fused(logits, 0.8)
    want_vals, want_ids = top_p_candidates_ref(probs, K)
    assert torch.equal(ids, want_ids) and torch.equal(vals, want_vals)
    real = vals > 0
    assert torch.equal(probs.gather(-1, ids)[real], vals[real])  # bit for bit the same p on both paths
    n = real.sum(-1)
    assert n[1] == 0 and n[4] == 1 and bool((n[[0, 2, 5]] > 0).all())  # flat: no candidate; spike: one
    for r in range(logits.shape[0]):  # every token more likely than the least likely candidate is one
        if n[r]:
            assert int((probs[r] > vals[r, n[r] - 1]).sum()) < n[r] <= K
    assert bool((ids[~real] == 0).all())


def test_candidates_keep_whole_tie_groups_in_id_order(monkeypatch) -> None:
    monkeypatch.setattr(mod, "CHUNK", 512)  # the tie group spans chunks
    V = 3000
    logits = torch.zeros(1, V)
    logits[0, [7, 3, 2999, 100]] = 5.0  # one tie group of four on top
    logits[0, 50] = 6.0
    vals, ids = top_p_candidates_fused(logits.to(DEVICE), 1.0, 64)
    assert ids[0, :5].tolist() == [50, 3, 7, 100, 2999]
    assert vals[0, 1] == vals[0, 2] == vals[0, 3] == vals[0, 4] < vals[0, 0]


def test_probabilities_are_the_softmax(monkeypatch) -> None:
    monkeypatch.setattr(mod, "CHUNK", 1024)
    logits = _rows(5000, fresh_gen())
    logits[0, 1024:3000] = float("-inf")  # whole chunks masked out, as a model may mask unused ids
    for t in (0.3, 1.0, 1.7):
        probs = tempered_probs_fused(logits, t)
        torch.testing.assert_close(probs, torch.softmax(logits / t, -1), rtol=2e-5, atol=1e-7)
        torch.testing.assert_close(probs.sum(-1), torch.ones(logits.shape[0], device=DEVICE))


def test_bad_arguments_say_what_to_do() -> None:
    logits = torch.randn(2, 100, device=DEVICE)
    with pytest.raises(ValueError, match="power of two"):
        top_p_candidates_fused(logits, 1.0, 100)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        tempered_probs_fused(logits, 0.0)


@needs_cuda
def test_full_vocabulary_on_cuda() -> None:
    """The embedded target's vocabulary, bf16 logits as its head writes them, a batch of 8 at width 2."""
    gen = fresh_gen()
    logits = (torch.randn(8, 2, 151936, generator=gen) * 3).to("cuda", torch.bfloat16)
    vals, ids = top_p_candidates_fused(logits, 0.8, 1024)
    probs = tempered_probs_fused(logits, 0.8)
    want_vals, want_ids = top_p_candidates_ref(probs, 1024)
    assert torch.equal(ids, want_ids) and torch.equal(vals, want_vals)
    torch.testing.assert_close(probs, torch.softmax(logits.float() / 0.8, -1), rtol=2e-5, atol=1e-8)
