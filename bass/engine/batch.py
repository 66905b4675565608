"""A running batch: requests join it between rounds, decode together, and leave as their candidates finish.

Each request is prefilled on its own when it joins: its G prompts' K/V go once into free prefix slots of the batch's
cache (shared by its k candidates) and its G x k rows are appended after the running ones, in the target's cache and
in the drafter's (`CacheArena.admit`, `Drafter.admit`). A prompt longer than a chunk is prefilled a chunk at a time
between the batch's rounds (`bass.engine.prefill`), so that others join and decode meanwhile; it streams
"prefilling" events with its progress, and its Stop ends it before its next chunk. Its rows carry its
`RequestContext` (stop rule, clock, budget, cancel) and their own random streams, so nothing a request computes
depends on what else runs, save the batch's draft length. The batch's rounds are read back into one event stream per
request (`Request.put`).
"""

from __future__ import annotations

import itertools
import time
from typing import NamedTuple

import torch

from bass.decode.draft_length import DraftLengthPolicy
from bass.decode.pipeline import DecodeState, RoundLoop, RoundReport
from bass.decode.round import RoundModels
from bass.decode.rules import processing, verify_rule
from bass.decode.sampling import process_logits, sample_from
from bass.decode.sequences import RequestContext, Sequence, StopRule
from bass.decode.streams import draw, row_keys
from bass.drafters.base import Drafter
from bass.engine.prefill import ChunkedPrefill, ChunkPacer, Prefilled, chunk_tokens, prefill_at_once
from bass.engine.request import Line, Request, RoundRecord
from bass.engine.runner import Runner
from bass.events import BatchStats, Candidate, GenerationEvent, GenerationResult, SequenceUpdate
from bass.metrics import candidates_ms_per_token
from bass.runtime.cache import KVCache
from bass.runtime.transfer import ints_to_device


