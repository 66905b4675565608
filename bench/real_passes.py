"""A benchmark row from timed passes: `real_bench.py`'s measurement, apart from what it measures.

`measure` runs each runner (a prompt index and a pass index -> one generation of k samples) over every prompt
once untimed (pass 0: CUDA graphs captured, caches sized), then `repeats` passes, the runners interleaved prompt
by prompt so that a pair compares under the same conditions. A row is its median pass by ms/token/seq (of an
even number, the faster middle one), with every pass's ms/token/seq, host stalls and graph captures beside it.
`aggregate` turns one pass over the prompts into the row's numbers (the columns of `real_bench.py`'s
docstring), summed over all sequences.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from bass.events import GenerationResult
from bass.runtime.graphs import (
    decoding_capture_shapes,
    decoding_captures,
    deferred_capture_shapes,
    deferred_captures,
)

Runner = Callable[[int, int], GenerationResult]  # (prompt index, pass index) -> a generation of k samples of the prompt


def aggregate(results: list[GenerationResult]) -> dict:
    """One pass over the prompts -> the row's numbers (`real_bench.py`'s columns), summed over all sequences."""
    seqs = [c.stats for r in results for c in r.candidates]
    tokens, decode_s = sum(s.tokens for s in seqs), sum(r.stats.decode_s for r in results)
    proposed, accepted = sum(s.proposed for s in seqs), sum(s.accepted for s in seqs)
    rounds = sum(s.rounds for s in seqs)
    lengths = [n for r in results for n in r.stats.draft_lengths]
    per_seq = [1e3 * s.finish_time_s / s.tokens for s in seqs if s.tokens]
    stalls = [st for r in results if (st := r.stats.host_stalls()) is not None]
    return dict(ms_per_token=sum(per_seq) / len(per_seq) if per_seq else 0.0,
                throughput=tokens / decode_s if decode_s > 0 else 0.0,
                acceptance=accepted / proposed if proposed else None,
                tokens_per_round=(tokens - len(seqs)) / rounds if rounds else 0.0,
                mean_draft_length=sum(lengths) / len(lengths) if lengths else 0.0,
                prefill_ms=1e3 * sum(r.stats.prefill_s for r in results) / len(results),
                tokens=tokens, sequences=len(seqs), rounds=len(lengths),
                # rounds the host held up (`BatchStats.host_stalls`; CUDA only) and their excess / decoding time
                host_stall_rounds=sum(n for n, _ in stalls) if stalls else None,
                host_stall_share=sum(x for _, x in stalls) / decode_s if stalls and decode_s > 0 else None,
                # the draft-length policy's account of the pass's last generation (`DraftLengthPolicy.describe`)
                policy_state=results[-1].stats.policy if results else None)


def measure(runners: dict[str, Runner], n_prompts: int, repeats: int) -> dict[str, dict]:
    """Warm each runner up over every prompt (pass 0), then `repeats` passes over the prompts (passes 1 ..
    repeats), the runners interleaved prompt by prompt (so a pair compares under the same conditions); per runner
    the pass with the median ms/tok/seq, with every pass's ms/tok/seq beside it. The warm-up covers every prompt
    because each prompt's shapes (batch and width buckets as sequences finish, draft widths) capture their own
    CUDA graphs: one-off costs of a server's first requests, which a timed pass would otherwise carry."""
    for i in range(n_prompts):
        for run in runners.values():
            run(i, 0)
    passes: dict[str, list[dict]] = {name: [] for name in runners}
    for p in range(1, repeats + 1):
        got: dict[str, list[GenerationResult]] = {name: [] for name in runners}
        captured, deferred = dict.fromkeys(runners, 0), dict.fromkeys(runners, 0)
        shapes: dict[str, list[str]] = {name: [] for name in runners}
        built: dict[str, list[str]] = {name: [] for name in runners}  # the deferred ones, by shape
        for i in range(n_prompts):
            for name, run in runners.items():
                before, deferred_before = decoding_captures(), deferred_captures()
                built_before = len(deferred_capture_shapes())
                got[name].append(run(i, p))
                captured[name] += decoding_captures() - before
                shapes[name] += decoding_capture_shapes()[before:]  # which shapes it waited for
                deferred[name] += deferred_captures() - deferred_before  # after "done": in no result's clock
                built[name] += deferred_capture_shapes()[built_before:]
        for name in runners:
            passes[name].append({**aggregate(got[name]), "captures": captured[name], "deferred": deferred[name],
                                 "shapes": shapes[name], "built": built[name]})
    out = {}
    for name, ps in passes.items():
        ms = [p["ms_per_token"] for p in ps]
        median = sorted(ps, key=lambda p: p["ms_per_token"])[(len(ps) - 1) // 2]
        # graphs captured inside a timed pass's decoding: one-off costs (tens of rounds each) in its ms/tok/seq;
        # those captured between its generations (`bass.runtime.graphs`, deferred) cost it nothing
        out[name] = {**median, "ms_per_token_passes": ms, "ms_per_token_spread": max(ms) - min(ms),
                     "ms_per_token_median": statistics.median(ms), "captures_passes": [p["captures"] for p in ps],
                     "host_stall_share_passes": [p["host_stall_share"] for p in ps],
                     "deferred_captures_passes": [p["deferred"] for p in ps],
                     "captured_shapes_passes": [p["shapes"] for p in ps],
                     "deferred_shapes_passes": [p["built"] for p in ps]}
    return out
