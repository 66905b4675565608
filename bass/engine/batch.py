"""A running batch: requests join it between rounds, decode together, and leave as their candidates finish.

Each request is prefilled on its own when it joins: its G prompts' K/V go once into free prefix slots of
the batch's cache (shared by its k candidates) and its G x k rows are appended after the running ones, in the
target's cache and in the drafter's (`CacheArena.admit`, `Drafter.admit`). Its rows carry its
`RequestContext` (stop rule, random streams, clock, budget, cancel), so nothing a request computes depends
on what else runs, save the batch's draft length under the heuristic. The batch's rounds are read back
into one event stream per request (`Request.put`).
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

import torch

from bass.decode import baselines
from bass.decode.draft_length import DraftLengthPolicy
from bass.decode.pipeline import DecodeState, RoundReport, decode
from bass.decode.round import RequestContext
from bass.decode.rules import processing
from bass.decode.sampling import process_logits, sample_from
from bass.decode.sequences import Sequence, StopRule
from bass.decode.streams import SequenceRNG
from bass.drafters.base import Drafter
from bass.events import BatchStats, Candidate, GenerationEvent, GenerationResult, SequenceUpdate
from bass.metrics import candidates_ms_per_token
from bass.runtime.prefill_graphs import prefill
from bass.runtime.transfer import ints_to_device

if TYPE_CHECKING:
    from bass.engine.engine import Engine
    from bass.engine.scheduler import Request, Scheduler


class Batch:
    """The requests of one kind (`Request.kind`) decoding together on the engine's device thread."""

    def __init__(self, engine: Engine, scheduler: Scheduler, head: Request):
        self.engine, self.scheduler, self.kind, self.head = engine, scheduler, head.kind, head
        kind = head.kind
        self.attn = engine.attention(kind.backend)
        self.params = processing(head.params)  # what every request of the batch shares
        self.exclusive = head.exclusive or kind.method == "single"
        self.drafter: Drafter | None = None
        if kind.method != "single":
            name = "none" if kind.method == "regular" else kind.drafter
            self.drafter = name if isinstance(name, Drafter) else engine.new_drafter(name, kind.backend)
        self.policy = DraftLengthPolicy(kind.draft_length, [])
        self.state = DecodeState([], None)
        self.requests: list[Request] = []  # those with rows still to finish
        self.slot_of: dict[int, int] = {}  # a row's uid -> its prompt's prefix slot
        self._uids = itertools.count()

    # ---- joining (`bass.decode.pipeline.Joiner`) ----------------------------------------------------------------
    def pending(self) -> bool:
        return self.scheduler.head_if(self.fits) is not None

    def fits(self, request: Request) -> bool:
        """Whether `request` may join now: the batch's first request, always (it was validated to fit alone);
        later ones of its kind, with rows and memory to spare, where neither is exclusive."""
        if request is self.head:
            return True
        if self.exclusive or request.exclusive or request.kind != self.kind or request.kind.method == "single":
            return False
        rows = len(self.state.live) + request.rows
        return rows <= self.engine.config.max_batch_rows and \
            self.scheduler.bytes_running() + request.bytes <= self.scheduler.budget

    def admit(self, state: DecodeState) -> None:
        while (request := self.scheduler.pop_if(self.fits)) is not None:
            self.join(request)

    @torch.inference_mode()
    def join(self, request: Request) -> None:
        """Prefill `request` and add its unfinished rows to the batch (nothing in flight)."""
        self.scheduler.started(request)
        eng, state = self.engine, self.state
        t_start = time.perf_counter()
        ids, k, params = request.ids, request.k, request.params
        keys = [(g, s) for g in range(len(ids)) for s in range(k)]
        ctx = RequestContext(StopRule(eng.tokenizer, eng.eos_ids, params), SequenceRNG(params.seed, keys),
                             cancel=request.cancel, abandoned=request.abandoned)
        seqs = [Sequence(seq=g * k + s, prompt_index=g, sample_index=s, prompt_len=len(ids[g]),
                         history=list(ids[g]), ctx=ctx, row_id=next(self._uids))
                for g in range(len(ids)) for s in range(k)]
        logits, cache, features = prefill(eng.target.model, eng.prefill_graphs, ids, self.attn)
        probs = process_logits(logits[:, 0].repeat_interleave(k, 0), params)
        first = sample_from(probs, ctx.rng.uniforms([s.key for s in seqs], 1, logits.device)[:, 0])
        capacity = params.max_new_tokens + 2
        if self.kind.method == "single":
            request.cache = eng.arena.fork(cache, k, capacity, width=max(len(p) for p in ids))
            request.features = features
        else:
            used = {self.slot_of[s.uid] for s in state.live}
            free = (g for g in itertools.count() if g not in used)
            slots = [next(free) for _ in ids]
            state.cache = eng.arena.admit(state.cache, cache, k, capacity, max(len(p) for p in ids), slots)
            for s in seqs:
                self.slot_of[s.uid] = slots[s.prompt_index]
        first = first.tolist()  # the request's one wait for its prefill
        prefill_s = time.perf_counter() - t_start
        ctx.t0 = time.perf_counter()
        if params.time_budget_s is not None:  # the budget covers the whole request, its prefill included
            ctx.time_budget_s = params.time_budget_s - prefill_s
        request.begin(seqs, ctx, prefill_s)
        request.put(GenerationEvent("prefill", 0, prefill_s, 0, (), tuple("" for _ in seqs)))
        updates = []
        for s, t in zip(seqs, first, strict=True):
            new_text = ctx.stop.extend(s, [t])
            if s.finished:
                s.finish_time_s = time.perf_counter() - ctx.t0
            updates.append(SequenceUpdate(s.seq, (t,), new_text, 0, 0, s.finished, s.finish_reason))
        request.put(GenerationEvent("round", 0, time.perf_counter() - ctx.t0, 0, tuple(updates),
                                    tuple(s.text for s in seqs)))
        self.requests.append(request)
        if self.kind.method != "single":
            self._add_rows(request, seqs, first, slots, features)
        self._finish_if_done(request)

    def _add_rows(self, request: Request, seqs: list[Sequence], first: list[int], slots: list[int],
                  features: torch.Tensor | None) -> None:
        """Append the request's rows to the state and the drafter (all of them, as the cache holds them: those
        finished at their first token ride along or leave at the next compaction)."""
        state = self.state
        self.drafter.admit(request.ids, request.k, request.params.max_new_tokens + 2, features, slots,
                           [s.history for s in seqs])
        device = state.cache.suffix_len.device
        new_last = ints_to_device(first, device)[:, None]
        state.last = new_last if state.last is None or not state.live else torch.cat([state.last, new_last])
        if state.alive is not None or any(s.finished for s in seqs):
            alive = [int(not s.finished) for s in state.live + seqs]
            state.alive = ints_to_device(alive, device).to(torch.int32)
        state.live = state.live + seqs

    # ---- running ------------------------------------------------------------------------------------------------
    def run(self) -> None:
        """Decode until no request of the batch is left and none may join; stream each request's events."""
        with torch.inference_mode():
            if self.kind.method == "single":
                self._run_single()
                return
            self.admit(self.state)
            state = self.state
            if state.live and all(s.finished for s in state.live):  # every row ended at its first token
                state.cache, state.live, state.last, state.alive = state.cache.compact([]), [], None, None
                self.drafter.select([])
            kind = self.kind
            joiner = None if self.exclusive else self
            for report in decode(self.engine.target_forward, self.attn, self.drafter, self.policy, self.state,
                                 self.params, look_ahead=kind.look_ahead, joiner=joiner, first_round=1):
                self._route(report)
            for request in list(self.requests):  # (only a request whose rows all finished at their first token)
                self._finish_if_done(request)

    def _run_single(self) -> None:
        """Single-sequence speculative decoding: one request, its sequences one after another (B = 1)."""
        request = self.scheduler.pop_if(self.fits)
        if request is None:  # (withdrawn in the meantime)
            return
        self.join(request)
        eng, kind = self.engine, self.kind
        ids = request.ids
        capacity = request.params.max_new_tokens + 2

        def single_drafter(seq: Sequence) -> Drafter:
            d = eng.new_drafter(kind.drafter, kind.backend)
            g = seq.prompt_index
            d.prefill([ids[g]], 1, capacity, request.features[g:g + 1])
            return d

        reports = baselines.single_sequence(eng.target_forward, self.attn, single_drafter, request.seqs, request.cache,
                                            kind.draft_length, self.params, look_ahead=kind.look_ahead)
        for report in reports:
            self._route(report)
        self._finish_if_done(request)

    def _route(self, report: RoundReport) -> None:
        """One round's rows, as a "round" event of each request that took part."""
        by_request: dict[int, list[SequenceUpdate]] = {}
        for s, update in report.rows:
            by_request.setdefault(id(s.ctx), []).append(update)
        for request in list(self.requests):
            updates = by_request.get(id(request.ctx))
            if updates is None:
                continue
            t0 = request.ctx.t0
            started = None if report.started_at is None else report.started_at - t0
            request.rounds.append((report.draft_length, report.ended_at - t0, report.wait_s))
            request.round_index += 1
            request.put(GenerationEvent("round", request.round_index, report.ended_at - t0, report.draft_length,
                                        tuple(updates), tuple(s.text for s in request.seqs), started_s=started))
            self._finish_if_done(request)

    def _finish_if_done(self, request: Request) -> None:
        """Send a request whose every candidate finished its result; its rows leave with the next compaction."""
        if request not in self.requests or not all(s.finished for s in request.seqs):
            return
        self.requests.remove(request)
        now = time.perf_counter() - request.ctx.t0
        kind = self.kind
        drafter = getattr(kind.drafter, "name", kind.drafter)
        policy = None if kind.method == "single" else self.policy.describe()
        result = result_of(request.seqs, kind.method, None if kind.method == "regular" else drafter, kind.backend,
                           request.prefill_s, now, request.rounds, policy)
        self.scheduler.finished(request)
        request.put(GenerationEvent("done", request.round_index, now, 0, (), tuple(s.text for s in request.seqs),
                                    result))


