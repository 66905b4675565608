"""What a comparison measured: each method's timed runs, their median and spread, the candidates it shows and
their verdicts, and its time to the first passing candidate (`bass.eval.compare` runs them, `bass.eval.compare_report`
words them).

A run is *complete* when every candidate ended by itself (end of text, a stop string, the token limit); *cut*
when the time budget ended one; *stopped* when a Stop (cancel) did. A method is reported as its partial run if it
has one (a partial run is never a baseline), else by the median of its R timed runs of the one request:

    wall time   w = median_r w_r          spread = (max_r w_r - min_r w_r) / w
    wall rate   r = median_r (n_r / w_r)  (n_r generated tokens in w_r seconds of prefill plus decoding)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from bass.events import Candidate, GenerationResult
from bass.metrics import format_seconds, time_to_first_pass


def engine_wall_s(result: GenerationResult) -> float:
    """Prefill plus decoding as the engine timed them: the run's wall time without any wait in line."""
    return result.stats.prefill_s + result.stats.decode_s


@dataclass(frozen=True)
class MethodRun:
    """One run of one method: the engine's result, its wall time and its time budget (None: none);
    `captures`: CUDA graphs captured inside its decoding, whose cost its wall time holds."""

    method: str
    result: GenerationResult
    wall_s: float
    budget_s: float | None = None
    captures: int = 0

    def __post_init__(self) -> None:
        if self.wall_s < 0:
            raise ValueError(f"wall_s must be >= 0 seconds, got {self.wall_s}")

    @classmethod
    def of(cls, method: str, result: GenerationResult, budget_s: float | None = None, captures: int = 0) -> MethodRun:
        return cls(method, result, engine_wall_s(result), budget_s, captures)

    @property
    def state(self) -> str:
        """complete | cut (the time budget ended a candidate) | stopped (a Stop did)."""
        reasons = {c.finish_reason for c in self.result.candidates}
        return "stopped" if "cancelled" in reasons else "cut" if "budget" in reasons else "complete"

    @property
    def status(self) -> str:
        """The state as the table shows it: 'complete', 'cut at 120 s', 'stopped at 4.2 s'."""
        if self.state == "cut":
            return f"cut at {self.budget_s:g} s" if self.budget_s else "cut by the time budget"
        return f"stopped at {format_seconds(self.wall_s)}" if self.state == "stopped" else "complete"

    @property
    def tokens(self) -> int:
        return self.result.stats.tokens

    @property
    def wall_tok_s(self) -> float:
        """Generated tokens per second of wall time."""
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True)
class MethodResult:
    """A method across a comparison: its timed runs of the one request, in the order they ran; the candidates it
    shows (its median run's, cut at their first stop) and their verdicts; and the normal run (stop strings end
    each candidate) whose candidates were tested as they finished, for the time to the first pass.

    `passed`: one verdict per shown candidate (None: untested, as a candidate cut before its end is); the whole
    field None while untested, or for good when `tested` is False (no tests were given)."""

    method: str
    runs: tuple[MethodRun, ...]
    shown: tuple[Candidate, ...] = ()  # () : the median run's candidates as they are
    passed: tuple[bool | None, ...] | None = None
    tested: bool = False
    first_run: MethodRun | None = None
    first_passed: tuple[bool | None, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError(f"{self.method}: a method's result needs at least one run")
        if self.passed is not None and len(self.passed) != len(self.candidates):
            raise ValueError(f"{len(self.passed)} verdicts for {len(self.candidates)} candidates")

    @property
    def run(self) -> MethodRun:
        """The run the method is reported by: its partial run if one is partial, else its median run (the lower
        of the two middle ones for an even count)."""
        partial = [r for r in self.runs if r.state != "complete"]
        if partial:
            return partial[0]
        return sorted(self.runs, key=lambda r: r.wall_s)[(len(self.runs) - 1) // 2]

    @property
    def result(self) -> GenerationResult:
        return self.run.result

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return self.shown or self.run.result.candidates

    @property
    def state(self) -> str:
        return self.run.state

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def complete_runs(self) -> list[MethodRun]:
        return [r for r in self.runs if r.state == "complete"] if self.state == "complete" else []

    @property
    def walls_s(self) -> tuple[float, ...]:
        return tuple(r.wall_s for r in self.runs)

    @property
    def wall_s(self) -> float:
        """The median wall time of its complete runs; a partial method's partial run's."""
        runs = self.complete_runs
        return statistics.median(r.wall_s for r in runs) if runs else self.run.wall_s

    @property
    def spread(self) -> float | None:
        """(slowest - fastest) / median wall time of its complete runs; None with fewer than two."""
        walls = [r.wall_s for r in self.complete_runs]
        if len(walls) < 2 or self.wall_s <= 0:
            return None
        return (max(walls) - min(walls)) / self.wall_s

    @property
    def tokens(self) -> int:
        return self.run.tokens

    @property
    def wall_tok_s(self) -> float:
        runs = self.complete_runs
        return statistics.median(r.wall_tok_s for r in runs) if runs else self.run.wall_tok_s

    @property
    def captures(self) -> int:
        """CUDA graphs captured inside its timed runs (0 where nothing timed waited for one)."""
        return sum(r.captures for r in self.runs)

    @property
    def first_pass_s(self) -> float | None:
        """Seconds from the request to the first passing candidate of its normal run (None: none passed, or no
        tests)."""
        if self.first_run is None or self.first_passed is None:
            return None
        times = [c.finish_time_or_none for c in self.first_run.result.candidates]
        return time_to_first_pass(self.first_run.result.stats.prefill_s, times, self.first_passed)

    @property
    def passing(self) -> str:
        """'2/3 pass, 1 untested' (of the tested candidates, those that passed; then those never tested, as a
        candidate cut before its end is), '4 untested', 'testing…' or 'no tests'."""
        if not self.tested:
            return "no tests"
        if self.passed is None:
            return "testing…"
        tested = [p for p in self.passed if p is not None]
        untested = len(self.passed) - len(tested)
        if not tested:
            return f"{untested} untested"
        return f"{sum(tested)}/{len(tested)} pass" + (f", {untested} untested" if untested else "")

    def to_dict(self) -> dict:
        """Everything it measured, JSON-ready: the median run's statistics and shown candidates, every timed run's
        wall time, the first pass and its verdicts."""
        result = self.result.to_dict()
        result["candidates"] = [c.to_dict() for c in self.candidates]
        return {"state": self.state, "status": self.status, "wall_s": self.wall_s, "walls_s": list(self.walls_s),
                "spread": self.spread, "tokens": self.tokens, "captures_in_timed_runs": self.captures,
                "time_to_first_pass_s": self.first_pass_s,
                "first_pass_verdicts": None if self.first_passed is None else list(self.first_passed),
                "passed": None if self.passed is None else list(self.passed), **result}


@dataclass(frozen=True)
class Comparison:
    """The methods of a comparison by name, and the methods that failed with why; `equal_work`: every candidate
    ran to the token limit (`SamplingParams.ignore_eos`), else stop strings ended them; `repeats`: timed runs
    asked of each method."""

    results: Mapping[str, MethodResult]
    failures: Mapping[str, str] = field(default_factory=dict)
    equal_work: bool = True
    repeats: int = 1

    @property
    def complete(self) -> dict[str, MethodResult]:
        """The methods that may be compared (`MethodResult.state` complete)."""
        return {m: r for m, r in self.results.items() if r.state == "complete"}

    @property
    def captures(self) -> int:
        return sum(r.captures for r in self.results.values())
