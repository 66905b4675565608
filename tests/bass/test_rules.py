"""bass/decode/rules.py: the verify and draft-step rules that CUDA graphs capture with the forward."""

from __future__ import annotations

import torch

from bass.config import SamplingParams
from bass.decode import sampling
from bass.decode.rules import DraftRule, draft_rule, processing, run_then, verify_rule


def _logits(V: int = 64) -> torch.Tensor:
    """[2, 2, V]: position 0 peaked on token 3 (top-p decided by a few candidates), position 1 flat."""
    peaked = torch.full((V,), -20.0)
    peaked[3] = 10.0
    return torch.stack([peaked, torch.zeros(V)])[None].expand(2, 2, V).clone()


def test_a_row_is_decided_by_the_positions_it_used(monkeypatch):
    """Row 0 drafts token 3 (accepted: position 1, flat and undecided by 8 candidates, is used); row 1
    drafts token 5 (p = 0: rejected at position 0, so position 1 is never read and the row is decided)."""
    monkeypatch.setattr(sampling, "TOP_P_CANDIDATES", 8)
    rule = verify_rule(SamplingParams(temperature=1.0, top_p=0.9, seed=7, max_new_tokens=3))
    drafts, dlen = torch.tensor([[3], [5]]), torch.tensor([1, 1])
    u = torch.tensor([[0.5], [0.5]]), torch.tensor([0.25, 0.75])
    accepted, next_token, decided, logits, packed, emitted, rejected = rule(_logits(), drafts, dlen, *u)
    assert accepted.tolist() == [1, 0] and decided.tolist() == [False, True]
    assert next_token[1] == 3  # rejected: the residual of a one-hot draft of 5 is p itself
    # the round's glue: what the host reads, what the feature draft feeds, what the cache rolls back
    t = int(next_token[0])
    assert packed.tolist() == [[1, t, 1, 0, 3], [0, 3, 1, 1, 5]]
    assert emitted.tolist() == [[3, t], [3, 3]] and rejected.tolist() == [0, 1]
    exact = rule.exact(logits, drafts, dlen, *u)
    assert exact.accepted.tolist() == [1, 0] and exact.next_token[1] == 3
    assert 0 <= exact.next_token[0] < 64


def test_rules_are_keyed_by_processing_only():
    a = SamplingParams(temperature=0.8, top_p=0.95, seed=1, max_new_tokens=10, stop=("\n",))
    b = SamplingParams(temperature=0.8, top_p=0.95, seed=2, max_new_tokens=99)
    assert verify_rule(a) == verify_rule(b) and hash(verify_rule(a)) == hash(verify_rule(b))
    assert draft_rule(a, 64) == draft_rule(b, 64) != draft_rule(b, 65)
    assert verify_rule(a) != verify_rule(SamplingParams(temperature=0.7, top_p=0.95))
    assert processing(a).seed == 0 and processing(a).stop == ()


def test_draft_rule_fits_the_target_vocabulary():
    """A draft with more or fewer columns than the target: q is over the target's vocabulary."""
    logits = torch.randn(3, 2, 10)
    u = torch.rand(3)
    params = SamplingParams(temperature=1.0)
    token, q = DraftRule(processing(params), 8)(logits, u)
    assert q.shape == (3, 8) and torch.allclose(q, torch.softmax(logits[:, -1, :8], -1))
    assert bool((token < 8).all())
    token, q = DraftRule(processing(params), 12)(logits, u)
    assert q.shape == (3, 12) and bool((q[:, 10:] == 0).all())
    (greedy,) = DraftRule(processing(SamplingParams()), 8)(logits, u)
    assert greedy.tolist() == logits[:, -1, :8].argmax(-1).tolist()
    for vocab in (8, 12):  # under top-p, q's pairs name target tokens only
        token, masses, ids = DraftRule(processing(SamplingParams(temperature=1.0, top_p=0.9)), vocab)(logits, u)
        assert bool((ids < min(vocab, 10)).all()) and bool((token < min(vocab, 10)).all())
        torch.testing.assert_close(masses.sum(-1), torch.ones(3))


def test_run_then_applies_the_rule_after_a_plain_forward():
    calls = []

    def forward(x, scale=1):
        calls.append(scale)
        return x * scale

    (out,) = run_then(forward, lambda y, a: (y + a,), (torch.tensor(1.0),), torch.tensor(2.0), scale=3)
    assert out.item() == 7.0
    assert calls == [3]


