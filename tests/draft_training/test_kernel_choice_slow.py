"""Which form of the norm, rope and activation a training step runs (`bass.models.layers._fused`): the engine's
fused kernels have no backward, so the student, which asks for a gradient, takes the torch forms, while the frozen
teacher, under `no_grad`, runs the kernels. On CUDA as it runs; on the CPU through the interpreted kernels
(TRITON_INTERPRET=1), with the device test of the rule left out."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_pair import CUDA, tiny_pair

import kernels.rmsnorm
from bass.models import layers, linear
from bass.models.linear import needs_autograd
from bass.models.loader import load_model
from draft_training.config import TrainConfig
from draft_training.train import feature_loss

pytestmark = pytest.mark.slow  # a training step through the interpreted kernels


def _step(target_dir: Path, device: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, dict[str, torch.Tensor]]:
    """(norm kernel launches by the teacher, by the student, the student's gradients) of one feature-loss step
    whose draft trains only its norms' weights: the norm's first input is then the frozen teacher's feature, so
    only the weight asks for the gradient, which a call site that left it out of `_fused` would lose."""
    _, teacher, student = tiny_pair(target_dir, device)
    for name, p in student.named_parameters():
        p.requires_grad_("norm" in name)
    calls = {"teacher": 0, "student": 0}
    phase = ["teacher"]
    kernel = kernels.rmsnorm.rms_norm_fused

    def counted(*args, **kwargs):
        calls[phase[0]] += 1
        return kernel(*args, **kwargs)

    monkeypatch.setattr(kernels.rmsnorm, "rms_norm_fused", counted)
    hidden = teacher.hidden

    def teacher_then_student(*args, **kwargs):
        phase[0] = "teacher"
        try:
            return hidden(*args, **kwargs)
        finally:
            phase[0] = "student"

    monkeypatch.setattr(teacher, "hidden", teacher_then_student)
    window = torch.randint(0, teacher.config.vocab_size, (2, 17), generator=torch.Generator().manual_seed(5))
    value, _ = feature_loss(student, teacher, window.to(device), TrainConfig(loss="feature", unroll_steps=2,
                                                                             compile=False), metrics=False)
    value.backward()
    grads = {n: p.grad.detach().clone() for n, p in student.named_parameters() if p.requires_grad}
    return calls["teacher"], calls["student"], grads


def _check(target_dir: Path, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    t_calls, s_calls, grads = _step(target_dir, device, monkeypatch)
    assert t_calls > 0, "the teacher did not run the fused norm"
    assert s_calls == 0, "a norm that asks for a gradient ran the kernel, which has none"
    monkeypatch.setattr(layers, "FUSED_KERNELS", False)
    t_ref, _, ref = _step(target_dir, device, monkeypatch)
    assert t_ref == 0
    assert grads.keys() == ref.keys() and grads
    for name in ref:
        assert grads[name].abs().sum() > 0, name
        torch.testing.assert_close(grads[name], ref[name], rtol=1e-3, atol=1e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter twin; on CUDA the test below runs")
def test_student_trains_on_torch_forms_while_the_teacher_runs_the_kernels_interpreted(target_dir, monkeypatch):
    monkeypatch.setattr(layers, "_fused", lambda x, *rest: layers.FUSED_KERNELS and not needs_autograd(x, *rest))
    _check(target_dir, "cpu", monkeypatch)


@CUDA
def test_student_trains_on_torch_forms_while_the_teacher_runs_the_kernels_on_cuda(target_dir, monkeypatch):
    """With the engine's projection choices for the bfloat16 target in the process, as any engine on CUDA leaves
    them: the float32 teacher under autocast sees bfloat16 rows of those shapes and must not take them (its weights
    are float32: `linear._key`)."""
    tuned = load_model(str(target_dir), device="cuda", dtype=torch.bfloat16)
    linear.tune(tuned.model)
    try:
        _check(target_dir, "cuda", monkeypatch)
    finally:
        linear.clear()
