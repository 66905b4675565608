"""Sampling maths against independent references: float64 filters, chi-square tests of losslessness."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from bass.config import SamplingParams
from bass.decode import sampling, verify
from bass.decode.sampling import process_logits, sample_from, top_p_filter, top_p_filter_sorted
from bass.decode.verify import verify_greedy, verify_sampled


def _reference_filter(logits: np.ndarray, t: float, top_k: int, top_p: float) -> np.ndarray:
    """Temperature, top-k, top-p on one row, written plainly in float64."""
    z = logits.astype(np.float64) / t
    if top_k:
        kth = np.sort(z)[::-1][top_k - 1]
        z = np.where(z < kth, -np.inf, z)
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    keep, mass = [], 0.0
    for i in order:
        if mass >= top_p:
            break
        keep.append(i)
        mass += p[i]
    out = np.zeros_like(p)
    out[keep] = p[keep]
    return out / out.sum()


@pytest.mark.parametrize("t,top_k,top_p", [(1.0, 0, 1.0), (0.7, 0, 0.9), (1.3, 5, 1.0), (0.5, 8, 0.6)])
def test_process_logits_matches_reference(t, top_k, top_p):
    logits = torch.randn(6, 40) * 3
    got = process_logits(logits, SamplingParams(temperature=t, top_k=top_k, top_p=top_p)).double().numpy()
    for row, g in zip(logits.numpy(), got):
        np.testing.assert_allclose(g, _reference_filter(row, t, top_k, top_p), atol=1e-6)


def test_greedy_params_give_one_hot_of_argmax():
    logits = torch.randn(3, 4, 17)
    p = process_logits(logits, SamplingParams(temperature=0))
    assert torch.equal(p.argmax(-1), logits.argmax(-1)) and torch.all(p.sum(-1) == 1)


def test_sample_from_follows_the_distribution():
    p = torch.tensor([0.1, 0.0, 0.6, 0.3])
    u = torch.rand(40000, dtype=torch.float64).float()
    counts = torch.bincount(sample_from(p.expand(len(u), 4), u), minlength=4)
    assert counts[1] == 0  # zero-probability tokens are never drawn
    keep = p > 0
    assert chisquare(counts[keep].numpy(), (p[keep] * len(u)).numpy()).pvalue > 1e-3


def test_verify_greedy_matches_a_loop():
    torch.manual_seed(0)
    B, L, V = 16, 6, 5
    logits = torch.randn(B, L + 1, V)
    best = logits.argmax(-1)
    drafts = torch.where(torch.rand(B, L) < 0.7, best[:, :L], torch.randint(0, V, (B, L)))
    dlen = torch.randint(0, L + 1, (B,))
    v = verify_greedy(drafts, dlen, logits)
    for b in range(B):
        a = 0
        while a < dlen[b] and drafts[b, a] == best[b, a]:
            a += 1
        assert v.accepted[b] == a and v.next_token[b] == best[b, a]


def _emitted(drafts, verdict, b):
    a = int(verdict.accepted[b])
    return drafts[b, :a].tolist() + [int(verdict.next_token[b])]


@pytest.mark.parametrize("deterministic", [False, True])
def test_speculative_rule_is_lossless(deterministic):
    """Emitted tokens follow p position by position, whatever q is (chi-square on tokens 1 and 2)."""
    g = torch.Generator().manual_seed(1)
    V, L, N = 6, 3, 60000
    p = torch.softmax(torch.randn(L + 1, V, generator=g) * 1.5, -1)  # target, fixed per position
    q = torch.softmax(torch.randn(L, V, generator=g) * 1.5, -1)  # a poor draft
    if deterministic:  # an n-gram draft always proposes the same tokens
        drafts = torch.tensor([2, 0, 4]).expand(N, L)
        probs = None
    else:
        drafts = torch.stack([torch.multinomial(q[i], N, replacement=True, generator=g) for i in range(L)], 1)
        probs = q.expand(N, L, V)
    u = torch.rand(N, L + 1, generator=g)
    v = verify_sampled(drafts, torch.full((N,), L), probs, p.expand(N, L + 1, V), u[:, :L], u[:, L])
    rows = [_emitted(drafts, v, b) for b in range(N)]
    for pos in (0, 1):
        tok = torch.tensor([r[pos] for r in rows if len(r) > pos])
        counts = torch.bincount(tok, minlength=V).double()
        expected = p[pos].double() / p[pos].double().sum() * len(tok)
        assert chisquare(counts.numpy(), expected.numpy()).pvalue > 1e-3


def test_verify_sampled_respects_draft_lengths():
    N, L, V = 200, 4, 5
    p = torch.full((N, L + 1, V), 1.0 / V)
    drafts = torch.randint(0, V, (N, L))
    dlen = torch.randint(0, L + 1, (N,))
    v = verify_sampled(drafts, dlen, None, p, torch.zeros(N, L), torch.rand(N))
    assert torch.equal(v.accepted, dlen)  # u = 0 accepts every proposed token, never more


def _full_sort_top_p(logits: torch.Tensor, t: float, top_p: float) -> torch.Tensor:
    """The full-sort implementation process_logits had before candidates, its tie rule made explicit
    (a stable sort: among equal probabilities the lower token id comes first)."""
    probs = torch.softmax(logits.float() / t, dim=-1)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
    sorted_p = sorted_p.masked_fill(mass_before >= top_p, 0.0)
    probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return probs / probs.sum(-1, keepdim=True)


def _adversarial_logits(V: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    rows = [torch.zeros(V),  # flat: the candidates never reach top_p
            torch.randint(0, 3, (V,), generator=g).float() * 2.0,  # three huge tie groups
            torch.randint(0, 40, (V,), generator=g).float() / 2.0,  # many ties near the boundary
            torch.cat([torch.full((5,), 8.0), torch.zeros(V - 5)]),  # the mass sits in one tie group of 5
            torch.where(torch.arange(V) % 97 == 0, 12.0, 0.0),  # a tie group straddling the candidates' edge
            torch.randn(V, generator=g) * 0.3]  # nearly flat
    return torch.stack(rows)


@pytest.mark.parametrize("t,top_p", [(1.0, 0.9), (0.8, 0.95), (0.5, 0.5), (1.3, 0.99), (0.7, 0.25)])
def test_top_p_from_candidates_equals_the_full_sort(t, top_p, monkeypatch):
    V = 4000
    g = torch.Generator().manual_seed(int(t * 100 + top_p * 1000))
    random_rows = torch.randn(24, V, generator=g) * torch.linspace(0.5, 8.0, 24)[:, None]
    logits = torch.cat([random_rows, _adversarial_logits(V)])
    want = _full_sort_top_p(logits, t, top_p)
    params = SamplingParams(temperature=t, top_p=top_p)
    for k in (16, 256, 1024):
        fast, covered = top_p_filter(torch.softmax(logits.float() / t, -1), top_p, k)
        assert torch.equal(fast[covered], want[covered])  # bit for bit where the candidates decided
        assert not covered[24] and covered[:24].any()  # the flat row falls back; some rows are decided
        with monkeypatch.context() as m:
            m.setattr(sampling, "TOP_P_CANDIDATES", k)
            assert torch.equal(process_logits(logits, params), want)  # with its fallback, for every row
    assert torch.equal(top_p_filter_sorted(torch.softmax(logits / t, -1), top_p), want)


def test_top_p_ties_go_to_the_lower_token_id():
    logits = torch.tensor([[0.0, 5.0, 5.0, 5.0, 0.0]])
    p = process_logits(logits, SamplingParams(temperature=1.0, top_p=0.5))
    assert torch.equal(p > 0, torch.tensor([[False, True, True, False, False]]))  # 2 of the 3 tied, lowest ids


def test_two_level_inverse_cdf_equals_the_flat_one_and_never_picks_zero_weight():
    torch.manual_seed(0)
    p = torch.rand(32, 151936) ** 8
    p[:, ::3] = 0  # zero-weight tokens everywhere, block edges included
    u = torch.cat([torch.rand(30), torch.tensor([0.0, 0.99999994])])
    cdf = p.double().cumsum(-1)
    want = torch.searchsorted(cdf, (u.double() * cdf[:, -1])[:, None], right=True).squeeze(-1)
    got = sample_from(p, u)
    assert torch.equal(got, want.clamp(max=151935))
    assert bool((p.gather(-1, got[:, None]) > 0).all())
    spikes = torch.zeros(3, 151936)
    spikes[:, 5], spikes[:, 150000] = 1.0, 2.0  # mass only in the first and the last blocks
    assert sample_from(spikes, torch.tensor([0.1, 0.5, 0.99999994])).tolist() == [5, 150000, 150000]


def test_draft_proposal_is_top_p_where_its_candidates_hold_it_and_top_k_elsewhere():
    """Row 0 (peaked): its 8 candidates hold the top-p set, so q is `process_logits`' distribution. Row 1
    (flat): they hold less than top_p, so q is the 8 most likely tokens' tempered masses, renormalised."""
    params = SamplingParams(temperature=0.7, top_p=0.9)
    peaked = torch.zeros(384)
    peaked[:3] = torch.tensor([12.0, 11.0, 10.0])
    flat = torch.randn(384, generator=torch.Generator().manual_seed(0)) * 0.01
    logits = torch.stack([peaked, flat])
    _, q, ids = sampling.draft_proposal(logits, params, torch.full((2,), 0.5), candidates=8)
    dense = torch.zeros(2, 384).scatter_(1, ids, q)
    torch.testing.assert_close(dense[0], process_logits(logits[:1], params)[0])
    tempered = torch.softmax(logits[1] / 0.7, -1)
    top8 = torch.topk(tempered, 8)
    torch.testing.assert_close(dense[1, top8.indices], top8.values / top8.values.sum())
    assert int((dense[1] > 0).sum()) == 8
    torch.testing.assert_close(q.sum(-1), torch.ones(2))