class Batch:
    """The requests of one kind (`Request.kind`) decoding together on the engine's device thread."""

    def __init__(self, runner: Runner, line: Line, head: Request):
        self.runner, self.line, self.kind, self.head = runner, line, head.kind, head
        kind = head.kind
        self.attn = runner.attention(kind.backend)
        self.params = processing(head.params)  # what every request of the batch shares
        self.exclusive = head.exclusive
        name = "none" if kind.method == "regular" else kind.drafter
        self.drafter = name if isinstance(name, Drafter) else runner.new_drafter(name, kind.backend)
        self.policy = DraftLengthPolicy(kind.draft_length, runner.cost_table)
        self.state = DecodeState([], None)
        self.requests: list[Request] = []  # those with rows still to finish
        self.prefilling: list[tuple[Request, ChunkedPrefill, float]] = []  # (request, its prefill, when it began)
        self.chunk = chunk_tokens(runner.arena_device)
        self.pacer = ChunkPacer(self.chunk)
        self.slot_of: dict[int, int] = {}  # a row's uid -> its prompt's prefix slot
        self._uids = itertools.count()

    # ---- joining (`bass.decode.pipeline.Joiner`) -----------------------------------------------------------
    def pending(self) -> bool:
        return bool(self.prefilling) or self.line.head_if(self.fits) is not None

    def fits(self, request: Request) -> bool:
        """Whether `request` may join now: the batch's first request, always (it was validated to fit alone);
        later ones of its kind, with rows and memory to spare, where neither is exclusive."""
        if request is self.head:
            return True
        if self.exclusive or request.exclusive or request.kind != self.kind:
            return False
        rows = len(self.state.live) + sum(r.rows for r, _, _ in self.prefilling) + request.rows
        return rows <= self.runner.max_batch_rows and self.line.bytes_running() + request.bytes <= self.line.budget

    def admit(self, state: DecodeState) -> None:
        """One chunk of each long prompt's prefill (joining once it is in), then every request of the line that
        fits: a short prompt prefilled and joined now, a long one to prefill chunk by chunk."""
        self._prefill_chunk()
        while (request := self.line.pop_if(self.fits)) is not None:
            self.line.started(request)
            if max(map(len, request.ids)) > self.chunk and not self.exclusive:
                self.prefilling.append((request, ChunkedPrefill(self.runner.target.model, request.ids, self.attn),
                                        time.perf_counter()))
            else:
                t = time.perf_counter()
                self.join(request, prefill_at_once(self.runner.target.model, self.runner.prefill_graphs, request.ids,
                                                   self.attn), t)

    @torch.inference_mode()
    def _prefill_chunk(self) -> None:
        """Drop the prefills whose request was stopped, then the next chunk of the one with the fewest tokens left
        (shortest remaining first: a prompt arriving behind a long one is in after its own few chunks, not after
        the long one's), as long as the pacer allows while rows decode (`ChunkPacer`); a prompt whole joins."""
        self.pacer.admitted(time.perf_counter())
        for entry in list(self.prefilling):
            request = entry[0]
            if request.cancel is not None and request.cancel.is_set() or request.abandoned.is_set():
                self.prefilling.remove(entry)
                self.line.finished(request)
                request.put(GenerationEvent("done", 0, 0.0, 0, result=cancelled_result(request)))
        tokens = self.pacer.tokens(decoding=bool(self.state.live))
        if not self.prefilling or not tokens:
            return  # nothing to prefill, or the rows decoding have their turn
        entry = min(self.prefilling, key=lambda e: e[1].total - sum(e[1].done))
        request, chunks, t = entry
        t0 = time.perf_counter()
        chunks.step(tokens)
        self.pacer.chunk_done(tokens, time.perf_counter() - t0)
        request.put(GenerationEvent("prefilling", 0, time.perf_counter() - t, 0,
                                    prefilled=(sum(chunks.done), chunks.total)))
        if chunks.finished:
            self.prefilling.remove(entry)
            self.join(request, chunks.result(), t)

    @torch.inference_mode()
    def join(self, request: Request, prefilled: Prefilled, t_start: float) -> None:
        """Start `request` from its prefill (begun at perf_counter() `t_start`) and add its unfinished rows to the
        batch (nothing in flight)."""
        first = start(self.runner, request, prefilled, t_start, self._uids)
        state = self.state
        used = {self.slot_of[s.uid] for s in state.live}
        free = (g for g in itertools.count() if g not in used)
        slots = [next(free) for _ in request.ids]
        capacity = request.params.max_new_tokens + 2
        state.cache = self.runner.arena.admit(state.cache, first.cache, request.k, capacity,
                                              max(map(len, request.ids)), slots)
        for s in request.seqs:
            self.slot_of[s.uid] = slots[s.prompt_index]
        self.requests.append(request)
        self._add_rows(request, first.tokens, slots, first.features)
        self._finish_if_done(request)

    def _add_rows(self, request: Request, first: list[int], slots: list[int], features: torch.Tensor | None) -> None:
        """Append the request's rows to the state and the drafter (all of them, as the cache holds them: those
        finished at their first token ride along or leave at the next compaction)."""
        state, seqs = self.state, request.seqs
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
            self.admit(self.state)
            state = self.state
            if state.live and all(s.finished for s in state.live):  # every row ended at its first token
                state.cache, state.live, state.last, state.alive = state.cache.compact([]), [], None, None
                self.drafter.select([])
            models = RoundModels(self.runner.target_forward, self.attn, verify_rule(self.params), self.drafter,
                                 self.params)
            loop = RoundLoop(models, self.policy, state, look_ahead=self.kind.look_ahead,
                             joiner=None if self.exclusive else self, first_round=1)
            for report in loop:
                self._route(report)
            for request in list(self.requests):  # (only a request whose rows all finished at their first token)
                self._finish_if_done(request)

    def _route(self, report: RoundReport) -> None:
        """One round's rows, as a "round" event of each request that took part."""
        by_request: dict[int, list[SequenceUpdate]] = {}
        for s, update in report.rows:
            by_request.setdefault(id(s.ctx), []).append(update)
        for request in list(self.requests):
            updates = by_request.get(id(request.ctx))
            if updates is not None:
                route(request, report, updates)
                self._finish_if_done(request)

    def _finish_if_done(self, request: Request) -> None:
        """Send a request whose every candidate finished its result; its rows leave with the next compaction."""
        if request in self.requests and all(s.finished for s in request.seqs):
            self.requests.remove(request)
            finish(self.line, request, self.policy.describe())


class First(NamedTuple):
    """A request's prefill: the cache of its prompts, the target's features of them, its first tokens."""

    cache: KVCache
    features: torch.Tensor | None  # [G, T, H]
    tokens: list[int]  # each row's first token


