"""The training data as a step reads it: random windows of the token files, and the held-out windows every
evaluation is made on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from draft_training.config import TrainConfig
from draft_training.corpus import load_tokens

HELDOUT_SEED = 1  # the held-out windows of every run (those the first two cycles were measured on)


def load_completions(paths: Path | Sequence[Path] | None) -> np.ndarray | None:
    """The target's completions from one or more token files, as one flat array (None: no file given).

    Each file is records ending in the end-of-text id (`draft_training.completions`), so files join as they are:
    a cycle can train on the completions of earlier ones, kept, beside its own fresh ones."""
    paths = [] if paths is None else [paths] if isinstance(paths, Path) else list(paths)
    if missing := [str(p) for p in paths if not p.exists()]:
        raise ValueError(f"no completions file {', '.join(missing)}: run the completions stage, or leave it out")
    arrays = [load_tokens(p) for p in paths]
    if not arrays:
        return None
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


class Windows:
    """Random [B, T+1] windows from flat token files; a fixed share of each batch from the completions."""

    def __init__(self, corpus: np.ndarray, completions: np.ndarray | None, share: float, seed: int):
        self.sources = [corpus] + ([completions] if completions is not None and completions.size else [])
        self.share = share if len(self.sources) > 1 else 0.0
        self.rng = np.random.default_rng(seed)

    def batch(self, B: int, T: int, device: torch.device, non_blocking: bool = True) -> torch.Tensor:
        """[B, T+1] windows on `device`. On CUDA they travel from pinned memory without blocking: a copy from
        pageable memory waits for the device to finish the step before, so the host cannot queue the next
        step's launches ahead (88.1 against 89.5 ms a training step on the H200)."""
        n_comp = round(B * self.share)
        rows = []
        for b in range(B):
            src = self.sources[1] if b < n_comp else self.sources[0]
            if src.size <= T + 1:
                raise ValueError(f"a token file of {src.size} ids is too short for windows of {T + 1}: "
                                 "build a larger corpus or lower seq_len")
            start = int(self.rng.integers(0, src.size - T - 1))
            rows.append(np.asarray(src[start:start + T + 1], dtype=np.int64))
        rows = torch.from_numpy(np.stack(rows))  # [B, T+1]
        if device.type == "cuda" and non_blocking:
            return rows.pin_memory().to(device, non_blocking=True)
        return rows.to(device)


def heldout_windows(heldout: Path, cfg: TrainConfig, device: torch.device) -> list[torch.Tensor]:
    """The windows [B, T+1] (two batches) every evaluation of a run is made on: from the held-out corpus files
    only, and the same whatever the run's seed, so that runs and the cycles that continue them compare. (The
    first five cycles drew them with seed + 1: the third to fifth cycles' figures are each on its own windows.)"""
    held = Windows(load_tokens(heldout), None, 0.0, HELDOUT_SEED)
    return [held.batch(cfg.batch_size, cfg.seq_len, device) for _ in range(2)]


__all__ = ["HELDOUT_SEED", "Windows", "heldout_windows"]
