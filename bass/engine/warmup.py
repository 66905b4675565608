"""What an engine does at load where it replays CUDA graphs, before its first visitor: reserve the K/V storage
for the largest batch it admits, capture every graph a batch of each bucket meets at each draft length the
cost table prices, and time those rounds into the table (`bass.decode.draft_length.CostTable`).

A round's cost is timed as it runs for requests: a batch of `rows` rows of one prompt decodes with a fixed draft
length L (L = 0: plain steps), every row to its token limit, once to capture its graphs and once timed, and c(rows,
L) is the median time between consecutive rounds of the timed run that drafted L, so the host's share is in it as
well as the device's. Widest batches first: a narrower batch borrows the wider graphs while it runs and its own are
captured between requests (`bass.runtime.graphs`), before anything is timed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from bass.config import CANDIDATE_TEMPERATURE, CANDIDATE_TOP_P, DraftLengthConfig, SamplingParams
from bass.decode.draft_length import L_MAX, CostTable
from bass.events import GenerationResult

WARM_PROMPT = 'def running_mean(xs: list[float]) -> list[float]:\n    """The mean of each prefix of xs."""\n'


@dataclass(frozen=True)
class Reserve:
    """The K/V storage reserved at load: what the largest batch it admits without moving the storage holds."""

    rows: int  # sequences (`EngineConfig.max_batch_rows`)
    groups: int  # prompts: as many as rows (k = 1 each)
    width: int  # tokens of each prompt
    capacity: int  # generated tokens of each sequence, plus the round's slack


def cost_table(generate: Callable[..., GenerationResult], settle: Callable[[], object], buckets: Sequence[int],
               device: str, params: SamplingParams | None = None, new_tokens: int = 48) -> CostTable:
    """Capture and time every (batch bucket, L) in `buckets` x 0 .. L_MAX (module docstring). `generate` is
    `Engine.generate`, `settle` waits for the captures queued between requests; `params`: the sampling processing
    whose graphs are captured (default: the app's candidates, T 0.8, top-p 0.95)."""
    params = replace(params or SamplingParams(temperature=CANDIDATE_TEMPERATURE, top_p=CANDIDATE_TOP_P),
                     max_new_tokens=new_tokens, stop=(), time_budget_s=None, seed=0, ignore_eos=True)

    def run(rows: int, L: int) -> GenerationResult:
        return generate(WARM_PROMPT, k=rows, params=params, method="bass",
                        draft_length=DraftLengthConfig("fixed", l0=L))

    order = [(b, L) for b in sorted(buckets, reverse=True) for L in range(L_MAX + 1)]
    for b, L in order:  # captures: each shape's own graph, or a wider one's while its own waits for the idle time
        run(b, L)
    settle()
    return CostTable({(b, L): round_seconds(run(b, L), L) for b, L in order}, device)


def round_seconds(result: GenerationResult, L: int) -> float:
    """The median time between consecutive rounds that drafted L (the first round, which follows the prefill's
    wait, left out)."""
    st = result.stats
    gaps = [b - a for a, b, n in zip(st.round_ends_s, st.round_ends_s[1:], st.draft_lengths[1:], strict=False)
            if n == L]
    if not gaps:
        raise RuntimeError(f"the warm-up's rounds at L = {L} ran no two in a row: raise its new_tokens")
    return statistics.median(gaps)
