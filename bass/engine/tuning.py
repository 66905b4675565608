"""Switches that turn one of the engine's speed-ups off, for the benchmarks that measure each one and the tests
that check a path both ways. Every default is what the product runs; none changes a token."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    """`Engine(config, tuning=Tuning(...))`."""

    # on CUDA, time cuBLAS against the skinny Triton GEMM for each projection shape at load, and use the faster
    # (`bass.models.linear`); False: cuBLAS throughout
    tune_projections: bool = True
    # on CUDA, replay a draft model's whole proposal (its L steps and their rules) as one CUDA graph instead of
    # one per step (`bass.drafters.chain.chained_proposal`); False: one graph per draft step
    proposal_graphs: bool = True
    # on CUDA, replay the prefill from a CUDA graph per prompt-width bucket (`bass.runtime.prefill_graphs`):
    # eagerly, the host's launches take several times the device's work; False: the prefill runs eagerly
    prefill_graphs: bool = True
    # with CUDA graphs, at load: reserve the K/V storage, capture every batch bucket's graphs at each draft length
    # and time them into the cost table (`bass.engine.warmup`); False: graphs are captured as requests meet them,
    # and the "auto" draft length is l0
    warm_up: bool = True