def start(runner: Runner, request: Request, prefilled: Prefilled, t_start: float, uids: itertools.count) -> First:
    """Sample each row's first token from `request`'s prefill (begun at perf_counter() `t_start`), and stream its
    "prefill" and first "round" events."""
    ids, k, params = request.ids, request.k, request.params
    keys = [(g, s) for g in range(len(ids)) for s in range(k)]
    ctx = RequestContext(StopRule(runner.tokenizer, runner.eos_ids, params), cancel=request.cancel,
                         abandoned=request.abandoned)
    seqs = [Sequence(seq=g * k + s, prompt_index=g, sample_index=s, prompt_len=len(ids[g]), history=list(ids[g]),
                     ctx=ctx, row_id=next(uids), stream=key, drawn=1)
            for (g, s), key in zip(keys, row_keys(params.seed, keys), strict=True)]
    logits = prefilled.logits
    probs = process_logits(logits[:, 0].repeat_interleave(k, 0), params)
    first = sample_from(probs, draw([s.stream for s in seqs], [0] * len(seqs), 1, logits.device)[:, 0]).tolist()
    prefill_s = time.perf_counter() - t_start  # (the tolist above was the request's one wait for its prefill)
    ctx.t0 = time.perf_counter()
    if params.time_budget_s is not None:  # the budget covers the whole request, its prefill included
        ctx.time_budget_s = params.time_budget_s - prefill_s
    request.begin(seqs, ctx, prefill_s)
    request.put(GenerationEvent("prefill", 0, prefill_s, 0, (), tuple("" for _ in seqs)))
    texts = StopRule.extend_rows(seqs, [[t] for t in first])
    updates = []
    for s, t, new_text in zip(seqs, first, texts, strict=True):
        if s.finished:
            s.finish_time_s = time.perf_counter() - ctx.t0
        updates.append(SequenceUpdate(s.seq, (t,), new_text, 0, 0, s.finished, s.finish_reason))
    request.put(GenerationEvent("round", 0, time.perf_counter() - ctx.t0, 0, tuple(updates),
                                tuple(s.text for s in seqs)))
    return First(prefilled.cache, prefilled.features, first)


def route(request: Request, report: RoundReport, updates: list[SequenceUpdate]) -> None:
    """One round's updates of `request`'s rows, as its "round" event."""
    t0 = request.ctx.t0
    started = None if report.started_at is None else report.started_at - t0
    request.rounds.append(RoundRecord(report.draft_length, report.ended_at - t0, report.wait_s))
    request.round_index += 1
    request.put(GenerationEvent("round", request.round_index, report.ended_at - t0, report.draft_length,
                                tuple(updates), tuple(s.text for s in request.seqs), started_s=started))


def finish(line: Line, request: Request, policy: dict | None) -> None:
    """Send `request` its result (every candidate finished) and its "done" event."""
    now = time.perf_counter() - request.ctx.t0
    kind = request.kind
    drafter = None if kind.method == "regular" else getattr(kind.drafter, "name", kind.drafter)
    result = result_of(request.seqs, kind.method, drafter, kind.backend, request.prefill_s, now, request.rounds,
                       policy)
    line.finished(request)
    request.put(GenerationEvent("done", request.round_index, now, 0, (), tuple(s.text for s in request.seqs),
                                result))


def result_of(seqs: list[Sequence], method: str, drafter: str | None, backend: str, prefill_s: float,
              decode_s: float, rounds: list[RoundRecord], policy: dict | None) -> GenerationResult:
    """A request's `GenerationResult` from its sequences and its rounds."""
    cands = tuple(Candidate(s.prompt_index, s.sample_index, s.text, tuple(s.generated), s.finish_reason or "",
                            s.stats(decode_s)) for s in seqs)
    per = [c.stats for c in cands]
    stats = BatchStats(method=method, drafter=drafter, backend=backend, num_sequences=len(seqs), prefill_s=prefill_s,
                       decode_s=decode_s, tokens=sum(st.tokens for st in per), rounds=sum(st.rounds for st in per),
                       proposed=sum(st.proposed for st in per), accepted=sum(st.accepted for st in per),
                       mean_ms_per_token=candidates_ms_per_token(cands),
                       draft_lengths=tuple(r.draft_length for r in rounds), round_ends_s=tuple(r.end_s for r in rounds),
                       round_waits_s=tuple(r.wait_s for r in rounds), policy=policy)
    return GenerationResult(cands, stats)


def cancelled_result(request: Request) -> GenerationResult:
    """The result of a request cancelled before it started: every candidate empty and "cancelled"."""
    seqs = [Sequence(seq=g * request.k + s, prompt_index=g, sample_index=s, prompt_len=len(request.ids[g]),
                     history=list(request.ids[g]), finish_reason="cancelled", finish_time_s=0.0)
            for g in range(len(request.ids)) for s in range(request.k)]
    kind = request.kind
    drafter = None if kind.method == "regular" else getattr(kind.drafter, "name", kind.drafter)
    return result_of(seqs, kind.method, drafter, kind.backend, 0.0, 0.0, [], None)
