"""The verify rule's tail in one kernel (`kernels.verify_sample`, interpreted on the CPU): the same outputs as
`bass.decode.rules.VerifyRule`'s torch ops on the same candidates, for model drafts (a sparse q: (mass, id) pairs),
one-hot drafts and plain steps, with rows that reject, accept everything, draft nothing and rows the candidates leave
undecided."""

from __future__ import annotations

import pytest
import torch
from fused_cases import DEVICE, fresh_gen, poison

import kernels.verify_sample as mod
from bass.config import SamplingParams
from bass.decode import sampling, verify
from bass.decode.rules import verify_rule
from kernels.top_p import top_p_candidates_fused
from kernels.verify_sample import verify_candidates

PARAMS = SamplingParams(temperature=0.8, top_p=0.9)
# slow: Triton kernels in the interpreter. The warnings: the flat row has no candidate, so its kept mass is 0 and its
# p 0 / 0, on both paths alike: it is undecided
pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore:invalid value encountered in divide", "ignore:All-NaN slice")]


def sparse(q: torch.Tensor, pairs: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A draft's q as `kernels.draft_sample` makes it from dense q [..., V]: its `pairs` likeliest tokens,
    renormalised, descending, and in every other row a tail of zero masses whose ids repeat id 0."""
    m, ids = torch.topk(q, pairs, dim=-1)
    m = m / m.sum(-1, keepdim=True)
    tail = (torch.arange(pairs) >= pairs // 4) & (torch.rand(*q.shape[:-1], 1, generator=gen) < 0.5)
    m = torch.where(tail, 0.0, m)
    return m / m.sum(-1, keepdim=True), torch.where(tail, 0, ids)


def _round(L: int, model_q: bool, gen: torch.Generator, dtype: torch.dtype = torch.float32, B: int = 8,
           V: int = 300) -> tuple[torch.Tensor, tuple]:
    """Logits [B, L+1, V] (peaked rows, row 3 flat: no candidate decides it) and the verify's arguments, drafts
    drawn from a sparse q near p (one-hot drafts: the same tokens); row 0's drafts are the target's near-certain
    tokens (it accepts everything), row 1's first has p = 0 (it rejects)."""
    logits = torch.randn(B, L + 1, V, generator=gen) * 4
    logits[3] = 0.0
    q, q_ids = sparse(torch.softmax((logits[:, :L] + torch.randn(B, L, V, generator=gen) / 2) / PARAMS.temperature, -1),
                      32, gen)
    drafts = torch.stack([q_ids[b].gather(1, torch.multinomial(q[b], 1, generator=gen))[:, 0] for b in range(B)]) \
        if L else torch.zeros(B, 0, dtype=torch.long)
    if L:
        logits[0, torch.arange(L), drafts[0]] += 30.0
        logits[1, 0, drafts[1, 0]] = -30.0
    dlen = torch.tensor([L, L, max(L - 1, 0), L, 0, min(L, 1), L, L])[:B]
    u = torch.rand(B, 2 * L + 1, generator=gen)  # the round's uniforms: its columns are views, as in a round
    args = (drafts, dlen, u[:, L:2 * L], u[:, 2 * L], *((q, q_ids) if model_q else (None, None)))
    return logits.to(DEVICE, dtype), tuple(None if a is None else a.to(DEVICE) for a in args)


@pytest.mark.parametrize("L, model_q", [(0, False), (1, True), (3, True), (3, False), (5, True)],
                         ids=["plain step", "L=1 model draft", "L=3 model draft", "L=3 one-hot drafts", "L=5"])
def test_the_kernel_gives_the_rules_torch_outputs_on_the_same_candidates(monkeypatch, L, model_q) -> None:
    """Every output of `VerifyRule` (accepted, next token, decided, packed, emitted, rejected) from the kernel
    equals its torch ops' on the candidates of `kernels.top_p` (both paths read them), decided rows and the
    flat undecided one alike."""
    poison(monkeypatch, mod)
    monkeypatch.setattr(sampling, "TOP_P_CANDIDATES", 32)  # candidates, not a full sort, of 300 tokens
    monkeypatch.setattr(sampling, "FUSED_TOP_P", "always")
    logits, args = _round(L, model_q, fresh_gen())
    rule = verify_rule(PARAMS)
    calls = []
    monkeypatch.setattr(mod, "_verify_row", _counting(mod._verify_row, calls))
    fused = rule(logits, *args)
    assert len(calls) == 1
    monkeypatch.setattr(verify, "FUSED_VERIFY", False)
    torch_ops = rule(logits, *args)
    assert len(calls) == 1
    for name, got, want in zip(["accepted", "next", "decided", "logits", "packed", "emitted", "rejected"],
                               fused, torch_ops, strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want), name
    accepted, decided = fused[0].cpu(), fused[2].cpu()
    assert not bool(decided[3]) and bool(decided[[0, 1, 2, 4, 5, 6, 7]].all())  # the flat row only
    if L:
        dlen = args[1].cpu()
        assert bool((accepted < dlen).any())  # a rejection: the residual is drawn from
        if L <= 3:
            assert bool(((accepted == dlen) & (dlen > 0)).any())  # a row accepted all: the bonus token


def test_the_draw_follows_the_residual_over_a_grid_of_uniforms() -> None:
    """One sequence whose draft is rejected (u_accept just under 1), over a grid of u_sample: each token is
    drawn max(0, p − q)'s share of the time, within a grid step, and never one the residual gives nothing.
    q has a pair for every token, 100 of them (not a power of two: the kernel masks its block)."""
    N, V, K = 128, 100, 64  # the interpreter runs a program per row: 128 rows resolve shares to 1/128
    # V = 100 (not 300): the residual loop walks one pair a token, the time of this test; 100 pairs still mask a
    # block (128), hold all 64 candidates and 36 tokens outside them, and the 1/N bound on the shares is unchanged
    gen = fresh_gen()
    logits = (torch.randn(1, 2, V, generator=gen) * 2).to(DEVICE)
    vals, ids = top_p_candidates_fused(logits, 1.0, K)
    q = torch.softmax(torch.randn(1, 1, V, generator=gen) * 2, -1).to(DEVICE)
    x = torch.tensor([[int(ids[0, 0, 5])]], device=DEVICE)  # the target's 6th likeliest token
    q[0, 0, x[0, 0]] = 1.0  # q(x) about 1/2 > p(x): rejected for u_accept near 1
    q = q / q.sum(-1, keepdim=True)
    u = ((torch.arange(N) + 0.5) / N).to(DEVICE)
    rows = lambda t: t.expand(N, *t.shape[1:]).contiguous()  # noqa: E731
    every = torch.arange(V, device=DEVICE).expand(1, 1, V)
    out = verify_candidates(rows(vals), rows(ids), 0.95, 1e-6, rows(x), torch.ones(N, dtype=torch.long, device=DEVICE),
                            torch.full((N, 1), 0.999, device=DEVICE), u, rows(q), rows(every))
    assert int(out[0].max()) == 0  # rejected everywhere
    c = torch.cumsum(vals[0, 0], 0)
    kept = torch.where(c - vals[0, 0] < 0.95, vals[0, 0], 0.0)
    p = torch.zeros(V, device=DEVICE).scatter_add_(0, ids[0, 0], kept / kept.sum())  # (the padding, id 0, adds 0)
    residual = (p - q[0, 0]).clamp(min=0)
    residual = (residual / residual.sum()).cpu().double()
    counts = torch.bincount(out[1].cpu(), minlength=V).double() / N
    assert float((counts - residual).abs().max()) <= 1.0 / N + 1e-6
    assert float(counts[residual == 0].sum()) == 0.0
    assert int((residual > 0).sum()) > 1  # a draw among several tokens


def test_a_dense_q_takes_the_torch_rule(monkeypatch) -> None:
    """The kernel reads q as pairs only: handed a dense q [B, L, V] (a draft without top-p makes one), the fused
    path declines and the rule's torch ops decide, and the kernel refuses it outright with a clear error."""
    monkeypatch.setattr(sampling, "FUSED_TOP_P", "always")
    logits, args = _round(2, True, fresh_gen())
    drafts, dlen, u_accept, u_sample, q, q_ids = args
    dense = torch.zeros(*q.shape[:2], logits.shape[-1], device=DEVICE).scatter_add_(-1, q_ids, q)
    assert verify.verify_top_p_fused(logits, PARAMS, drafts, dlen, dense, u_accept, u_sample) is None
    with pytest.raises(ValueError, match="sparse q"):
        verify_candidates(*top_p_candidates_fused(logits, 0.8, 64), 0.9, 1e-6, drafts, dlen, u_accept, u_sample, dense)
    want = verify_rule(PARAMS)(logits, *args)  # the same q as pairs, through the kernel
    got = verify_rule(PARAMS)(logits, drafts, dlen, u_accept, u_sample, dense)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def _counting(kernel, calls: list):
    class Counting:
        def __getitem__(self, grid):
            calls.append(grid)
            return kernel[grid]
    return Counting()
