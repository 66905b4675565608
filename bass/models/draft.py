"""The embedded target's shipped draft, and draft files written by the training pipeline.

The shipped file `bass/models/drafts/qwen2.5-coder-1.5b.draft.safetensors` (bf16, 17.4 MB, sha256-checked
at load) is a feature draft (`bass.models.feature_draft`, EAGLE-style): two blocks of width 512, W_fc and
W_out. It reads the target's hidden states and uses the target's own embedding and LM head. The file's
`vocab` tensor names the tokens it proposes from, the corpus's 32,768 most frequent and the end ids (its
head is those rows of the target's): its proposals are distributions over the target's vocabulary that are
zero elsewhere, so sampling stays lossless (`bass.decode.rules.DraftRule`).

The pipeline also writes "standalone" drafts: a small Qwen2 decoder with two projections onto the
target's hidden width H, whose token tables are derived at load from the target's:

    in_proj  [d, H]      embed_tokens = E_target in_projᵀ      [V, d]
    out_proj [d, H]      lm_head      = W_target out_projᵀ     [V, d]

so logits = h lm_headᵀ = (h out_proj) W_targetᵀ: the draft writes into the target's own output space at
rank d, and the 20 MB budget goes to layers instead of to 2 x 151,936 x d embedding rows.

A file's metadata carries the draft's config.json, its kind ("feature" or "standalone") and a fingerprint
of the target it was trained for; `shipped_draft(target)` returns None for any other target. Rebuild the
file with the training pipeline (`python -m draft_training`, README "Training the draft").
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from torch import nn

from bass.models.config import ModelConfig
from bass.models.feature_draft import FeatureDraft
from bass.models.llama import Transformer

DRAFT_FILE = Path(__file__).parent / "drafts" / "qwen2.5-coder-1.5b.draft.safetensors"
DRAFT_SHA256 = "08e4efb717ef054d521ff6be6d209fa483ded99f1d58935be86787d810b8d02c"
REBUILD_HINT = ("restore it with `git checkout -- bass/models/drafts` or rebuild it with the training pipeline "
                "(`python -m draft_training all`, README 'Training the draft')")
FINGERPRINT_ROWS = (0, 13, 220, 1000, 30000, 151643)  # token rows whose statistics identify the target


def fingerprint(embedding: torch.Tensor) -> list[float]:
    """Mean |x| of a few rows of the target's token embedding: tells its weights apart from another model's."""
    rows = embedding[[r % embedding.shape[0] for r in FINGERPRINT_ROWS]].float()
    return [round(float(v), 6) for v in rows.abs().mean(-1)]


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_draft_file(path: Path = DRAFT_FILE, sha256: str | None = DRAFT_SHA256
                    ) -> tuple[ModelConfig, dict[str, torch.Tensor], dict]:
    """(config, tensors, target metadata) of a draft file, after checking its sha256 (None skips the check).
