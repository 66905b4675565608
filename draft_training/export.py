"""Stage 4: write a trained draft as the shipped file (`bass.models.draft` reads it).

bf16 safetensors of the student's own parameters (blocks, final norm, `derive.in_proj` / `derive.out_proj`;
a feature draft's `fc` / `out_proj`, and its proposal vocabulary `vocab`) with metadata: the draft's config.json
and kind, the target's shapes and embedding fingerprint, the recipe, and the draft temperature.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from bass.models.draft import file_sha256, fingerprint
from draft_training.model import FeatureStudent, Student, Teacher, student_state_dict


def export_draft(student: Student | FeatureStudent, teacher: Teacher, path: Path, recipe: dict,
                 vocab: tuple[np.ndarray, dict] | None = None, draft_temperature: float | None = None) -> str:
    """Write the draft file to `path`; return its sha256 (the engine checks it at load). With `vocab` (ids and
    recipe, `draft_training.vocab.corpus_vocab`) it holds a feature draft's proposal vocabulary; with
    `draft_temperature` the multiple of the request's temperature its proposals are drawn at."""
    from safetensors.torch import save_file

    state = {name: t.to(torch.bfloat16).contiguous().cpu() for name, t in student_state_dict(student).items()}
    target = {"vocab_size": teacher.config.vocab_size, "hidden_size": teacher.config.hidden_size,
              "fingerprint": fingerprint(teacher.embed_tokens.weight)}
    meta = {"config": json.dumps(student.config.to_hf()), "target": json.dumps(target),
            "recipe": json.dumps(recipe, default=str),
            "kind": "feature" if isinstance(student, FeatureStudent) else "standalone"}
    if vocab is not None:
        state["vocab"], meta["vocab"] = torch.from_numpy(vocab[0]), json.dumps(vocab[1])
    if getattr(student, "fused_layer", 0):  # the engine refuses these (`bass.models.draft.read_draft_file`)
        meta["fused_layer"] = str(student.fused_layer)
    if draft_temperature is not None:
        meta["draft_temperature"] = f"{draft_temperature:g}"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata=meta)
    return file_sha256(path)
