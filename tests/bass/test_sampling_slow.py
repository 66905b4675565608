"""The top-p verify rule against the dense one, over fine grids of draws: the slow part of test_sampling.py."""

import pytest
import torch

from bass.config import SamplingParams
from bass.decode import sampling, verify
from bass.decode.sampling import process_logits
from bass.decode.verify import verify_sampled

pytestmark = pytest.mark.slow  # the top-p verify rule through the interpreted kernels


@pytest.mark.parametrize("one_hot", [False, True])
def test_verify_top_p_emits_what_the_dense_rule_emits(one_hot, monkeypatch):
    """The candidate-space rule against the dense one (`verify_sampled` on `process_logits`' p): the same
    accepted counts for the same u_accept, and over a fine grid of u_sample the same share of each token
    (two inverse-CDF maps of one distribution differ only at token boundaries: at most a count or two)."""
    monkeypatch.setattr(sampling, "TOP_P_CANDIDATES", 24)  # candidates, not a full sort, over 300 tokens
    g = torch.Generator().manual_seed(5)
    B, L, V, N = 4, 3, 300, 6000
    params = SamplingParams(temperature=0.8, top_p=0.9)
    logits = torch.randn(B, L + 1, V, generator=g) * 4  # peaked enough for 24 candidates to decide top-p
    # drafts near the target (so rejections leave a residual unlike p), and row 0's equal to it (it accepts)
    q = torch.softmax((logits[:, :L] + torch.randn(B, L, V, generator=g) * 2) / 0.8, -1)
    q[0] = process_logits(logits[0, :L], params)
    drafts = torch.stack([torch.multinomial(q[b], 1, generator=g)[:, 0] for b in range(B)])
    dlen = torch.tensor([L, L, 2, 0])
    probs = None if one_hot else q
    u_acc = torch.rand(B, L, generator=g)
    grid = (torch.arange(N) + 0.5) / N
    rows = lambda x: None if x is None else x.repeat_interleave(N, 0)  # noqa: E731
    args = (rows(drafts), rows(dlen), rows(probs), rows(u_acc), grid.repeat(B))
    cand, covered = verify.verify_top_p(rows(logits), params, *args)
    dense = verify_sampled(*args[:2], args[2], process_logits(rows(logits), params), *args[3:])
    assert bool(covered.all())
    assert torch.equal(cand.accepted, dense.accepted)
    assert bool((cand.accepted < rows(dlen)).any())  # some rows reject: the residual is exercised
    for b in range(B):
        got = torch.bincount(cand.next_token[b * N:(b + 1) * N], minlength=V)
        want = torch.bincount(dense.next_token[b * N:(b + 1) * N], minlength=V)
        assert int((got - want).abs().max()) <= 2, b
    full = verify.verify_top_p(rows(logits), params, *args, full_sort=True)[0]
    assert torch.equal(full.accepted, cand.accepted) and torch.equal(full.next_token, cand.next_token)


def test_verify_top_p_from_the_kernels_candidates_gives_the_torch_paths_verdict(monkeypatch):
    """The rule with `kernels.top_p` (as on CUDA; here interpreted) against torch's softmax / top-K path:
    the same verdicts for the same uniforms (their probabilities differ only by rounding), the same
    decided rows, and its own full-sort twin agrees with it bit for bit on every decided row."""
    monkeypatch.setattr(sampling, "TOP_P_CANDIDATES", 64)  # candidates, not a full sort, over 300 tokens
    g = torch.Generator().manual_seed(9)
    B, L, V = 6, 3, 300
    params = SamplingParams(temperature=0.8, top_p=0.9)
    logits = torch.randn(B, L + 1, V, generator=g) * 4
    logits[5] = 0.0  # a flat row: undecided by any 64 candidates
    q = torch.softmax((logits[:, :L] + torch.randn(B, L, V, generator=g) * 2) / 0.8, -1)
    drafts = torch.stack([torch.multinomial(q[b], 1, generator=g)[:, 0] for b in range(B)])
    args = (drafts, torch.tensor([L, L, 2, 0, 1, L]), q, torch.rand(B, L, generator=g), torch.rand(B, generator=g))
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the kernel compiled, or interpreted
    logits, args = logits.to(device), tuple(a.to(device) for a in args)
    torch_path, torch_covered = verify.verify_top_p(logits, params, *args)
    monkeypatch.setattr(sampling, "FUSED_TOP_P", "always")
    import kernels.top_p

    calls = []
    kernel = kernels.top_p.top_p_candidates_fused
    monkeypatch.setattr(kernels.top_p, "top_p_candidates_fused", lambda *a: calls.append(a) or kernel(*a))
    fused, covered = verify.verify_top_p(logits, params, *args)
    assert len(calls) == 1  # the kernel's candidates, not torch's
    full = verify.verify_top_p(logits, params, *args, full_sort=True)[0]
    assert torch.equal(covered, torch_covered) and not covered[5].any() and bool(covered[:5].all())
    for other in (torch_path, full):  # row 5 is undecided: what either path says there is redone
        assert torch.equal(fused.accepted[:5], other.accepted[:5])
        assert torch.equal(fused.next_token[:5], other.next_token[:5])
    assert bool((fused.accepted < args[1]).any())  # some rows reject: the residual is exercised