def test_draft_steps_survive_outputs_that_the_next_step_overwrites():
    """A graph's outputs are static buffers: each draft step's (token, q) must be copied before the next
    step replays into the same buffers. L = 0 still feeds the pending tokens (the drafters count on it)."""
    from bass.drafters.chain import draft_autoregressively

    token_buf, q_buf = torch.zeros(2, dtype=torch.long), torch.zeros(2, 5)
    widths = []

    def step(tokens, q_len, last_only, u_i, out):  # writes step i's values into the same two buffers
        i = len(widths)
        widths.append(tokens.shape[1])
        token_buf.fill_(i + 1)
        q_buf.zero_()[:, i] = 1.0
        return token_buf, q_buf

    pending = torch.tensor([[7, 8], [9, 0]]), torch.tensor([2, 1])  # tokens [B, T], counts [B]
    p = draft_autoregressively(step, pending, [3, 2], torch.rand(2, 3))
    assert widths == [2, 1, 1] and p.tokens.tolist() == [[1, 2, 3], [1, 2, 3]] and p.lengths.tolist() == [3, 2]
    assert [int(p.probs[0, i].argmax()) for i in range(3)] == [0, 1, 2]
    assert p.prob_ids is None  # a dense q
    widths.clear()
    empty = draft_autoregressively(step, pending, [0, 0], torch.rand(2, 0))
    assert widths == [2] and empty.tokens.shape == (2, 0) and empty.probs is None


def test_a_sparse_q_survives_the_next_step_too():
    """Under top-p a step's q is (token, masses [B, K], ids [B, K]): both parts are copied out of the buffers
    the next step overwrites, into the proposal's probs and prob_ids [B, L, K]."""
    from bass.drafters.chain import draft_autoregressively

    token_buf, m_buf, id_buf = torch.zeros(2, dtype=torch.long), torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.long)

    def step(tokens, q_len, last_only, u_i, out):
        i = int(token_buf[0])
        token_buf.fill_(i + 1)
        m_buf.fill_(0.0)[:, 0] = 1.0
        id_buf.fill_(0)[:, 0] = 10 * (i + 1)
        return token_buf, m_buf, id_buf

    p = draft_autoregressively(step, (torch.tensor([[7], [9]]), torch.tensor([1, 1])), [3, 3], torch.rand(2, 3))
    assert p.probs.shape == p.prob_ids.shape == (2, 3, 4)
    assert p.prob_ids[:, :, 0].tolist() == [[10, 20, 30]] * 2 and bool((p.probs[:, :, 0] == 1).all())


def test_a_step_that_writes_its_outputs_in_place_is_handed_its_proposal_column():
    """After the first step (whose outputs size the buffers), step i gets `out` = column i of the proposal's
    token and q buffers; what it writes there is the proposal, with no copy, and it reads its input token
    from the column before."""
    from bass.drafters.chain import draft_autoregressively

    places, fed = [], []

    def step(tokens, q_len, last_only, u_i, out):
        i = len(places)
        places.append(out)
        fed.append(tokens[:, -1].tolist())
        token, m, ids = out or (torch.empty(2, dtype=torch.long), torch.empty(2, 4), torch.zeros(2, 4).long())
        token.fill_(i + 1), m.fill_(0.0)[:, 0].fill_(1.0), ids.fill_(0)[:, 0].fill_(10 * (i + 1))
        return token, m, ids

    p = draft_autoregressively(step, (torch.tensor([[7], [9]]), torch.tensor([1, 1])), [3, 3], torch.rand(2, 3))
    assert places[0] is None and fed == [[7, 9], [1, 1], [2, 2]]
    for i, (token, m, ids) in enumerate(places[1:], start=1):
        assert token.data_ptr() == p.tokens[:, i].data_ptr() and token.stride() == p.tokens[:, i].stride()
        assert m.data_ptr() == p.probs[:, i].data_ptr() and ids.data_ptr() == p.prob_ids[:, i].data_ptr()
    assert p.tokens.tolist() == [[1, 2, 3]] * 2 and p.prob_ids[:, :, 0].tolist() == [[10, 20, 30]] * 2


def test_a_subset_draft_proposes_its_tokens_and_gives_the_rest_q_zero():
    """A draft over a reduced vocabulary: column j of its logits is target token ids[j]. The token is a
    target id of the subset, q is the subset's distribution scattered into the target's vocabulary."""
    from bass.decode.rules import TokenSubset

    ids = torch.tensor([2, 5, 11, 12, 30])
    logits = torch.randn(4, 1, 5)
    params = SamplingParams(temperature=1.0)
    rule = draft_rule(params, 40, TokenSubset(ids))
    assert rule != draft_rule(params, 40) and rule == draft_rule(params, 40, rule.subset)
    token, q = rule(logits, torch.rand(4))
    assert q.shape == (4, 40) and torch.allclose(q[:, ids], torch.softmax(logits[:, -1], -1))
    assert float(q.sum(-1).min()) > 0.999 and float(q.sum(-1).max()) < 1.001
    assert bool(torch.isin(token, ids).all()) and bool((q.gather(1, token[:, None]) > 0).all())
    (greedy,) = draft_rule(SamplingParams(), 40, rule.subset)(logits, torch.rand(4))
    assert greedy.tolist() == ids[logits[:, -1].argmax(-1)].tolist()
