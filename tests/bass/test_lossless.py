"""Losslessness of BASS sampling, end to end: chi-square of the first speculative token's distribution.

The first generated token comes from the prefill; the second is the first one decided by the
speculative accept / resample rule (with max_new_tokens=3 the round drafts exactly one token).
Its exact marginal under the (processed) target is

    P(y2 = v) = sum_{y1} p(y1 | prompt) p(v | prompt, y1),

computed here with transformers' own forward on the same weights, independently of our engine.
"""

import pytest
import torch
import transformers
from scipy.stats import chisquare

from bass.config import DraftLengthConfig, SamplingParams
from bass.decode.sampling import process_logits

pytestmark = pytest.mark.slow  # chi-square tests over thousands of draws

PROMPT = "def add(a, b):\n    return a"


def _expected_second_token(folder, tokenizer, params):
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    ids = torch.tensor([tokenizer.encode(PROMPT)])
    with torch.no_grad():
        p1 = process_logits(hf(ids).logits[0, -1], params).double()
        y1 = torch.nonzero(p1 > 0).squeeze(1)
        batch = torch.cat([ids.expand(len(y1), -1), y1[:, None]], 1)
        p2 = process_logits(hf(batch).logits[:, -1], params).double()
    return p1[y1] @ p2


def _chi_square_pvalue(samples, expected_probs):
    n = len(samples)
    counts = torch.bincount(samples, minlength=len(expected_probs)).double()
    expected = expected_probs / expected_probs.sum() * n
    big = expected >= 5
    assert counts[expected == 0].sum() == 0, "sampled a token the target gives zero probability"
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    return chisquare(obs.numpy(), exp.numpy()).pvalue


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9)],
                         ids=["t1", "t0.7-p0.9"])
@pytest.mark.parametrize("drafter", ["model", "feature", "feature-subset", "ngram", "layer-skip"])
def test_second_token_follows_the_target(tiny_engine, tiny_dir, params, drafter):
    # head_scale 6: peaked but not degenerate distributions; the draft is another random model (bad on purpose)
    if drafter.startswith("feature"):  # a random feature draft (EAGLE-style): it reads the target's hidden
        # states; "feature-subset" proposes from half the vocabulary (q = 0 on the rest)
        vocab = 192 if drafter == "feature-subset" else None
        engine, drafter = tiny_engine("llama", feature_seed=7, head_scale=6.0, feature_vocab=vocab), "model"
    else:
        engine = tiny_engine("llama", draft_seed=7, head_scale=6.0)
    _assert_second_token_follows(engine, tiny_dir, params, drafter)


def _assert_second_token_follows(engine, tiny_dir, params, drafter):
    expected = _expected_second_token(tiny_dir("llama", 0, 6.0), engine.tokenizer, params)
    samples, proposed, accepted = [], 0, 0
    for seed in range(50):
        p = SamplingParams(temperature=params.temperature, top_p=params.top_p, max_new_tokens=3, seed=seed)
        # (any policy: the one round left drafts one token, what the token limit leaves)
        r = engine.generate(PROMPT, k=64, params=p, method="bass", drafter=drafter, draft_length=DraftLengthConfig())
        samples += [c.token_ids[1] for c in r.candidates if len(c.token_ids) > 1]
        proposed, accepted = proposed + r.stats.proposed, accepted + r.stats.accepted
    assert proposed > 0 and accepted < proposed  # the rule was exercised: some drafts rejected
    assert _chi_square_pvalue(torch.tensor(samples), expected) > 1e-3


def test_second_token_follows_the_target_when_the_draft_cuts_top_p_short(tiny_engine, tiny_dir, monkeypatch):
    """With 8 draft candidates of 384 tokens, many draft rows' candidates hold less than top_p and the draft
    samples from their top-8 distribution, not the top-p one (`sampling.draft_proposal`): still exact,
    because the verify uses the q the draft sampled from."""
    from bass.decode import sampling

    engine = tiny_engine("llama", draft_seed=7, head_scale=6.0)
    params = SamplingParams(temperature=0.7, top_p=0.9)
    short = []

    proposal = sampling.draft_proposal

    def counted(logits, params, u, candidates=None):
        held = torch.topk(torch.softmax(logits.float() / params.temperature, -1), 8).values.sum(-1)
        short.append(int((held < params.top_p).sum()))
        return proposal(logits, params, u, candidates=8)

    monkeypatch.setattr(sampling, "draft_proposal", counted)
    _assert_second_token_follows(engine, tiny_dir, params, "model")
    assert sum(short) > 0


@pytest.mark.parametrize("drafter", ["model", "feature"])
def test_second_token_follows_the_target_when_the_draft_samples_at_another_temperature(tiny_engine, tiny_dir,
                                                                                        drafter):
    """`EngineConfig.draft_temperature`: the draft draws at half the request's temperature (a q sharper than
    the target's p), and the verify, given that q, still emits the target's distribution."""
    if drafter == "feature":
        engine = tiny_engine("llama", feature_seed=7, head_scale=6.0, draft_temperature=0.5)
    else:
        engine = tiny_engine("llama", draft_seed=7, head_scale=6.0, draft_temperature=0.5)
    params = SamplingParams(temperature=0.7, top_p=0.9)
    made = engine.new_drafter("model")
    assert made.temperature_scale == 0.5
    assert made.proposal_params(params).temperature == pytest.approx(0.35)
    assert made.proposal_params(SamplingParams()).temperature == 0.0  # greedy stays greedy
    _assert_second_token_follows(engine, tiny_dir, params, "model")
