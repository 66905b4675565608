"""Shared by the draft-training tests: the tiny target's teacher and feature student (the target: conftest's
`target_dir`), and the CUDA mark."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bass.models.loader import LoadedModel, load_model
from draft_training.config import DraftShape
from draft_training.model import FeatureStudent, Teacher
from draft_training.train import new_student, teacher_from

TINY_DRAFT = DraftShape(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64)
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.compile and the fused kernels run on CUDA; "
                                                                 "the CPU twins are the tests without this mark")


def tiny_pair(target_dir: Path, device: str = "cpu") -> tuple[LoadedModel, Teacher, FeatureStudent]:
    """(target, teacher, feature student) of the tiny target saved in `target_dir` (conftest), in float32 on
    `device`; the student proposes from every other id."""
    target = load_model(str(target_dir), device=device)
    teacher = teacher_from(target.model)
    vocab = torch.arange(0, target.config.vocab_size, 2)
    return target, teacher, new_student(teacher, TINY_DRAFT, seed=0, feature=True, vocab=vocab)
