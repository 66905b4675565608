"""The metric definitions of docs/design.md §5, used by the engine, the benchmarks, the evaluation and the app.

Per-sequence quantities live on `bass.events.SequenceStats` / `BatchStats`; this module holds what is
computed across sequences or against hardware.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bass.events import Candidate


def mean_ms_per_token(finish_times_s: Sequence[float], tokens: Sequence[int]) -> float:
    """The paper's headline latency: mean over sequences of (finish time / generated tokens), in ms.

    Sequences that generated nothing are left out of the mean.
    """
    per_seq = [1000.0 * t / n for t, n in zip(finish_times_s, tokens, strict=True) if n > 0]
    return sum(per_seq) / len(per_seq) if per_seq else 0.0


def candidates_ms_per_token(candidates: Sequence[Candidate]) -> float:
    """`mean_ms_per_token` over the candidates that have a rate (`Candidate.has_rate`): what a batch reports."""
    timed = [c.stats for c in candidates if c.has_rate]
    return mean_ms_per_token([st.finish_time_s for st in timed], [st.tokens for st in timed])


def first_finished(finish_times_s: Sequence[float | None]) -> int | None:
    """The index of the first sequence to finish (None if none did): the one Pass@First tests.

    `finish_times_s[i]` is None for a sequence that did not finish within the budget; ties go to the
    lower index, as the engine reports sequences in index order within a round.
    """
    finished = [(t, i) for i, t in enumerate(finish_times_s) if t is not None]
    return min(finished)[1] if finished else None


def pass_at_first(finish_times_s: Sequence[float | None], passed: Sequence[bool]) -> bool:
    """Pass@First: the first sequence to finish (within the budget, `first_finished`) passes its tests."""
    first = first_finished(finish_times_s)
    return first is not None and bool(passed[first])


def pass_at_all(finish_times_s: Sequence[float | None], passed: Sequence[bool]) -> bool:
    """Pass@All: at least one sequence that finished within the budget passes."""
    return any(p for t, p in zip(finish_times_s, passed, strict=True) if t is not None)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n - c, k) / C(n, k) for n samples of which c pass."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def gpu_utilization(flops_per_token: float, tokens_per_s: float, peak_flops: float) -> float:
    """Fraction of the measured peak bf16 rate actually needed: FLOPs/token x tokens/s / peak."""
    if peak_flops <= 0:
        raise ValueError(f"peak_flops must be > 0, got {peak_flops}")
    return flops_per_token * tokens_per_s / peak_flops


def decoder_flops_per_token(num_params: int, num_layers: int, hidden_size: int, context_len: int) -> float:
    """Model FLOPs needed per generated token: 2 per weight plus attention over the context.

    2 * params for the matrix products, plus 2 * 2 * layers * context * hidden for QK^T and PV.
    """
    return 2.0 * num_params + 4.0 * num_layers * context_len * hidden_size


def time_to_first_pass(prefill_s: float, finish_times_s: Sequence[float | None],
                       passed: Sequence[bool | None]) -> float | None:
    """Time to first pass: seconds from the request to the first candidate whose tests all pass.

    A candidate's time is the prefill plus its finish time (`finish_times_s[i]`, seconds since decoding
    began; None when it did not finish by itself within the budget, which cannot count as a pass).
    `passed[i]` is None for a candidate that was not tested. None when no candidate passes. The time the
    sandbox takes to give the verdict is left out, so methods compare on generation alone.
    """
    times = [t for t, p in zip(finish_times_s, passed, strict=True) if t is not None and p]
    return prefill_s + min(times) if times else None


def format_seconds(seconds: float) -> str:
    """A duration as a reader wants it: '3.2 s' from one second up, '48 ms' below (a GPU's first pass comes
    in tens of milliseconds, which one decimal of a second rounds to '0.0 s')."""
    if seconds < 1.0:
        ms = 1000.0 * seconds
        return f"{ms:.0f} ms" if ms >= 10 or ms == 0 else f"{ms:.1f} ms"
    return f"{seconds:.1f} s"


def format_seconds_or_none(seconds: float | None) -> str:
    """`format_seconds`, or 'none' when nothing passed (how every report spells a missing time to first pass)."""
    return "none" if seconds is None else format_seconds(seconds)
