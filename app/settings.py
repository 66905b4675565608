"""Raw widget values → validated run settings, with errors a user can act on.

Every problem a user can cause (empty prompt, k out of range, a bad temperature, tests that test nothing)
becomes a `UserError` with a message, a hint and the field it is about (the widget's `elem_id`), which the
UI marks at that field and repeats in its status box, instead of a traceback.
"""

from __future__ import annotations

import math
import re
import secrets
from dataclasses import dataclass

from app.programs import resolve_style
from bass.config import CANDIDATE_TEMPERATURE, CANDIDATE_TOP_P, HUMANEVAL_STOPS, DraftLengthConfig, SamplingParams

MAX_K = 16
# The Drafter and Attention backend choices before the model has loaded: the engine's own defaults (the trained draft
# with the embedded target), whatever they turn out to be. A concrete guess there ("ngram") would be what a Generate
# clicked while the model loads runs with, whatever the engine would have chosen.
ENGINE_DEFAULT = "auto"
DEFAULT_K, DEFAULT_TEMPERATURE, DEFAULT_TOP_P = 4, CANDIDATE_TEMPERATURE, CANDIDATE_TOP_P  # what the controls start at
# No time budget by default: a budget cuts candidates before they finish, and a cut candidate is never tested. On a
# 2-core CPU a chat answer of 160 tokens at k = 4 takes minutes; Stop is there for a visitor who will not wait.
DEFAULT_MAX_NEW_TOKENS, DEFAULT_BUDGET_S = 160, 0
MAX_TEMPERATURE, MIN_TOP_P, MAX_NEW_TOKENS, MAX_BUDGET_S, MAX_SEED = 2.0, 0.01, 1024, 3600, 2**31 - 1
# Every page run drafts with a fixed length of 3, so that its seed, typed in or drawn, reproduces it: the engine's
# default follows the batch (`DraftLengthConfig`, "auto"), and a length that changed with the other visitors would
# consume the seed's random stream differently, and the sampled text with it.
SEEDED_DRAFT_LENGTH = DraftLengthConfig("fixed", l0=3)
# A chat answer is asked for code alone: prose and example-usage prints cost tokens (minutes on a CPU) and the
# prints would run with the tests.
CHAT_INSTRUCTION = ("\n\nAnswer with one Python code block that defines the solution, with no explanation, tests or "
                    "example usage.")
METHOD_LABELS = {
    "bass": "BASS (batched speculative)",
    "regular": "Regular batched decoding",
    "single": "Single-sequence speculative",
}


# A chat prompt that asks the model for tests: the answer is asked for code alone (`CHAT_INSTRUCTION`), and tests
# belong in the Unit tests box, where they run against every candidate. "test" alone is not enough ("test whether
# n is prime" asks for a function).
_ASKS_FOR_TESTS = re.compile(
    r"\b(unit[ -]?tests?|test (cases?|suite)|pytest|unittest|doctests?)\b"
    r"|\b(with|and|plus|including|include|add|write|also)\s+(some\s+|a\s+few\s+|its\s+|the\s+)?"
    r"(tests?|asserts?|assertions)\b", re.IGNORECASE)
TESTS_GO_IN_THE_BOX = ("Your prompt asks for tests: the model writes the solution only. Put tests in the Unit tests "
                       "box (check(candidate) or plain asserts): they run against every candidate.")

# The widgets' elem_ids (app.ui): where a UserError is marked
FIELDS = {"prompt": "bass-prompt", "tests": "bass-tests", "k": "bass-k", "temperature": "bass-temperature",
          "top_p": "bass-top-p", "max_new_tokens": "bass-max-new", "time_budget_s": "bass-budget", "seed": "bass-seed",
          "method": "bass-method", "style": "bass-style"}


class UserError(ValueError):
    """A problem with what the user asked for: `message` says what, `hint` what to do, `field` which widget
    (its elem_id; None when no one widget is to blame)."""

    def __init__(self, message: str, hint: str = "", field: str | None = None):
        super().__init__(message)
        self.message, self.hint, self.field = message, hint, field


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
    seed_given: bool = True  # False: `params.seed` was drawn at random for this run

    @property
    def chat(self) -> bool:
        return self.style == "chat"

    @property
    def engine_prompt(self) -> str:
        """What the model is given: the prompt, and for chat the request for code alone (`CHAT_INSTRUCTION`)."""
        return self.prompt + CHAT_INSTRUCTION if self.chat else self.prompt

    @property
    def draft_length(self) -> DraftLengthConfig | None:
        """With a seed, the fixed policy, so that the seed reproduces the text whoever else is decoding; without,
        the engine's default, whose draft length follows the batch (fastest when many visitors decode at once)."""
        return SEEDED_DRAFT_LENGTH if self.seed_given else None

    @property
    def tests_requested(self) -> bool:
        """A chat prompt asks the model for tests, which it will not write (`TESTS_GO_IN_THE_BOX`)."""
        return self.chat and _ASKS_FOR_TESTS.search(self.prompt) is not None

    def describe(self) -> dict:
        """The settings as exported next to results."""
        p = self.params
        return {"prompt": self.prompt, "tests": self.tests, "style": self.style, "k": self.k, "method": self.method,
                "drafter": self.drafter, "backend": self.backend, "model": self.pair_label,
                "temperature": p.temperature, "top_p": p.top_p, "max_new_tokens": p.max_new_tokens,
                "time_budget_s": p.time_budget_s, "seed": p.seed, "seed_given": self.seed_given,
                "stop_at_first_pass": self.stop_at_first_pass}


