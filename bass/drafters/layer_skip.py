"""Self-speculation: the target's first N layers + final norm + LM head draft. It reads and writes the target's own
cache for those layers, so no KV is recomputed or stored twice."""

from __future__ import annotations

from collections.abc import Callable

import torch

from bass.decode.rules import draft_rule, run_then
from bass.drafters.base import Drafter
from bass.drafters.chain import draft_autoregressively
from bass.runtime.transfer import ints_to_device, padded_ids


class LayerSkipDrafter(Drafter):
    name = "layer-skip"

    def __init__(self, target: torch.nn.Module, attn: Callable, num_layers: int):
        if not 1 <= num_layers < target.config.num_layers:
            raise ValueError(f"layer_skip_layers must be in 1 .. {target.config.num_layers - 1} for this target, "
                             f"got {num_layers}")
        self.target, self.attn, self.num_layers = target, attn, num_layers

    @torch.inference_mode()
    def propose(self, histories, lengths, params, u, target_cache):
        # The target cache holds every token but the last emitted one, so each sequence has one pending.
        saved = target_cache.suffix_len.clone()
        device = saved.device
        pending = padded_ids([h[-1:] for h in histories], device=device), ints_to_device([1] * len(histories), device)

        rule = draft_rule(self.proposal_params(params), self.target.config.vocab_size)

        def step(tokens, q_len, last_only, u_i, out):  # a step's graph keeps its own outputs: draft_chain copies
            return run_then(self.target, rule, (u_i,), tokens, target_cache, q_len, self.attn,
                            num_layers=self.num_layers, last_only=last_only)

        proposal = draft_autoregressively(step, pending, lengths, u)
        # The verify pass rewrites these rows in every layer; only the lengths need restoring.
        target_cache.truncate(saved)
        return proposal
