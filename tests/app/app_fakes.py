"""A scripted stand-in for `bass.Engine`: the same `stream` contract, with hand-made events."""

from __future__ import annotations

import threading
import time

import torch
from scripted import ScriptedRows

from app.session import EngineSession
from bass.config import EngineConfig, SamplingParams
from bass.events import GenerationEvent
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
        rows = ScriptedRows(texts)
        yield GenerationEvent("prefill", 0, 0.01, 0, (), ("",) * len(texts))
        proposed = 0 if method == "regular" else self.proposed
        r, t = 0, 0.0
        paused_once = False
        while rows.live():
            r += 1
            t += max(self.round_s, 0.001)
            if self.round_s:
                time.sleep(self.round_s)
            if self.pause_s and len(rows.live()) < len(rows.texts) and not paused_once:
                paused_once = True
                t += self._pause(cancel)
            cut = "cancelled" if cancel is not None and cancel.is_set() else \
                "budget" if params.time_budget_s and t > params.time_budget_s else None
            updates = []
            for i in rows.live():
                if cut:
                    updates.append(rows.cut(i, cut, t))
                    continue
                accepted = min(proposed, (r + i) % (proposed + 1)) if proposed else 0
                ntok = min(accepted + 1, limit - rows.stats[i][0]) if limit else accepted + 1
                updates.append(rows.emit(i, self.chunk * (ntok if limit else 1), tuple(range(ntok)), proposed,
                                         accepted, t, limit))
            yield GenerationEvent("round", r, t, proposed, tuple(updates), rows.so_far())
        yield rows.done(r, t, method, drafter, backend or "torch", 0.01, tuple([proposed] * r))


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