def method_from_label(label: str) -> str:
    """Accepts a method id or its label ("BASS (batched speculative)" → "bass")."""
    for method, text in METHOD_LABELS.items():
        if label in (method, text):
            return method
    raise UserError(f"unknown method {label!r}", f"choose one of: {', '.join(METHOD_LABELS.values())}",
                    FIELDS["method"])


def _number(value, name: str, lo: float, hi: float, field: str, integer: bool = False) -> float | int:
    """`value` (a number, or its text) in [lo, hi], or a UserError naming the field: never clamped in silence."""
    span = f"{'a whole number' if integer else 'a number'} from {_plain(lo)} to {_plain(hi)}"
    refused = UserError(f"{name} must be {span}, got {_shown(value)}", f"type {span} into {name}", FIELDS[field])
    try:
        if isinstance(value, bool):
            raise TypeError
        x = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise refused from None
    if not math.isfinite(x) or not lo <= x <= hi or (integer and x != int(x)):
        raise refused
    return int(x) if integer else x


def _shown(value) -> str:
    """A refused value as the visitor typed it: text as it is, numbers without a trailing .0."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    return repr(value)


def _plain(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"


def _blank(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def check_tests(tests: str) -> None:
    """Refuse unit tests the sandbox would refuse, before anything is generated: tests that are not Python (they
    would fail every candidate) and tests with no assert that can fail (they would pass any candidate). The
    sandbox's own rule decides (`sandbox.split_tests`), so the page refuses exactly what its runs would."""
    if not tests.strip():
        return
    from sandbox import split_tests

    # The sandbox's rule first: it bounds the size and the nesting before Python's own parser recurses
    # (200,000 unary minuses would end `compile` in RecursionError here, in the app's process).
    try:
        split_tests(tests)
    except ValueError as exc:
        if not isinstance(exc.__cause__, SyntaxError):
            raise UserError(f"The unit tests were refused ({exc}); nothing was generated.",
                            "fix the unit tests as this says, or clear the box to only run the candidates",
                            FIELDS["tests"]) from None
    try:
        compile(tests, "<unit tests>", "exec")
    except SyntaxError as exc:
        where = f"line {exc.lineno}: " if exc.lineno else ""
        raise UserError(f"The unit tests do not parse ({where}{exc.msg}); nothing was generated.",
                        "fix that line of the unit tests, or clear them to only run the candidates",
                        FIELDS["tests"]) from None


def _chosen(value: str | None) -> str | None:
    """A dropdown's drafter or backend; None (the engine's default) for ENGINE_DEFAULT or nothing."""
    return None if value in (None, "", ENGINE_DEFAULT) else value


def parse_settings(prompt: str | None, tests: str | None, style: str, k, temperature, top_p, max_new_tokens,
                   time_budget_s, method: str, drafter: str | None, backend: str | None, pair_label: str | None,
                   seed, stop_at_first_pass: bool = False) -> RunSettings:
    """Validate the widgets' values, each against the range its label states. Raises UserError naming the field.

    A blank seed draws a fresh one (the run's candidates are new samples); a seed that is set reproduces them."""
    prompt = prompt or ""
    if not prompt.strip():
        raise UserError("The prompt is empty.",
                        "Type a coding task (e.g. 'Write a function that reverses a string') or pick a "
                        "HumanEval problem from the list.", FIELDS["prompt"])
    tests = tests or ""
    check_tests(tests)
    method_id = method_from_label(method)
    k_val = _number(k, "k · candidates", 1, MAX_K, "k", integer=True)
    temp = _number(temperature, "Temperature", 0.0, MAX_TEMPERATURE, "temperature")
    top_p_val = _number(top_p, "Top-p", MIN_TOP_P, 1.0, "top_p")
    max_new = _number(max_new_tokens, "Max new tokens", 1, MAX_NEW_TOKENS, "max_new_tokens", integer=True)
    budget = 0 if _blank(time_budget_s) else _number(time_budget_s, "Time budget (s)", 0, MAX_BUDGET_S,
                                                     "time_budget_s")
    seed_given = not _blank(seed)
    seed_val = (_number(seed, "Seed", 0, MAX_SEED, "seed", integer=True) if seed_given
                else secrets.randbelow(MAX_SEED + 1))
    try:
        resolved = resolve_style(style or "auto", prompt)
    except ValueError as exc:
        raise UserError(str(exc), "pick auto, completion or chat", FIELDS["style"]) from None
    params = SamplingParams(temperature=temp, top_p=top_p_val, max_new_tokens=max_new,
                            stop=HUMANEVAL_STOPS if resolved == "completion" else (), seed=seed_val,
                            time_budget_s=budget or None)
    return RunSettings(prompt=prompt, tests=tests, style=resolved, k=k_val, params=params, method=method_id,
                       drafter=_chosen(drafter), backend=_chosen(backend), pair_label=pair_label,
                       stop_at_first_pass=bool(stop_at_first_pass), seed_given=seed_given)
