"""A draft step's top-p sample: the Triton kernels (interpreted on the CPU) against their torch twin, the candidate
set each chunk contributes, the token drawn from the q it reports, and the draft rule taking it on CUDA. q is
sparse: (mass, target id) pairs, `dense` scatters them over the vocabulary."""

from __future__ import annotations

import pytest
import torch
from fused_cases import DEVICE, fresh_gen, poison

import kernels.draft_sample as mod
from bass.config import SamplingParams
from bass.decode import sampling
from bass.decode.rules import TokenSubset, draft_rule
from kernels.draft_sample import draft_sample_fused, draft_sample_ref, sample_candidates
from kernels.top_p import top_p_candidates_fused

pytestmark = pytest.mark.slow  # Triton kernels in the interpreter


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
def test_kernel_is_its_twin(monkeypatch, reduced, dtype) -> None:
    poison(monkeypatch, mod)
    gen = fresh_gen()
    V, vocab = 5000, 8000  # 3 chunks
    ids = torch.sort(torch.randperm(vocab, generator=gen)[:V]).values.to(DEVICE) if reduced else None
    logits = _rows(V, gen).to(dtype)
    u = torch.rand(logits.shape[0], generator=gen).to(DEVICE)
    token, q, q_ids = draft_sample_fused(logits, 0.8, 0.9, u, 64, ids)
    want_token, want_q, want_ids = draft_sample_ref(logits, 0.8, 0.9, u, 64, ids)
    assert torch.equal(token, want_token) and torch.equal(q_ids, want_ids)
    torch.testing.assert_close(q, want_q, rtol=1e-6, atol=1e-7)  # (sums: the order of additions)
    assert bool((q[:, :-1] >= q[:, 1:]).all())  # descending: the verify reads the pairs up to the last m > 0
    sparse = q
    q = dense(q, q_ids, vocab if reduced else V)
    torch.testing.assert_close(q.sum(-1).cpu(), torch.ones(logits.shape[0]))
    assert bool((q.gather(1, token[:, None]) > 0).all())  # the token is in q's support
    # peaked: its dozen likely tokens all join C, so q is exactly top-p of the tempered softmax
    vals, cols = top_p_candidates_fused(logits[:1], 0.8, 64)
    _, exact_q, exact_ids = sample_candidates(vals, cols, 0.9, u[:1], ids)
    kept = int((exact_q > 0).sum())
    assert 1 < kept < 12 and torch.equal(q_ids[0, :kept], exact_ids[0, :kept])  # top-p cut inside C
    torch.testing.assert_close(sparse[0], exact_q[0], rtol=1e-5, atol=1e-7)
    # flat: C is each chunk's first PER_CHUNK columns, uniform under q (top-p keeps them all)
    first = torch.tensor([c * mod.BLOCK + i for c in range(3) for i in range(mod.PER_CHUNK)])  # block c: chunk c
    assert torch.equal(q_ids[1, :3 * mod.PER_CHUNK].cpu(), first if ids is None else ids.cpu()[first])
    torch.testing.assert_close(sparse[1, :3 * mod.PER_CHUNK].cpu(), torch.full((3 * mod.PER_CHUNK,), 1 / 24))
    column0 = int(ids[0]) if reduced else 0
    assert int(token[3]) == column0 and float(q[3].max()) == 1.0  # spiked: all mass on column 0


def test_a_chunk_keeps_its_per_chunk_most_likely_tokens_and_blocks_are_dealt_round_robin() -> None:
    """C is the union of each chunk's PER_CHUNK heads: 12 likely tokens in one block of 32 columns (one chunk)
    leave their 4 least likely out of q; the same 12 one block apart land in 12 chunks and all join it."""
    V = 12 * mod.CHUNK  # 12 chunks
    gen = fresh_gen()
    base = torch.randn(V, generator=gen) * 0.01 - 6
    crowded, dealt = base.clone(), base.clone()
    crowded[:12] += torch.linspace(9.0, 8.0, 12)
    dealt[torch.arange(12) * mod.BLOCK] += torch.linspace(9.0, 8.0, 12)
    logits = torch.stack([crowded, dealt]).to(DEVICE)
    u = torch.rand(2, generator=gen).to(DEVICE)
    token, q, q_ids = draft_sample_fused(logits, 1.0, 0.99, u, 64)
    want_token, want_q, want_ids = draft_sample_ref(logits, 1.0, 0.99, u, 64)
    assert torch.equal(token, want_token) and torch.equal(q_ids, want_ids)
    torch.testing.assert_close(q, want_q, rtol=1e-6, atol=1e-7)
    q = dense(q, q_ids, V).cpu()
    assert bool((q[0, :8] > 0).all()) and bool((q[0, 8:12] == 0).all())  # the chunk's 9th to 12th: left out
    assert bool((q[1, torch.arange(12) * mod.BLOCK] > 0).all())
    torch.testing.assert_close(q.sum(-1), torch.ones(2))


