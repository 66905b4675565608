"""The feature draft's unrolled training steps see what drafting sees: step s at position t equals the draft
run causally over the target's entries up to t − s + 1 followed by its own chain of guesses."""

from __future__ import annotations

import pytest
import torch

from bass.models.config import ModelConfig
from draft_training.model import FeatureStudent, unroll_mask

H, V = 24, 50


def _student(layers: int = 2, fused_layer: int = 0) -> FeatureStudent:
    torch.manual_seed(0)
    config = ModelConfig(family="qwen2", vocab_size=V, hidden_size=16, intermediate_size=32, num_layers=layers,
                         num_heads=2, num_kv_heads=1, head_dim=8, rope_theta=10000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, qkv_bias=True, max_position_embeddings=64,
                         eos_token_ids=(0,), bos_token_id=None, pad_token_id=None)
    student = FeatureStudent(config, torch.randn(V, H), torch.randn(V, H), fused_layer=fused_layer)
    for p in student.parameters():
        torch.nn.init.normal_(p, 0.0, 0.3)
    return student.double()


def _drafted(student: FeatureStudent, f: torch.Tensor, tokens: torch.Tensor, t: int, step: int,
             tapped: torch.Tensor | None = None) -> torch.Tensor:
    """f̂ at position t after `step` draft steps, drafting as the engine does: the target's entries 0 .. c
    (c = t − step + 1) in the cache, then each step appends its own guess (with m = 0 for a fused draft: it
    has no target layer of its own guesses) and runs causally over all of it."""
    c = t - step + 1
    fed = f[:, :c + 1]
    fed_m = None if tapped is None else tapped[:, :c + 1]
    for i in range(step):
        out = student.features(fed, tokens[:, :c + 1 + i], tapped=fed_m)[:, -1:]  # plain causal attention, no mask
        fed = torch.cat([fed, out], 1)
        if tapped is not None:
            fed_m = torch.cat([fed_m, torch.zeros_like(out)], 1)
    return out[:, 0]


@pytest.mark.parametrize("fused", [False, True])
def test_each_unrolled_step_equals_drafting_over_the_true_context(fused):
    student = _student(fused_layer=5 if fused else 0)
    f, tokens = torch.randn(2, 9, H).double(), torch.randint(0, V, (2, 9))
    tapped = 30 * torch.randn(2, 9, H).double() if fused else None
    steps = student.unroll(f, tokens, 3, tapped=tapped)
    for step in (1, 2, 3):
        for t in range(step - 1, 9):
            torch.testing.assert_close(steps[step - 1][:, t], _drafted(student, f, tokens, t, step, tapped))


def test_a_fused_draft_reads_its_layer_at_the_targets_entries_alone():
    """m changes the first step's prediction; a later step's own entries read zeros in its place, and m is taken
    at unit rms, so a scaled m predicts the same."""
    student = _student(fused_layer=5)
    f, tokens, m = torch.randn(1, 8, H).double(), torch.randint(0, V, (1, 8)), torch.randn(1, 8, H).double()
    s1, s2 = student.unroll(f, tokens, 2, true_context=False, tapped=m)
    assert not torch.allclose(s1, student.unroll(f, tokens, 1, tapped=torch.randn_like(m))[0])
    torch.testing.assert_close(s1, student.unroll(f, tokens, 1, tapped=40 * m)[0], rtol=1e-5, atol=1e-5)  # float32 rms
    own = torch.cat([m[:, :1], torch.zeros_like(m[:, 1:])], 1)
    torch.testing.assert_close(s2, student.features(torch.cat([f[:, :1], s1[:, :-1]], 1), tokens, tapped=own))
    with pytest.raises(ValueError, match="pass it as `tapped`"):
        student.features(f, tokens)


def test_predicted_context_is_each_stream_alone_and_differs_from_drafting():
    student = _student()
    f, tokens = torch.randn(1, 8, H).double(), torch.randint(0, V, (1, 8))
    s1, s2 = student.unroll(f, tokens, 2, true_context=False)
    torch.testing.assert_close(s2, student.features(torch.cat([f[:, :1], s1[:, :-1]], 1), tokens))
    drafted = student.unroll(f, tokens, 2)[1]
    torch.testing.assert_close(drafted[:, :2], s2[:, :2])  # at t ≤ 1 the chain is the whole context
    assert not torch.allclose(drafted[:, 3:], s2[:, 3:])


def test_unroll_mask_rows():
    m = unroll_mask(4, 2, torch.device("cpu"))  # step 3: keys of streams 0, 1, 2
    assert m.shape == (4, 12)
    # query 3: the target's entries 0, 1, then stream 1's entry 2 and its own entry 3
    assert m[3].nonzero().flatten().tolist() == [0, 1, 4 + 2, 8 + 3]
    assert torch.equal(unroll_mask(5, 0, torch.device("cpu")), torch.ones(5, 5).tril().bool())
