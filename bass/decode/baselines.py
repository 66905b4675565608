"""The baselines, through the same round loop as BASS so that comparisons are fair.

- regular batched decoding: `bass.decode.pipeline.decode` with `NoDrafter` (every round is one decode step);
- single-sequence speculative decoding: the same loop run with a batch of one, sequence after sequence.
  Each sequence's latency counts from the common decoding start, as a user waiting for k answers
  from a one-at-a-time system would see it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from bass.config import DraftLengthConfig, SamplingParams
from bass.decode.draft_length import DraftLengthPolicy
from bass.decode.pipeline import DecodeState, RoundReport, decode
from bass.decode.sequences import Sequence
from bass.runtime.cache import KVCache


def single_sequence(target: torch.nn.Module, attn: Callable, new_drafter: Callable, seqs: list[Sequence],
                    cache: KVCache, dl_cfg: DraftLengthConfig, params: SamplingParams, *,
                    look_ahead: bool = False) -> Iterator[RoundReport]:
    """Speculative decoding of each unfinished sequence of `seqs` (rows of `cache`, in order) alone (B = 1),
    one after another. Their budget and cancel are their request's (`Sequence.ctx`).

    `new_drafter(seq)` returns a drafter prefilled for that one sequence: a drafter's state belongs
    to the batch it was started with.
    """
    r = 1
    for row, seq in enumerate(seqs):
        if seq.finished:
            continue
        # earlier rows are finished, so row `row` can move to the front of the same storage
        state = DecodeState([seq], cache.compact([row]))
        policy = DraftLengthPolicy(dl_cfg, [seq.uid])  # the heuristic starts afresh at l0 for each
        for report in decode(target, attn, new_drafter(seq), policy, state, params, first_round=r,
                             look_ahead=look_ahead):
            r = report.index + 1
            yield report
