"""The feature draft's unrolled training steps see what drafting sees: step s at position t equals the draft
run causally over the target's entries up to t − s + 1 followed by its own chain of guesses."""

from __future__ import annotations

import torch

from bass.models.config import ModelConfig
from draft_training.model import FeatureStudent, unroll_mask

H, V = 24, 50


def _student(layers: int = 2) -> FeatureStudent:
    torch.manual_seed(0)
    config = ModelConfig(family="qwen2", vocab_size=V, hidden_size=16, intermediate_size=32, num_layers=layers,
                         num_heads=2, num_kv_heads=1, head_dim=8, rope_theta=10000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, qkv_bias=True, max_position_embeddings=64,
                         eos_token_ids=(0,), bos_token_id=None, pad_token_id=None)
    student = FeatureStudent(config, torch.randn(V, H), torch.randn(V, H))
    for p in student.parameters():
        torch.nn.init.normal_(p, 0.0, 0.3)
    return student.double()


def _drafted(student: FeatureStudent, f: torch.Tensor, tokens: torch.Tensor, t: int, step: int) -> torch.Tensor:
    """f̂ at position t after `step` draft steps, drafting as the engine does: the target's entries 0 .. c
    (c = t − step + 1) in the cache, then each step appends its own guess and runs causally over all of it."""
    c = t - step + 1
    fed = f[:, :c + 1]
    for i in range(step):
        out = student.features(fed, tokens[:, :c + 1 + i])[:, -1:]  # plain causal attention, no mask
        fed = torch.cat([fed, out], 1)
    return out[:, 0]


def test_each_unrolled_step_equals_drafting_over_the_true_context():
    student = _student()
    f, tokens = torch.randn(2, 9, H).double(), torch.randint(0, V, (2, 9))
    steps = student.unroll(f, tokens, 3)
    for step in (1, 2, 3):
        for t in range(step - 1, 9):
            torch.testing.assert_close(steps[step - 1][:, t], _drafted(student, f, tokens, t, step))


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
