"""The warm-up a cost-policy row needs before it is timed, shared by the benchmarks.

A fixed draft length's warm-up runs the shapes its timed run will, so every CUDA graph is captured before the
clock starts. The cost policy's lengths follow its timings, so its timed run may draft a length its warm-up
did not, and a width no batch has a graph of is captured at once, inside the timed run
(`bench/results/gpu_2026-11-24_h100_borrow.json`: 131 and 145 ms captures against 5–12 ms rounds). So such a
row first drafts each length once. (A smaller batch of a width that has a graph runs in the wider batch's
graph, and its own is captured after the request, `bass.graphs`.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from bass.config import DraftLengthConfig, SamplingParams
from bass.engine import Engine

# the draft lengths a cost-policy row drafts before it is timed: with only L = 1..4, the policy's early rounds
# tried L = 6..8 inside timed passes, each a width no batch had a graph of, captured at once (121 and 196 ms
# rounds, `bench/results/real_bench_2026-11-24_h100_deferred_warm4.json`, `traces`)
WARM_LENGTHS = range(1, 9)


def warm_draft_lengths(engine: Engine, prompt: str | Sequence[int], lengths: Iterable[int], params: SamplingParams,
                       **kw) -> None:
    """One short generation (32 tokens at most) of `prompt` at each fixed draft length of `lengths`, with the
    request settings `kw` (k, method, drafter, backend ...), then drop the cost timings they left: a warm-up's
    rounds carry its graph captures and are no measure of the row's."""
    short = dataclasses.replace(params, max_new_tokens=min(params.max_new_tokens, 32))
    for n in lengths:
        engine.generate([prompt], params=short, draft_length=DraftLengthConfig("fixed", l0=n), **kw)
    engine.forget_measurements()
