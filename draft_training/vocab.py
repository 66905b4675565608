"""Stage 5: the draft's proposal vocabulary — the target tokens it may propose, the corpus's most frequent.

A feature draft's head is the target's [V, H] LM head, and a draft step reads all of it and samples over
all V logits, though code uses a small part of Qwen's 151,936 tokens: the 32,768 most frequent tokens of
the training corpus cover 99.6 % of it. A draft restricted to them (`bass.models.feature_draft`, `vocab`)
reads V'/V of the head and samples over V' logits. Tokens outside get q = 0: when the target wants one,
the verify's residual max(0, p − q) supplies it, so sampling stays lossless, and acceptance loses at
most the target's mass on them (what `coverage` reports, per corpus token).

The ids: the `size` most frequent ids of `train.bin` (ties by lower id), plus `always` (the target's
end-of-sequence ids: a draft must be able to propose the end), ascending. Counting only the corpus
(never HumanEval, never the target's completions, which are not shipped) makes the list reproducible from
the corpus stage alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from draft_training.corpus import load_tokens

DEFAULT_SIZE = 32_768


def proposal_vocab(tokens: np.ndarray, size: int, vocab_size: int, always: Iterable[int] = ()) -> np.ndarray:
    """[n] int32, ascending: the `size` most frequent ids of `tokens` (ties: lower id first) and `always`."""
    if not 1 <= size <= vocab_size:
        raise ValueError(f"the draft vocabulary size must be in 1 .. {vocab_size}, got {size}")
    counts = np.bincount(tokens.astype(np.int64, copy=False), minlength=vocab_size)[:vocab_size]
    top = np.argsort(-counts, kind="stable")[:size]
    return np.union1d(top, np.fromiter(always, dtype=np.int64)).astype(np.int32)


def coverage(tokens: np.ndarray, ids: np.ndarray) -> float:
    """The share of `tokens` that are in `ids`."""
    return float(np.isin(tokens, ids).mean()) if tokens.size else 0.0


def corpus_vocab(work: Path, size: int, vocab_size: int, eos_ids: Iterable[int]) -> tuple[np.ndarray, dict]:
    """The proposal vocabulary of the corpus in `work` (module docstring) and its recipe: what training
    restricts a feature draft to and what its file holds (`export_draft`, or `add_vocab` for a file without)."""
    always = [*eos_ids, json.loads((work / "manifest.json").read_text())["end_of_text_id"]]
    train, heldout = load_tokens(work / "train.bin"), load_tokens(work / "heldout.bin")
    ids = proposal_vocab(train, size, vocab_size, always)
    recipe = {"size": int(ids.size), "source": "train.bin token counts, plus the end-of-sequence ids",
              "coverage_train": round(coverage(train, ids), 5), "coverage_heldout": round(coverage(heldout, ids), 5)}
    return ids, recipe


def add_vocab(path: Path, work: Path, size: int = DEFAULT_SIZE) -> dict:
    """Write the proposal vocabulary of the corpus in `work` into the draft file `path` (its tensor `vocab`,
    and the recipe in its metadata); return the recipe. A draft file without it proposes from every token."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
        tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (not a mapping)
    if meta.get("kind") != "feature":
        raise ValueError(f"{path} is not a feature draft: only a feature draft proposes from a reduced vocabulary")
    config = json.loads(meta["config"])
    eos = config.get("eos_token_id")
    ids, recipe = corpus_vocab(work, size, config["vocab_size"], [eos] if isinstance(eos, int) else list(eos or []))
    tensors["vocab"] = torch.from_numpy(ids)
    meta["vocab"] = json.dumps(recipe)
    save_file(tensors, str(path), metadata=meta)
    return recipe
