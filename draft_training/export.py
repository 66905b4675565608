"""Stage 4: write a trained draft as the shipped file (`bass.models.draft` reads it).

bf16 safetensors of the student's own parameters (blocks, final norm, `derive.in_proj` / `derive.out_proj`;
a feature draft's `fc` / `out_proj`) with metadata: the draft's config.json and kind, the target's shapes
and embedding fingerprint, and the recipe.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bass.models.draft import file_sha256, fingerprint
from draft_training.model import FeatureStudent, Student, Teacher, student_state_dict


def set_draft_temperature(path: Path, scale: float) -> None:
    """Record in the draft file at `path` the multiple of the request's temperature its proposals are drawn at
    (metadata "draft_temperature", read by `bass.models.draft`; the tensors are unchanged)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
        tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (not a mapping)
    meta["draft_temperature"] = f"{scale:g}"
    save_file(tensors, str(path), metadata=meta)


def export_draft(student: Student | FeatureStudent, teacher: Teacher, path: Path, recipe: dict) -> str:
    """Write the draft file to `path`; return its sha256 (the engine checks it at load)."""
    from safetensors.torch import save_file

    state = {name: t.to(torch.bfloat16).contiguous().cpu() for name, t in student_state_dict(student).items()}
    target = {"vocab_size": teacher.config.vocab_size, "hidden_size": teacher.config.hidden_size,
              "fingerprint": fingerprint(teacher.embed_tokens.weight)}
    meta = {"config": json.dumps(student.config.to_hf()), "target": json.dumps(target),
            "recipe": json.dumps(recipe, default=str),
            "kind": "feature" if isinstance(student, FeatureStudent) else "standalone"}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata=meta)
    return file_sha256(path)