The target metadata also holds the file's "kind": "standalone" (derived tables) or "feature", and the
"draft_temperature" its proposals are drawn at (a multiple of the request's; 1 when the file names none).

    Raises ValueError saying how to restore or rebuild the file when it is missing or corrupt.
    """
    from safetensors import safe_open

    if not path.is_file():
        raise ValueError(f"the shipped draft {path} is missing: {REBUILD_HINT}")
    if sha256 is not None and (digest := file_sha256(path)) != sha256:
        raise ValueError(f"the shipped draft {path} is corrupt (sha256 {digest[:12]}…, expected {sha256[:12]}…): "
                         f"{REBUILD_HINT}")
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (not a mapping)
    try:
        config = ModelConfig.from_hf(json.loads(meta["config"]))
        target = json.loads(meta["target"])
        target["kind"] = meta.get("kind", "standalone")
        # the multiple of the request's temperature the pipeline measured to accept most (EngineConfig)
        target["draft_temperature"] = float(meta.get("draft_temperature", 1.0))
    except (KeyError, ValueError) as err:
        raise ValueError(f"the draft file {path} lacks its config/target metadata ({err}): {REBUILD_HINT}") from err
    if "fused_layer" in meta:  # draft_training's --fused-layer experiment: it needs a target layer fed to it
        raise ValueError(f"the draft file {path} reads the target's residual stream after {meta['fused_layer']} "
                         "blocks, which this engine does not feed its draft: train it without --fused-layer")
    return config, tensors, target


def target_matches(target: nn.Module, meta: dict) -> bool:
    """Whether `target` is the model the draft was trained for (same shapes, same embedding fingerprint)."""
    cfg = target.config
    if (cfg.vocab_size, cfg.hidden_size) != (meta.get("vocab_size"), meta.get("hidden_size")):
        return False
    got = fingerprint(target.embed_tokens.weight)
    want = meta.get("fingerprint", [])
    return len(got) == len(want) and all(abs(a - b) <= 1e-2 * max(abs(b), 1e-6) for a, b in zip(got, want))


def derive_draft(target: nn.Module, config: ModelConfig, tensors: dict[str, torch.Tensor],
                 kind: str = "standalone", temperature_scale: float = 1.0) -> Transformer | FeatureDraft:
    """The runnable draft: shipped blocks + embedding and head derived from `target` (its device and dtype),
    or for a feature draft, the shipped tensors around the target's own embedding and head (folded with its
    output projection: `FeatureDraft.fold_head`). Its
    `temperature_scale` is the multiple of a request's temperature its proposals are drawn at by default."""
    model = _derive(target, config, tensors, kind)
    model.temperature_scale = temperature_scale
    return model


def _derive(target: nn.Module, config: ModelConfig, tensors: dict[str, torch.Tensor], kind: str
            ) -> Transformer | FeatureDraft:
    emb = target.embed_tokens.weight
    head = emb if target.lm_head is None else target.lm_head.weight
    device, dtype = emb.device, emb.dtype
    vocab = tensors.get("vocab")  # [V'] int32 target ids: a feature draft's reduced vocabulary
    state = {name: t.to(device=device, dtype=dtype) for name, t in tensors.items()
             if not name.startswith("derive.") and name != "vocab"}
    if kind == "feature":
        with torch.device("meta"):
            feature = FeatureDraft(config, emb, head, vocab)
        feature.load_state_dict(state, strict=True, assign=True)
        feature.fold_head()
        return feature.eval().requires_grad_(False)
    with torch.no_grad():
        w_in, w_out = (tensors[f"derive.{n}"].to(device=device, dtype=torch.float32) for n in ("in_proj", "out_proj"))
        # float32 products, then the target's dtype: the draft's tables carry no extra rounding on the CPU
        state["embed_tokens.weight"] = (emb.float() @ w_in.T).to(dtype)  # [V, d]
        state["lm_head.weight"] = (head.float() @ w_out.T).to(dtype)  # [V, d]
    with torch.device("meta"):
        model = Transformer(config)
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval().requires_grad_(False)


def shipped_draft(target: nn.Module, path: Path = DRAFT_FILE, sha256: str | None = DRAFT_SHA256
                  ) -> Transformer | FeatureDraft | None:
    """The shipped draft derived for `target`, or None when no draft ships for this target.

    A missing or corrupt shipped file raises ValueError (with how to rebuild it) only when the target is
    the model the draft is for; other targets never need the file. A file given with `sha256=None` (a
    pipeline output) is read whatever the target, and used when its fingerprint matches.
    """
    if sha256 is not None and not _could_match(target):
        return None
    config, tensors, meta = read_draft_file(path, sha256)
    if not target_matches(target, meta):
        return None
    return derive_draft(target, config, tensors, meta["kind"], meta["draft_temperature"])


def _could_match(target: nn.Module) -> bool:
    """Cheap pre-check before reading the file: Qwen2.5-Coder-1.5B's vocabulary and width."""
    cfg = target.config
    return cfg.family == "qwen2" and cfg.vocab_size == 151936 and cfg.hidden_size == 1536
