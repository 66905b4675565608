"""What the device thread runs requests with: the engine's models, caches and factories, handed down to the
scheduler and its batches so that nothing below the engine imports it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from bass.decode.draft_length import CostTable
from bass.drafters.base import Drafter
from bass.models.loader import LoadedModel
from bass.runtime.cache import CacheArena
from bass.runtime.prefill_graphs import PrefillGraphs


@dataclass
class Runner:
    """The engine's device side (`bass.engine.engine.Engine` builds it once, at load)."""

    target: LoadedModel
    target_forward: Callable  # the model, or its `GraphedModel` (CUDA graphs)
    prefill_graphs: PrefillGraphs | None  # the target's prefill, replayed per prompt width (CUDA)
    arena: CacheArena  # the target's K/V storage
    eos_ids: frozenset[int]
    attention: Callable[[str | None], Callable]  # backend name (None: the engine's) -> attention function
    new_drafter: Callable[[str, str | None], Drafter]  # (drafter name, backend) -> a fresh drafter for one batch
    max_batch_rows: int
    device_lock: threading.RLock  # held by whoever runs the models
    capture_queued: Callable[[Callable[[], bool] | None], None]  # graphs queued while busy, captured when idle
    cost_table: CostTable | None = None  # what a round costs here, measured at load (`bass.engine.warmup`)

    @property
    def tokenizer(self):
        return self.target.tokenizer

    @property
    def arena_device(self):
        """The device the models run on."""
        return next(self.target.model.parameters()).device

