"""Shared by the draft-training tests: the tiny target (made once a session: conftest's `target_dir`), its teacher
and feature student, and the CUDA mark."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "bass"))
from tiny import make_model  # noqa: E402

from bass.models.loader import LoadedModel, load_model  # noqa: E402
from draft_training.config import DraftShape  # noqa: E402
from draft_training.model import FeatureStudent, Teacher  # noqa: E402
from draft_training.train import new_student, teacher_from  # noqa: E402

TINY_DRAFT = DraftShape(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64)
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.compile and the fused kernels run on CUDA; "
                                                                 "the CPU twins are the tests without this mark")


def tiny_target(folder: Path) -> Path:
    """Save the draft-training tests' target to `folder`: a tiny random qwen2 (`tests/bass/tiny.py`), its head scaled
    so that its logits are peaked as a trained code model's are; deterministic (seed 0)."""
    return make_model(folder, "qwen2", seed=0, head_scale=30.0)


def tiny_pair(target_dir: Path, device: str = "cpu") -> tuple[LoadedModel, Teacher, FeatureStudent]:
    """(target, teacher, feature student) of the tiny target saved in `target_dir` (`tiny_target`), in float32 on
    `device`; the student proposes from every other id."""
    target = load_model(str(target_dir), device=device)
    teacher = teacher_from(target.model)
    vocab = torch.arange(0, target.config.vocab_size, 2)
    return target, teacher, new_student(teacher, TINY_DRAFT, seed=0, feature=True, vocab=vocab)
