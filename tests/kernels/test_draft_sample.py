"""A draft step's top-p sample: the Triton kernel (interpreted on the CPU) against its torch twin on the same
candidates, the token drawn from the q it reports, and the draft rule taking it on CUDA. q is sparse: (mass, target
id) pairs, `dense` scatters them over the vocabulary."""

from __future__ import annotations

import pytest
import torch
from fused_cases import DEVICE, fresh_gen, poison

import kernels.draft_sample as mod
from bass import sampling
from bass.config import SamplingParams
from bass.rules import TokenSubset, draft_rule
from kernels.draft_sample import draft_sample_fused, draft_sample_ref, sample_candidates
from kernels.top_p import top_p_candidates_fused


def dense(q: torch.Tensor, q_ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """The sparse q [R, K] at q_ids [R, K] over the vocabulary: [R, vocab] (repeated ids carry mass 0)."""
    return torch.zeros(q.shape[0], vocab, device=q.device).scatter_add_(1, q_ids, q)


def _rows(V: int, gen: torch.Generator) -> torch.Tensor:
    """Peaked (a dozen likely tokens over noise), flat (no candidate), tied, spiked and long-tailed rows [5, V]."""
    peaked = torch.randn(V, generator=gen) * 0.5 - 4
    peaked[torch.randperm(V, generator=gen)[:12]] += torch.linspace(10.0, 7.0, 12)
    return torch.stack([peaked,
                        torch.zeros(V),
                        torch.randint(0, 200, (V,), generator=gen).float() / 20,
                        torch.cat([torch.tensor([30.0]), torch.zeros(V - 1)]),
                        torch.randn(V, generator=gen) * 2 - torch.arange(V) / V * 20]).to(DEVICE)


@pytest.mark.parametrize("reduced", [False, True], ids=["whole vocabulary", "reduced vocabulary"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_kernel_is_its_twin_on_the_same_candidates(monkeypatch, reduced, dtype) -> None:
    poison(monkeypatch, mod)
    gen = fresh_gen()
    V, vocab = 1500, 4000
    ids = torch.sort(torch.randperm(vocab, generator=gen)[:V]).values.to(DEVICE) if reduced else None
    logits = _rows(V, gen).to(dtype)
    u = torch.rand(logits.shape[0], generator=gen).to(DEVICE)
    token, q, q_ids = draft_sample_fused(logits, 0.8, 0.9, u, 64, ids)
    vals, cols = top_p_candidates_fused(logits, 0.8, 64)
    want_token, want_q, want_ids = draft_sample_ref(vals, cols, 0.9, u, ids)
    assert torch.equal(token, want_token) and torch.equal(q_ids, want_ids)
    torch.testing.assert_close(q, want_q, rtol=1e-6, atol=1e-7)  # (prefix sums: the order of additions)
    assert bool((q[:, :-1] >= q[:, 1:]).all())  # descending: the verify reads the pairs up to the last m > 0
    q = dense(q, q_ids, vocab if reduced else V)
    torch.testing.assert_close(q.sum(-1).cpu(), torch.ones(logits.shape[0]))
    assert bool((q.gather(1, token[:, None]) > 0).all())  # the token is in q's support
    first = ids[0] if reduced else 0
    assert int(token[1]) == int(first) and float(q[1, first]) == 1.0  # flat: no candidate, slot 0 with q = 1
    assert int(token[3]) == int(ids[0] if reduced else 0) and float(q[3].max()) == 1.0  # all mass on column 0
    kept = (q > 0).sum(-1)
    assert 1 < int(kept[0]) < 12  # top-p cut inside the candidates


def test_the_token_is_drawn_from_the_q_it_reports() -> None:
    """Over a fine grid of u, each token is drawn u's inverse-CDF share of the time: its q, within a grid step;
    u -> 1 never lands on a candidate of q = 0."""
    N, V = 1000, 300
    logits = (torch.randn(1, V, generator=fresh_gen()) * 1.5).to(DEVICE)
    vals, cols = top_p_candidates_fused(logits, 0.8, 64)
    u = ((torch.arange(N) + 0.5) / N).to(DEVICE)
    token, q, q_ids = sample_candidates(vals.expand(N, -1), cols.expand(N, -1), 0.7, u)
    q = dense(q, q_ids, V)
    counts = torch.bincount(token.cpu(), minlength=V).double() / N
    assert float((counts - q[0].cpu().double()).abs().max()) <= 1.0 / N + 1e-9
    assert 1 < int((q[0] > 0).sum()) < int((vals[0] > 0).sum())  # some candidates cut by top-p
    top, q1, ids1 = sample_candidates(vals, cols, 0.7, torch.tensor([0.99999994], device=DEVICE))
    assert float(dense(q1, ids1, V)[0, top[0]]) > 0


def test_the_draft_rule_takes_the_kernel_where_the_verify_does(monkeypatch) -> None:
    """`bass.rules.DraftRule` under top-p: the kernel's token and q (FUSED_TOP_P "always": the interpreter),
    the same rule's torch path where it is off, and the two agree where K candidates hold the top-p set."""
    gen = fresh_gen()
    ids = torch.sort(torch.randperm(900, generator=gen)[:600]).values.to(DEVICE)
    logits = (torch.randn(3, 1, 600, generator=gen) * 4).to(DEVICE)
    u = torch.rand(3, generator=gen).to(DEVICE)
    rule = draft_rule(SamplingParams(temperature=0.8, top_p=0.9), 900, TokenSubset(ids))
    monkeypatch.setattr(sampling, "FUSED_TOP_P", "always")
    token, q, q_ids = rule(logits, u)
    vals, cols = top_p_candidates_fused(logits[:, -1], 0.8, sampling.DRAFT_CANDIDATES)
    want_token, want_q, want_ids = draft_sample_ref(vals, cols, 0.9, u, ids)
    assert torch.equal(token, want_token) and torch.equal(q_ids, want_ids)
    torch.testing.assert_close(q, want_q, rtol=1e-6, atol=1e-7)
    monkeypatch.setattr(sampling, "FUSED_TOP_P", False)
    torch_token, torch_q, torch_ids = rule(logits, u)
    assert torch.equal(torch_token, token)
    torch.testing.assert_close(dense(torch_q, torch_ids, 900), dense(q, q_ids, 900))
