"""The acceptance-controlled random pair (bench/synthetic.py) at tiny shapes, on the CPU."""

import math

import pytest
import torch

from bench.synthetic import (
    TINY,
    SyntheticTokenizer,
    calibrate,
    hf_model,
    interpolate_scale,
    per_token_acceptance,
    random_prompt,
)
from kernels.reference import ragged_attention_ref


def logits_of(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    cache = model.new_cache(tokens.shape[0], tokens.shape[1])
    return model(tokens, cache, torch.full((tokens.shape[0],), tokens.shape[1]), ragged_attention_ref)


def test_draft_shares_embedding_and_head(pair):
    t, d = pair.target.model, pair.draft.model
    assert d.embed_tokens.weight.data_ptr() == t.embed_tokens.weight.data_ptr()
    assert d.lm_head.weight.data_ptr() == t.lm_head.weight.data_ptr()
    assert len(d.layers) == 1 and len(t.layers) == TINY.num_layers
    assert pair.draft.config.hidden_size == pair.target.config.hidden_size


def test_logits_are_peaked_as_configured(pair):
    tokens = torch.tensor([random_prompt(TINY.vocab_size, 48, seed=11)])
    std = logits_of(pair.target.model, tokens).std().item()
    assert 6.0 < std < 10.0  # logit_std = 8 by construction of the head scale


def test_agreement_falls_as_scale_grows(pair):
    """Teacher-forced greedy agreement of draft and target on random contexts, at two scales."""
    tokens = torch.tensor([random_prompt(TINY.vocab_size, 64, seed=5 + i) for i in range(4)])
    agree = {}
    for s in (1e-3, 3.0):
        pair.knob.set(s)
        agree[s] = (logits_of(pair.target.model, tokens).argmax(-1) ==
                    logits_of(pair.draft.model, tokens).argmax(-1)).float().mean().item()
    pair.knob.set(1e-3)
    assert agree[1e-3] > 0.95 and agree[3.0] < agree[1e-3] - 0.3


def test_knob_round_trip_and_refuses_zero(pair):
    w = pair.target.model.layers[0].mlp.down_proj.weight
    before = w.clone()
    pair.knob.set(0.37)
    torch.testing.assert_close(w, before * 370, rtol=1e-5, atol=0)
    pair.knob.set(1e-3)
    torch.testing.assert_close(w, before, rtol=1e-5, atol=0)
    with pytest.raises(ValueError, match="> 0"):
        pair.knob.set(0.0)


def test_calibrate_brackets_the_wanted_alpha():
    """A known monotone alpha(s) = 1 / (1 + s / 1e-3): calibration must invert it closely."""
    knob = type("Knob", (), {"scale": 1.0, "set": lambda self, s: setattr(self, "scale", s)})()
    cal = calibrate(knob, lambda: 1 / (1 + knob.scale / 1e-3), [0.8], [1e-4, 1e-3, 1e-2])
    assert cal.scales[0.8] == pytest.approx(2.5e-4, rel=0.1)  # 1 / (1 + 0.25) = 0.8


def test_per_token_acceptance_by_hand():
    # (proposed, accepted): all 4 pass (4 tested); 1 of 4 (2 tested); nothing proposed; 0 of 3 (1 tested)
    assert per_token_acceptance([(4, 4), (4, 1), (0, 0), (3, 0)]) == pytest.approx(5 / 7)
    assert per_token_acceptance([(0, 0)]) == 0.0


def test_interpolate_scale_by_hand():
    pts = [(1e-3, 0.5), (1e-4, 0.9)]
    assert interpolate_scale(pts, 0.7) == pytest.approx(math.sqrt(1e-7))  # halfway in log s
    assert interpolate_scale(pts, 0.5) == pytest.approx(1e-3)
    assert interpolate_scale(pts, 0.0) == pytest.approx(4e-3)  # extrapolation capped at 4x


def test_hf_model_same_function_shared_storage(pair):
    hf = hf_model(pair.target.model)
    assert hf.lm_head.weight.data_ptr() == pair.target.model.lm_head.weight.data_ptr()
    tokens = torch.tensor([random_prompt(TINY.vocab_size, 24, seed=9)])
    ours = logits_of(pair.target.model, tokens)
    theirs = hf(tokens).logits.float()
    assert ((ours - theirs).norm() / theirs.norm()).item() < 1e-5


def test_tokenizer():
    tok = SyntheticTokenizer(10)
    assert tok.encode("3 1 4") == [3, 1, 4] and tok.decode([3, 1]) == "" and len(tok) == 10
    assert tok.get_vocab()["7"] == 7 and tok.eos_token_id is None
    with pytest.raises(ValueError, match="0 .. 9"):
        tok.encode("12")
