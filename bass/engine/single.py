"""Single-sequence speculative decoding, the baseline of one sequence at a time: one request, its k x G
sequences decoded one after another (B = 1), each with a drafter of its own, through the same round loop as
BASS. Each sequence's latency counts from the common decoding start, as a user waiting for k answers from a
one-at-a-time system would see it."""

from __future__ import annotations

import itertools
import time

import torch

from bass.decode.draft_length import DraftLengthPolicy
from bass.decode.pipeline import DecodeState, RoundLoop
from bass.decode.round import RoundModels
from bass.decode.rules import processing, verify_rule
from bass.decode.sequences import Sequence
from bass.drafters.base import Drafter
from bass.engine.batch import finish, route, start
from bass.engine.prefill import prefill_at_once
from bass.engine.request import Line, Request
from bass.engine.runner import Runner


class SingleRun:
    """One request of method "single", alone on the device thread."""

    exclusive = True

    def __init__(self, runner: Runner, line: Line, head: Request):
        self.runner, self.line, self.head = runner, line, head
        self.attn = runner.attention(head.kind.backend)

    @torch.inference_mode()
    def run(self) -> None:
        request = self.line.pop_if(lambda r: r is self.head)
        if request is None:  # (withdrawn in the meantime)
            return
        self.line.started(request)
        t = time.perf_counter()
        first = start(self.runner, request, prefill_at_once(self.runner.target.model, self.runner.prefill_graphs,
                                                            request.ids, self.attn), t, itertools.count())
        k, capacity = request.k, request.params.max_new_tokens + 2
        cache = self.runner.arena.fork(first.cache, k, capacity, width=max(map(len, request.ids)))
        params = processing(request.params)
        r = 1
        for row, seq in enumerate(request.seqs):
            if seq.finished:
                continue
            # earlier rows are finished, so row `row` can move to the front of the same storage
            state = DecodeState([seq], cache.compact([row]))
            models = RoundModels(self.runner.target_forward, self.attn, verify_rule(params),
                                 self._drafter(request, seq, first.features), params)
            policy = DraftLengthPolicy(request.kind.draft_length)  # the heuristic starts afresh at l0 for each
            for report in RoundLoop(models, policy, state, look_ahead=request.kind.look_ahead, first_round=r):
                r = report.index + 1
                if report.rows:
                    route(request, report, [u for _, u in report.rows])
        finish(self.line, request, None)

    def _drafter(self, request: Request, seq: Sequence, features: torch.Tensor | None) -> Drafter:
        """A drafter prefilled for `seq` alone: a drafter's state belongs to the batch it was started with."""
        d = self.runner.new_drafter(request.kind.drafter, request.kind.backend)
        g = seq.prompt_index
        d.prefill([request.ids[g]], 1, request.params.max_new_tokens + 2, None if features is None else
                  features[g:g + 1])
        return d
