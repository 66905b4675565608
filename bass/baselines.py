"""The baselines, through the same round loop as BASS so that comparisons are fair.

- regular batched decoding: `speculative_decode` with `NoDrafter` (every round is one decode step);
- single-sequence speculative decoding: the same loop run with a batch of one, sequence after sequence.
  Each sequence's latency counts from the common decoding start, as a user waiting for k answers
  from a one-at-a-time system would see it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from bass.cache import KVCache
from bass.config import DraftLengthConfig
from bass.draft_length import DraftLengthPolicy
from bass.speculative import DecodeState, RoundReport, speculative_decode


def single_sequence(target: torch.nn.Module, attn: Callable, new_drafter: Callable, live: list, cache: KVCache,
                    stop, rng, dl_cfg: DraftLengthConfig, *, t0: float, time_budget_s=None,
                    cancel=None, look_ahead: bool = False) -> Iterator[RoundReport]:
    """Speculative decoding of each live sequence alone (B = 1), one after another.

    `new_drafter(seq)` returns a drafter prefilled for that one sequence: a drafter's state belongs
    to the batch it was started with.
    """
    r = 0
    # the cost policy's measurements (costs at B = 1, pooled acceptance) carry over between sequences;
    # the paper's heuristic starts afresh at l0 for each, as before
    shared = DraftLengthPolicy(dl_cfg, [s.seq for s in live])
    for row, seq in enumerate(live):
        if seq.finished:
            continue
        # earlier rows are finished, so row `row` can move to the front of the same storage
        state = DecodeState([seq], cache.compact([row]))
        policy = shared if dl_cfg.policy == "cost" else DraftLengthPolicy(dl_cfg, [seq.seq])
        for report in speculative_decode(target, attn, new_drafter(seq), policy, state, stop, rng, t0=t0,
                                         time_budget_s=time_budget_s, cancel=cancel, first_round=r,
                                         look_ahead=look_ahead):
            r = report.index + 1
            yield report