def result_of(seqs: list[Sequence], method: str, drafter: str | None, backend: str, prefill_s: float,
              decode_s: float, rounds: list[tuple[int, float, float]], policy: dict | None) -> GenerationResult:
    """A request's `GenerationResult` from its sequences and its rounds' (draft length, end, host wait)."""
    cands = tuple(Candidate(s.prompt_index, s.sample_index, s.text, tuple(s.generated), s.finish_reason or "",
                            s.stats(decode_s)) for s in seqs)
    per = [c.stats for c in cands]
    stats = BatchStats(method=method, drafter=drafter, backend=backend, num_sequences=len(seqs), prefill_s=prefill_s,
                       decode_s=decode_s, tokens=sum(st.tokens for st in per), rounds=sum(st.rounds for st in per),
                       proposed=sum(st.proposed for st in per), accepted=sum(st.accepted for st in per),
                       mean_ms_per_token=candidates_ms_per_token(cands),
                       draft_lengths=tuple(r[0] for r in rounds), round_ends_s=tuple(r[1] for r in rounds),
                       round_waits_s=tuple(r[2] for r in rounds), policy=policy)
    return GenerationResult(cands, stats)


def cancelled_result(request: Request) -> GenerationResult:
    """The result of a request cancelled before it started: every candidate empty and "cancelled"."""
    seqs = [Sequence(seq=g * request.k + s, prompt_index=g, sample_index=s, prompt_len=len(request.ids[g]),
                     history=list(request.ids[g]), finish_reason="cancelled", finish_time_s=0.0)
            for g in range(len(request.ids)) for s in range(request.k)]
    kind = request.kind
    return result_of(seqs, kind.method, None if kind.method == "regular" else getattr(kind.drafter, "name",
                                                                                       kind.drafter),
                     kind.backend, 0.0, 0.0, [], None)