def test_q_is_cut_to_its_first_k_candidates() -> None:
    """More chunk heads than K (3 chunks of 8 heads, K = 16): a row whose top-p set is larger keeps its K most
    likely, renormalised, as the twin does."""
    gen = fresh_gen()
    logits = _rows(5000, gen)[2:3]  # tied: hundreds of tokens inside top-p
    u = torch.rand(1, generator=gen).to(DEVICE)
    token, q, q_ids = draft_sample_fused(logits, 0.8, 0.9, u, 16)
    want_token, want_q, want_ids = draft_sample_ref(logits, 0.8, 0.9, u, 16)
    assert q.shape == (1, 16) and torch.equal(token, want_token) and torch.equal(q_ids, want_ids)
    torch.testing.assert_close(q, want_q, rtol=1e-6, atol=1e-7)
    assert int((q > 0).sum()) == 16 and float(q.sum()) == pytest.approx(1.0)


def test_u_is_read_in_place_from_a_strided_column() -> None:
    """A chain passes u[:, i] of the round's [B, 2L+1] uniforms: no copy, the same draws as from a contiguous u."""
    gen = fresh_gen()
    logits = (torch.randn(4, 700, generator=gen) * 3).to(DEVICE)
    u = torch.rand(4, 5, generator=gen).to(DEVICE)
    for i in range(5):
        strided = draft_sample_fused(logits, 0.8, 0.95, u[:, i], 16)
        contiguous = draft_sample_fused(logits, 0.8, 0.95, u[:, i].contiguous(), 16)
        assert all(torch.equal(a, b) for a, b in zip(strided, contiguous, strict=True))
    tokens = {tuple(draft_sample_fused(logits, 0.8, 0.95, u[:, i], 16)[0].tolist()) for i in range(5)}
    assert len(tokens) > 1  # the column matters


def test_outputs_go_in_place_into_a_proposals_strided_columns() -> None:
    """`out` = column i of a proposal's token [R, L] and q [R, L, K] buffers (a chain's steps write there, no
    copy after each): the same values as fresh outputs, only column i written, the `out` tensors returned."""
    gen = fresh_gen()
    logits = (torch.randn(4, 700, generator=gen) * 3).to(DEVICE)
    u = torch.rand(4, generator=gen).to(DEVICE)
    want = draft_sample_fused(logits, 0.8, 0.95, u, 16)
    bufs = (torch.full((4, 3), -1, device=DEVICE), torch.full((4, 3, 16), -1.0, device=DEVICE),
            torch.full((4, 3, 16), -1, device=DEVICE))
    out = tuple(b[:, 1] for b in bufs)
    got = draft_sample_fused(logits, 0.8, 0.95, u, 16, out=out)
    assert all(g is o for g, o in zip(got, out, strict=True))
    assert all(torch.equal(b[:, 1], w) for b, w in zip(bufs, want, strict=True))
    assert all(bool((b[:, [0, 2]] == -1).all()) for b in bufs)  # the other columns untouched
    with pytest.raises(ValueError, match="contiguous rows"):
        draft_sample_fused(logits, 0.8, 0.95, u, 16, out=(bufs[0][:, 0], bufs[1][:, :, 0], bufs[2][:, :, 0]))


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
    """`bass.decode.rules.DraftRule` under top-p: the kernel's token and q (FUSED_TOP_P "always": the interpreter),
    the same rule's torch path where it is off, and the two agree where the chunk heads hold the top-p set."""
    gen = fresh_gen()
    ids = torch.sort(torch.randperm(900, generator=gen)[:600]).values.to(DEVICE)
    logits = (torch.randn(3, 1, 600, generator=gen) * 6).to(DEVICE)
    u = torch.rand(3, generator=gen).to(DEVICE)
    rule = draft_rule(SamplingParams(temperature=0.8, top_p=0.9), 900, TokenSubset(ids))
    monkeypatch.setattr(sampling, "FUSED_TOP_P", "always")
    token, q, q_ids = rule(logits, u)
    want_token, want_q, want_ids = draft_sample_ref(logits[:, -1], 0.8, 0.9, u, sampling.DRAFT_CANDIDATES, ids)
    assert torch.equal(token, want_token) and torch.equal(q_ids, want_ids)
    torch.testing.assert_close(q, want_q, rtol=1e-6, atol=1e-7)
    monkeypatch.setattr(sampling, "FUSED_TOP_P", False)
    torch_token, torch_q, torch_ids = rule(logits, u)
    held = (torch_q > 0).sum(-1) <= mod.PER_CHUNK  # rows whose top-p set C holds (600 columns: one chunk)
    assert bool(held.any())
    assert torch.equal(torch_token[held], token[held])
    torch.testing.assert_close(dense(torch_q, torch_ids, 900)[held], dense(q, q_ids, 900)[held])
