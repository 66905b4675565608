"""Raw widget values → validated run settings, with errors a user can act on.

Every problem a user can cause (empty prompt, k out of range, a bad temperature) becomes a `UserError`
with a message and a hint, which the UI shows in its status box instead of a traceback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.programs import resolve_style
from bass.config import CANDIDATE_TEMPERATURE, CANDIDATE_TOP_P, HUMANEVAL_STOPS, SamplingParams

MAX_K = 16
# The Drafter and Attention backend choices before the model has loaded: the engine's own defaults (the trained draft
# with the embedded target), whatever they turn out to be. A concrete guess there ("ngram") was what a Generate
# clicked while the model loaded ran with: the forty-first pass's screenshot run drafted with n-grams so.
ENGINE_DEFAULT = "auto"
DEFAULT_K, DEFAULT_TEMPERATURE, DEFAULT_TOP_P = 4, CANDIDATE_TEMPERATURE, CANDIDATE_TOP_P  # what the controls start at
METHOD_LABELS = {
    "bass": "BASS (batched speculative)",
    "regular": "Regular batched decoding",
    "single": "Single-sequence speculative",
}


class UserError(ValueError):
    """A problem with what the user asked for: `message` says what, `hint` what to do."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass(frozen=True)
class RunSettings:
    prompt: str
    tests: str
    style: str  # resolved: "completion" or "chat"
    k: int
    params: SamplingParams
    method: str
    drafter: str | None
    backend: str | None
    pair_label: str | None
    stop_at_first_pass: bool = False  # cancel the other sequences once one passes every test

    @property
    def chat(self) -> bool:
        return self.style == "chat"

    def describe(self) -> dict:
        """The settings as exported next to results."""
        p = self.params
        return {"prompt": self.prompt, "tests": self.tests, "style": self.style, "k": self.k, "method": self.method,
                "drafter": self.drafter, "backend": self.backend, "model": self.pair_label,
                "temperature": p.temperature, "top_p": p.top_p, "max_new_tokens": p.max_new_tokens,
                "time_budget_s": p.time_budget_s, "seed": p.seed, "stop_at_first_pass": self.stop_at_first_pass}


def method_from_label(label: str) -> str:
    """Accepts a method id or its label ("BASS (batched speculative)" → "bass")."""
    for method, text in METHOD_LABELS.items():
        if label in (method, text):
            return method
    raise UserError(f"unknown method {label!r}", f"choose one of: {', '.join(METHOD_LABELS.values())}")


def _number(value, name: str, lo: float, hi: float, integer: bool = False) -> float | int:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a number, got {value!r}", f"set {name} between {lo:g} and {hi:g}") from None
    if not math.isfinite(x) or not lo <= x <= hi:
        raise UserError(f"{name} must be between {lo:g} and {hi:g}, got {value!r}", f"move the {name} slider")
    if integer:
        if x != int(x):
            raise UserError(f"{name} must be a whole number, got {value!r}", f"set {name} to an integer")
        return int(x)
    return x


def _chosen(value: str | None) -> str | None:
    """A dropdown's drafter or backend; None (the engine's default) for ENGINE_DEFAULT or nothing."""
    return None if value in (None, "", ENGINE_DEFAULT) else value


def parse_settings(prompt: str | None, tests: str | None, style: str, k, temperature, top_p, max_new_tokens,
                   time_budget_s, method: str, drafter: str | None, backend: str | None, pair_label: str | None,
                   seed, stop_at_first_pass: bool = False) -> RunSettings:
    """Validate the widgets' values. Raises UserError with a readable message."""
    prompt = prompt or ""
    if not prompt.strip():
        raise UserError("The prompt is empty.",
                        "Type a coding task (e.g. 'Write a function that reverses a string') or pick a "
                        "HumanEval problem from the list.")
    method_id = method_from_label(method)
    k_val = _number(k, "k", 1, MAX_K, integer=True)
    temp = _number(temperature, "temperature", 0.0, 2.0)
    top_p_val = _number(top_p, "top-p", 0.01, 1.0)
    max_new = _number(max_new_tokens, "max new tokens", 1, 4096, integer=True)
    budget = _number(time_budget_s, "time budget (s)", 0, 3600) if time_budget_s not in (None, "") else 0
    seed_val = _number(seed if seed not in (None, "") else 0, "seed", 0, 2**31 - 1, integer=True)
    try:
        resolved = resolve_style(style or "auto", prompt)
    except ValueError as exc:
        raise UserError(str(exc), "pick auto, completion or chat") from None
    params = SamplingParams(temperature=temp, top_p=top_p_val, max_new_tokens=max_new,
                            stop=HUMANEVAL_STOPS if resolved == "completion" else (), seed=seed_val,
                            time_budget_s=budget or None)
    return RunSettings(prompt=prompt, tests=tests or "", style=resolved, k=k_val, params=params, method=method_id,
                       drafter=_chosen(drafter), backend=_chosen(backend), pair_label=pair_label,
                       stop_at_first_pass=bool(stop_at_first_pass))