def test_draft_proposal_draws_its_token_from_its_q():
    """Over a fine grid of u, each token is drawn u's inverse-CDF share of the time: its q, within a grid
    step; u -> 1 never lands on a candidate of q = 0."""
    g = torch.Generator().manual_seed(3)
    params = SamplingParams(temperature=0.8, top_p=0.7)
    N = 4000
    logits = (torch.randn(3, 200, generator=g) * 3).repeat_interleave(N, 0)  # 3 rows, each N times
    u = ((torch.arange(N) + 0.5) / N).repeat(3)
    token, q, ids = sampling.draft_proposal(logits, params, u, candidates=16)
    for r in range(3):
        rows = slice(r * N, (r + 1) * N)
        counts = torch.bincount(token[rows], minlength=200).double() / N
        want = torch.zeros(200, dtype=torch.double).scatter_(0, ids[r * N], q[r * N].double())
        assert float((counts - want).abs().max()) <= 1.0 / N + 1e-9
        assert 1 < int((want > 0).sum()) < 16  # top-p cut inside the candidates: some have q = 0
    top, q1, ids1 = sampling.draft_proposal(logits[:1], params, torch.tensor([0.99999994]), candidates=16)
    assert float(torch.zeros(200).scatter_(0, ids1[0], q1[0])[top[0]]) > 0


