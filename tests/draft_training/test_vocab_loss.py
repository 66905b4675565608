"""The feature loss's vocabulary-sized terms (`draft_training.vocab_loss`): the loss is its terms written out from
first principles, the compiled terms equal the eager ones on CUDA (values and gradients), and the teacher's
forward on the engine's fused kernels equals its torch forms (`test_kernel_choice.py`: which form each side runs)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tiny_pair import CUDA, TINY_DRAFT, tiny_pair

from bass.models import layers
from bass.models.loader import load_model
from draft_training.config import TrainConfig
from draft_training.train import SAMPLED, feature_logits, feature_loss, new_student, teacher_from
from draft_training.vocab_loss import fused, step_loss, teacher_targets


def _objective_nucleus(t_logits: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor:
    """p̃ [..., V'] as the objective defines it (`acceptance_loss`): p = softmax(z / T) over the whole vocabulary,
    S's tokens ranked by it and kept while the mass ranked above them is below top-p, renormalised over S."""
    p = torch.softmax(t_logits.double() / SAMPLED.temperature, -1)[..., vocab]
    ranked, order = p.sort(-1, descending=True)
    kept = torch.where(ranked.cumsum(-1) - ranked < SAMPLED.top_p, ranked, torch.zeros_like(ranked))
    return torch.zeros_like(p).scatter(-1, order, kept / kept.sum(-1, keepdim=True))


def test_the_feature_loss_is_its_terms_written_out(target_dir):
    """value = λ_f SmoothL1(f̂¹, f) + Σ_s λ_2^(s−1) [Σ_v p_S (log p_S − log q_s) − λ_α Σ_v min(p̃, q_s at τT)], with
    p_S the target's p restricted to the proposal vocabulary S (192 ids) and p̃ the objective's nucleus
    (`_objective_nucleus`), computed here without `vocab_loss`."""
    target, teacher, student = tiny_pair(target_dir)
    window = torch.randint(0, target.config.vocab_size, (2, 17), generator=torch.Generator().manual_seed(3))
    cfg = TrainConfig(loss="feature", unroll_steps=3, acceptance_weight=0.5, acceptance_scale=0.7)
    with torch.no_grad():
        value, _ = feature_loss(student, teacher, window, cfg, metrics=False)
        f, f1, t_logits, steps = feature_logits(student, teacher, window, cfg)
    vocab = student.vocab
    p_s = torch.softmax(t_logits[..., vocab].double(), -1)
    processed = _objective_nucleus(t_logits, vocab)
    expected = cfg.feature_weight * F.smooth_l1_loss(f1.double(), f[:, 1:].double())
    for i, s in enumerate(steps):
        q = torch.softmax(s.double(), -1)
        kl = (p_s * (p_s.log() - q.log())).sum(-1).mean()
        alpha = torch.minimum(processed, torch.softmax(s.double() / (0.8 * 0.7), -1)).sum(-1).mean()
        expected = expected + 0.5 ** i * (kl - 0.5 * alpha)
    assert 0.0 < float(alpha) < 1.0
    assert float(value) == pytest.approx(float(expected), rel=1e-5, abs=1e-6)


def test_the_heads_padding_rows_are_sliced_off(target_dir):
    """A proposal vocabulary of 37 ids: the student's head holds 64 rows (aligned products), its logits are the
    37 of the unpadded head exactly, and a loss's gradient reaches the draft as without the padding."""
    target, teacher, _ = tiny_pair(target_dir)
    vocab = torch.arange(3, 3 + 37 * 5, 5)
    padded, plain = (new_student(teacher, TINY_DRAFT, seed=0, feature=True, vocab=vocab, align=a) for a in (64, 1))
    assert padded._tables[1].shape[0] == 64 and plain._tables[1].shape[0] == 37
    f_hat = torch.randn(2, 5, target.config.hidden_size, requires_grad=True)
    a, b = padded.logits(f_hat), plain.logits(f_hat)
    assert a.shape == b.shape == (2, 5, 37)
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    ga, gb = (torch.autograd.grad(torch.log_softmax(x, -1)[..., 0].sum(), f_hat)[0] for x in (a, b))
    torch.testing.assert_close(ga, gb, rtol=1e-5, atol=1e-6)


def test_fused_is_eager_where_it_cannot_compile():
    x = torch.zeros(2)
    assert fused(step_loss, x) is step_loss
    assert fused(step_loss, x, enabled=False) is step_loss


@CUDA
def test_compiled_terms_equal_the_eager_ones_on_cuda():
    g = torch.Generator(device="cuda").manual_seed(0)
    V, vocab = 4096, torch.arange(0, 4096, 3, device="cuda")
    t_logits = (torch.randn(2, 64, V, device="cuda", generator=g) * 4).bfloat16()
    s = (torch.randn(2, 64, len(vocab), device="cuda", generator=g) * 4).bfloat16().requires_grad_()
    eager_t = teacher_targets(t_logits, vocab, SAMPLED)
    fused_t = fused(teacher_targets, t_logits)(t_logits, vocab, SAMPLED)
    for a, b in zip(eager_t, fused_t):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    values, grads = [], []
    for fn in (step_loss, fused(step_loss, s)):
        value = fn(s, *eager_t, 0.56, 2.0)
        values.append(value)
        grads.append(torch.autograd.grad(value, s)[0])
    assert fused(step_loss, s) is not step_loss
    torch.testing.assert_close(values[1], values[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads[1].float(), grads[0].float(), rtol=2e-2, atol=1e-6)


@CUDA
def test_the_teacher_on_fused_kernels_equals_its_torch_forms_on_cuda(target_dir, monkeypatch):
    target = load_model(str(target_dir), device="cuda", dtype=torch.bfloat16)
    teacher = teacher_from(target.model)
    tokens = torch.randint(0, 100, (3, 33), device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        on = teacher.hidden(tokens)
        monkeypatch.setattr(layers, "FUSED_KERNELS", False)
        off = teacher.hidden(tokens)
    torch.testing.assert_close(on.float(), off.float(), rtol=2e-2, atol=2e-2)
