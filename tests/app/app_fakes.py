"""A scripted stand-in for `bass.Engine`: the same `stream` contract, with hand-made events."""

from __future__ import annotations

import threading
import time

import torch

from app.session import EngineSession
from bass.config import EngineConfig, SamplingParams
from bass.events import BatchStats, Candidate, GenerationEvent, GenerationResult, SequenceStats, SequenceUpdate
from bass.runtime.attention import resolve_backend

# Completions of HumanEval/0 (has_close_elements): one correct, one wrong on some of its 7 tests.
GOOD = ("    for i, a in enumerate(numbers):\n        for b in numbers[i + 1:]:\n"
        "            if abs(a - b) < threshold:\n                return True\n    return False\n")
BAD = "    return False\n"
FILLER = "\ndef unused():\n    return 0\n"  # what an equal-work sequence writes past its text


class FakeEngine:
    """Streams scripted texts in fixed chunks: each round every live sequence gets one chunk.

    `texts[i]` is sequence i's whole completion (`texts` may be a function of (prompt, k)); chunk j of it
    counts as `accepted[i][j]` accepted draft tokens out of `proposed`, plus one, so the numbers are known in
    advance for the tests.

    A time budget counts the scripted time (`round_s` a round): the rows still decoding past it end "budget".

    With `params.ignore_eos` (equal work) every sequence runs to `max_new_tokens` tokens exactly, whatever its
    text: a token is then `chunk` characters of the text and, past its end, of `FILLER` (a stop string and more),
    so that each method writes the same text for the same tokens and a cut at the first stop gives the text back.

    `pause_after_first_finish_s`: the round after the one in which a sequence first finishes lasts that
    long, or until the cancel event is set (a slow CPU round). `paused` is True meanwhile, so a test can
    check that a verdict reached the page in the middle of that round.
    """

    device = "cpu"
    dtype = torch.float32

    def __init__(self, config: EngineConfig | None = None, progress=None, texts=None, chunk=8, proposed=4,
                 round_s=0.0, fail_with: Exception | None = None, pause_after_first_finish_s: float = 0.0):
        self.config = config or EngineConfig(target="fake")
        self.texts = texts
        self.chunk, self.proposed, self.round_s, self.fail_with = chunk, proposed, round_s, fail_with
        self.pause_s = pause_after_first_finish_s
        self.paused = False
        self.calls: list[dict] = []
        if progress:
            progress("fake weights", 0.5)
            progress("fake ready", 1.0)

    def available_backends(self) -> list[str]:
        return ["torch", "pad"]

    @property
    def backend(self) -> str:
        """What `Engine.backend` holds: the config's, "auto" resolved for this fake's device."""
        return resolve_backend(self.config.backend, self.device)

    @property
    def default_drafter(self) -> str:
        return "ngram"  # no draft model in the fake, as Engine.default_drafter says then

    def available_drafters(self) -> list[str]:
        return ["ngram", "layer-skip"]

    def stream(self, prompts, *, k, params: SamplingParams, method="bass", drafter=None, backend=None,
               draft_length=None, chat=False, cancel: threading.Event | None = None, look_ahead=None,
               exclusive=False):
        self.calls.append(dict(prompts=prompts, k=k, params=params, method=method, chat=chat, drafter=drafter,
                               backend=backend, draft_length=draft_length))
        if isinstance(prompts, str) and not prompts.strip():
            raise ValueError("prompt 0 is empty: type a coding prompt or pick a HumanEval problem")
        if self.fail_with is not None:
            raise self.fail_with
        scripted = self.texts(prompts, k) if callable(self.texts) else self.texts
        texts = list(scripted or [GOOD if i % 2 == 0 else BAD for i in range(k)])[:k]
        limit = params.max_new_tokens if params.ignore_eos else None
        if limit:
            texts = [t + FILLER * (self.chunk * limit // len(FILLER) + 1) for t in texts]
        yield GenerationEvent("prefill", 0, 0.01, 0, (), tuple("" for _ in texts))
        pos = [0] * k
        done = [False] * k
        reasons: list[str | None] = [None] * k
        stats = [[0, 0, 0, 0, 0.0] for _ in range(k)]  # tokens, rounds, proposed, accepted, finish time
        proposed = 0 if method == "regular" else self.proposed
        r, t = 0, 0.0
        paused_once = False
        while not all(done):
            r += 1
            t += max(self.round_s, 0.001)
            if self.round_s:
                time.sleep(self.round_s)
            if self.pause_s and any(done) and not paused_once:
                paused_once = True
                t += self._pause(cancel)
            updates = []
            for i in range(k):
                if done[i]:
                    continue
                cut = "cancelled" if cancel is not None and cancel.is_set() else \
                    "budget" if params.time_budget_s and t > params.time_budget_s else None
                if cut:
                    done[i], reasons[i] = True, cut
                    stats[i][4] = t
                    updates.append(SequenceUpdate(i, (), "", 0, 0, True, cut))
                    continue
                st = stats[i]
                accepted = min(proposed, (r + i) % (proposed + 1)) if proposed else 0
                ntok = min(accepted + 1, limit - st[0]) if limit else accepted + 1
                piece = texts[i][pos[i]:pos[i] + self.chunk * (ntok if limit else 1)]
                pos[i] += len(piece)
                fin = st[0] + ntok >= limit if limit else pos[i] >= len(texts[i])
                st[0] += ntok
                st[1] += 1
                st[2] += proposed
                st[3] += accepted
                if fin:
                    done[i], reasons[i], st[4] = True, "length" if limit else "stop", t
                updates.append(SequenceUpdate(i, tuple(range(ntok)), piece, proposed, accepted, fin, reasons[i]))
            yield GenerationEvent("round", r, t, proposed, tuple(updates), tuple(x[:p] for x, p in zip(texts, pos)))
        cands = tuple(Candidate(0, i, texts[i][:pos[i]], tuple(range(stats[i][0])), reasons[i],
                                SequenceStats(*stats[i])) for i in range(k))
        ms = [c.stats.ms_per_token for c in cands if c.stats.tokens]
        batch = BatchStats(method, drafter, backend or "torch", k, 0.01, t, sum(s[0] for s in stats),
                           sum(s[1] for s in stats), sum(s[2] for s in stats), sum(s[3] for s in stats),
                           sum(ms) / len(ms) if ms else 0.0, tuple([proposed] * r))
        yield GenerationEvent("done", r, t, 0, (), tuple(c.text for c in cands), GenerationResult(cands, batch))


    def _pause(self, cancel: threading.Event | None) -> float:
        """Hold this round for `pause_s` or until cancelled; returns how long it held."""
        start = time.monotonic()
        self.paused = True
        try:
            while time.monotonic() - start < self.pause_s and not (cancel is not None and cancel.is_set()):
                time.sleep(0.01)
        finally:
            self.paused = False
        return time.monotonic() - start


def fake_session(engine_class=None, **engine_kwargs) -> EngineSession:
    """A session whose engine is a FakeEngine (or `engine_class`), already loaded."""
    make = engine_class or FakeEngine
    session = EngineSession(env={}, factory=lambda config, progress: make(config, progress, **engine_kwargs))
    session.ensure()
    for _ in range(200):
        if session.state().ready:
            break
        time.sleep(0.01)
    assert session.state().ready, session.state()
    return session
