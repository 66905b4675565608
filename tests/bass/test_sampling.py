"""Sampling maths against independent references: float64 filters, chi-square tests of losslessness."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from bass.config import SamplingParams
from bass.sampling import SequenceRNG, process_logits, sample_from, verify_greedy, verify_sampled


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


def test_sequence_rng_streams_do_not_depend_on_the_batch():
    keys = [(0, 0), (0, 1), (1, 0)]
    a = SequenceRNG(7, keys)
    b = SequenceRNG(7, keys)
    both = a.uniforms(keys, 5, "cpu")
    alone = b.uniforms([(0, 1)], 5, "cpu")
    assert torch.equal(both[1], alone[0])
    assert not torch.equal(both[0], both[1])