@pytest.mark.parametrize("top_p", [0.9, 1.0], ids=["top-p: over the candidates", "no top-p: over the vocabulary"])
def test_a_sparse_q_gives_the_verdicts_of_the_dense_q_it_stands_for(top_p):
    """A draft step under top-p hands the verify q as (mass, id) pairs (`draft_sample`), ids repeating where the
    mass is 0: the verdicts, accepted counts and resampled tokens alike, are those of the same q scattered
    over the vocabulary, bit for bit, on both torch rules."""
    g = torch.Generator().manual_seed(11)
    B, L, V, K = 64, 3, 300, 16
    params = SamplingParams(temperature=0.8, top_p=top_p)
    logits = torch.randn(B, L + 1, V, generator=g) * 3
    near = process_logits(logits[:, :L] + torch.randn(B, L, V, generator=g), params)
    m, ids = torch.topk(near, K, dim=-1)
    m = torch.where(torch.arange(K) < 6, m, 0.0)  # a kept prefix, then zero masses at repeated ids
    m, ids = m / m.sum(-1, keepdim=True), torch.where(torch.arange(K) < 6, ids, ids[..., :1])
    dense = torch.zeros(B, L, V).scatter_add_(-1, ids, m)
    drafts = ids.gather(-1, torch.multinomial(m.view(-1, K), 1, generator=g).view(B, L, 1))[..., 0]
    args = (drafts, torch.randint(0, L + 1, (B,), generator=g))
    u = (torch.rand(B, L, generator=g), torch.rand(B, generator=g))
    sparse_v = verify.verify_logits(logits, params, *args, m, *u, ids)[0]
    dense_v = verify.verify_logits(logits, params, *args, dense, *u)[0]
    assert torch.equal(sparse_v.accepted, dense_v.accepted) and torch.equal(sparse_v.next_token, dense_v.next_token)
    assert bool((sparse_v.accepted < args[1]).any()) and bool((sparse_v.accepted > 0).any())  # rejects and accepts
