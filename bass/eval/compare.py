"""A fair comparison of decoding methods on one request: the app's Compare and `python -m bass compare` alike.

Fairness: every method gets the same request (prompt, k, seed, token limit, stop strings; a time budget only when
the caller sets one), runs alone on the engine (`exclusive`) and drafts a fixed length (`SEEDED_DRAFT_LENGTH`), so
that the seed decides the candidates. By default every method does the same work: each candidate runs to the token
limit (`SamplingParams.ignore_eos`) and is cut at its first stop afterwards, for display and for the tests
(`bass.eval.first_stop`); `equal_work=False` (natural stops) lets end of text and stop strings end them.

In order (`compare_steps`):
1. warm-up: an untimed run of each method, then the engine left to capture the CUDA graphs they queued
   (`Scheduler.settle`), so that one-time costs fall on no method's clock. Where the engine replays CUDA graphs
   the warm-up is the request itself (a graph serves one batch and width, the cache one token limit); elsewhere a
   short run pays the first calls' costs.
2. timed runs: each method R times (`repeats`; 3 on a GPU, 1 on a CPU by default), the methods' order reversed
   from one round to the next, nothing tested meanwhile; each run counts the graphs captured inside it.
3. the candidates shown (each method's median run's, cut at their first stop) tested in one batch.
4. with tests: one normal run of each method (stop strings end each candidate), each candidate tested the moment
   it finishes, for the time to the first passing candidate; which one passes first depends on the texts sampled.

A method the engine refuses (a drafter it lacks, say) is a failure and the others still run; a method cut by the
time budget is not run again; a cancel ends the run in progress (its method marked stopped) and skips the rest.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from bass.config import METHODS, DraftLengthConfig, SamplingParams, check_k
from bass.eval.compare_report import COMPARE_METHODS, method_name
from bass.eval.compare_results import Comparison, MethodResult, MethodRun
from bass.eval.first_stop import FirstStop
from bass.eval.verdicts import Checker, VerdictWorker, submit_finished
from bass.events import GenerationEvent, GenerationResult
from bass.metrics import format_seconds
from bass.runtime.graphs import decoding_captures

# A fixed draft length makes a seed reproduce the candidates: a different length consumes the random stream
# differently (`bass.decode.round`, random numbers). Named here, not taken from the engine's default, which may vary.
SEEDED_DRAFT_LENGTH = DraftLengthConfig(policy="fixed", l0=3)
MAX_REPEATS = 20
WARM_TOKENS = 8  # the warm-up's token limit on an engine without CUDA graphs
POLL_S = 0.2  # how often the wait for the last verdicts reports


def default_repeats(engine) -> int:
    """Timed runs per method: 3 on a GPU, whose runs take a fraction of a second, 1 on a CPU, whose take minutes."""
    return 3 if str(getattr(engine, "device", "cpu")).startswith("cuda") else 1


def check_repeats(repeats: int | None, name: str = "repeats") -> None:
    if repeats is not None and (not isinstance(repeats, int) or isinstance(repeats, bool)
                                or not 1 <= repeats <= MAX_REPEATS):
        raise ValueError(f"{name} must be a whole number of timed runs per method from 1 to {MAX_REPEATS}, "
                         f"got {repeats!r}")


@dataclass(frozen=True)
class CompareRequest:
    """What every method of a comparison runs: one prompt, k samples, the same sampling parameters; how often
    (`repeats`, None: `default_repeats`), whether every candidate runs to the token limit (`equal_work`) and
    whether an untimed warm-up comes first."""

    prompt: str
    k: int
    params: SamplingParams
    methods: tuple[str, ...] = COMPARE_METHODS
    drafter: str | None = None
    backend: str | None = None
    chat: bool = False
    draft_length: DraftLengthConfig | None = SEEDED_DRAFT_LENGTH
    equal_work: bool = True
    repeats: int | None = None
    warm_up: bool = True

    def __post_init__(self) -> None:
        if not self.prompt.strip():
            raise ValueError("the prompt is empty: give a coding prompt to compare the methods on")
        check_k(self.k)
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods or len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods must be distinct names of {', '.join(METHODS)}; got {', '.join(self.methods)}")
        check_repeats(self.repeats)

    @property
    def timed_params(self) -> SamplingParams:
        return replace(self.params, ignore_eos=self.equal_work)

    @property
    def natural_params(self) -> SamplingParams:
        """A normal run's: stop strings end each candidate."""
        return replace(self.params, ignore_eos=False)


@dataclass(frozen=True)
class Step:
    """Where a comparison stands: the phase ("warm-up", "timed", "testing", "first pass", "done"), the method at
    work, the runs done of those planned, the comparison so far and the engine's latest event (None as a phase
    starts); `pending`: verdicts still awaited while testing."""

    phase: str
    method: str | None
    done: int
    total: int
    comparison: Comparison
    event: GenerationEvent | None = None
    pending: int = 0


def exclusive_kwargs(stream: Callable) -> dict:
    """`{"exclusive": True}` where the engine's `stream` takes it (a method measured alone, not batched with
    other visitors' requests); an engine that serialises every request on a lock runs it alone anyway."""
    try:
        return {"exclusive": True} if "exclusive" in inspect.signature(stream).parameters else {}
    except (TypeError, ValueError):
        return {}


def stream_method(engine, req: CompareRequest, method: str, params: SamplingParams,
                  cancel: threading.Event | None = None) -> Iterator[GenerationEvent]:
    """One method's events for the request under `params`, the engine running it alone."""
    return engine.stream(req.prompt, k=req.k, params=params, method=method, drafter=req.drafter,
                         backend=req.backend, draft_length=req.draft_length, chat=req.chat, cancel=cancel,
                         **exclusive_kwargs(engine.stream))


def _ran(result: GenerationResult | None) -> bool:
    """False for a request stopped while it waited in line: nothing ran."""
    return result is not None and any(c.stats.tokens for c in result.candidates)


@dataclass
class _Tally:
    """What a comparison has gathered so far (`compare_steps`' state): the runs, failures and verdicts, the runs
    done of the `total` planned, and `snapshot`, the comparison they make (rebuilt as a run ends)."""

    req: CompareRequest
    repeats: int
    cutter: FirstStop
    check: Checker | None
    total: int
    done: int = 0
    runs: dict[str, list[MethodRun]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    passed: dict[str, tuple[bool | None, ...]] = field(default_factory=dict)
    first: dict[str, tuple[MethodRun, tuple[bool | None, ...]]] = field(default_factory=dict)
    snapshot: Comparison | None = None

    def step(self, phase: str, method: str | None, event: GenerationEvent | None = None, pending: int = 0) -> Step:
        return Step(phase, method, self.done, self.total, self.snapshot, event, pending)

    def result(self, method: str) -> MethodResult:
        res = MethodResult(method, tuple(self.runs[method]), tested=self.check is not None)
        if self.req.equal_work:
            res = replace(res, shown=tuple(self.cutter.cut(c) for c in res.run.result.candidates))
        first_run, first_passed = self.first.get(method, (None, None))
        return replace(res, passed=self.passed.get(method), first_run=first_run, first_passed=first_passed)

    def update(self) -> Comparison:
        self.snapshot = Comparison({m: self.result(m) for m in self.req.methods if self.runs.get(m)},
                                   dict(self.failures), self.req.equal_work, self.repeats)
        return self.snapshot


def compare_steps(engine, req: CompareRequest, check: Checker | None = None,
                  cancel: threading.Event | None = None) -> Iterator[Step]:
    """Run the comparison (module docstring), yielding where it stands after every engine event and phase; the
    last step ("done") holds the whole comparison. `check` tests candidates ([(seq, text)] -> passed each), None
    for no tests."""
    cancel = cancel or threading.Event()
    repeats = req.repeats or default_repeats(engine)
    methods = req.methods
    order = [m for r in range(repeats) for m in (methods if r % 2 == 0 else methods[::-1])]
    total = len(methods) * (int(req.warm_up) + int(check is not None)) + len(order)
    tally = _Tally(req, repeats, FirstStop.of(engine, req.params.stop), check, total)
    tally.update()
    if req.warm_up:
        yield from _warm_up(engine, tally, cancel)
    for method in order:
        yield from _timed_run(engine, tally, method, cancel)
    if check is not None:
        if not cancel.is_set():
            yield tally.step("testing", None)
            for method, res in tally.snapshot.results.items():
                tally.passed[method] = _verdicts(check, res.candidates)
            tally.update()
        for method in list(tally.snapshot.results):
            if cancel.is_set():
                break
            yield from _first_pass_run(engine, tally, method, cancel)
        for method, res in tally.snapshot.results.items():  # stopped before the tests: never tested, and so said
            tally.passed.setdefault(method, (None,) * len(res.candidates))
        tally.update()
    yield tally.step("done", None)


def _warm_up(engine, tally: _Tally, cancel: threading.Event) -> Iterator[Step]:
    """An untimed run of each method (the request itself where the engine replays CUDA graphs, else `WARM_TOKENS`
    of it), then the graphs they queued captured before any clock starts. A method the engine refuses is left for
    its timed run to report."""
    req = tally.req
    params = replace(req.timed_params, time_budget_s=None)
    if not getattr(engine, "captures_graphs", False):
        params = replace(params, max_new_tokens=min(WARM_TOKENS, params.max_new_tokens))
    for method in req.methods:
        if cancel.is_set():
            return
        yield tally.step("warm-up", method)
        try:
            for event in stream_method(engine, req, method, params, cancel):
                yield tally.step("warm-up", method, event)
        except ValueError:
            pass
        tally.done += 1
    settle = getattr(getattr(engine, "scheduler", None), "settle", None)
    if settle is not None:
        settle()


def _timed_run(engine, tally: _Tally, method: str, cancel: threading.Event) -> Iterator[Step]:
    """One timed run of `method`, counting the CUDA graphs captured inside it; none for a method that failed or
    was cut by the time budget (it would be cut again), nor after a cancel."""
    runs = tally.runs.setdefault(method, [])
    if cancel.is_set() or method in tally.failures or (runs and runs[-1].state == "cut"):
        return
    yield tally.step("timed", method)
    before, result = decoding_captures(), None
    try:
        for event in stream_method(engine, tally.req, method, tally.req.timed_params, cancel):
            if event.kind == "done":
                result = event.result
            yield tally.step("timed", method, event)
    except ValueError as exc:
        tally.failures[method] = str(exc)
        return
    tally.done += 1
    if _ran(result):
        runs.append(MethodRun.of(method, result, tally.req.params.time_budget_s, decoding_captures() - before))
        tally.update()


def _verdicts(check: Checker, candidates) -> tuple[bool | None, ...]:
    """Each candidate that ended by itself tested (None for the others, and for all if the tester fails)."""
    items = [(i, c.text) for i, c in enumerate(candidates) if c.finished_in_time]
    try:
        got = dict(zip([i for i, _ in items], map(bool, check(items)), strict=True)) if items else {}
    except Exception:  # a tester that fails leaves them untested; the timing stands
        got = {}
    return tuple(got.get(i) for i in range(len(candidates)))


def _first_pass_run(engine, tally: _Tally, method: str, cancel: threading.Event) -> Iterator[Step]:
    """A normal run of `method`, each candidate tested the moment it finishes; then its last verdicts awaited (a
    cancel abandons them)."""
    req = tally.req
    yield tally.step("first pass", method)
    worker = VerdictWorker(tally.check, bool)
    result = None
    try:
        for event in stream_method(engine, req, method, req.natural_params, cancel):
            submit_finished(worker, event)
            if event.kind == "done":
                result = event.result
            yield tally.step("first pass", method, event)
        worker.close(timeout_s=0)
        for pending, _ in worker.drain(cancel, POLL_S):
            yield tally.step("testing", method, pending=pending)
    except ValueError:
        return
    finally:
        worker.close(timeout_s=0)
        tally.done += 1
    if _ran(result):
        verdicts = worker.verdicts
        passed = tuple(verdicts[i].passed if i in verdicts else None for i in range(len(result.candidates)))
        tally.first[method] = (MethodRun.of(method, result, req.params.time_budget_s), passed)
        tally.update()


def run_comparison(engine, req: CompareRequest, check: Checker | None = None,
                   cancel: threading.Event | None = None, log: Callable[[str], None] | None = None) -> Comparison:
    """`compare_steps` to its end; `log` hears of each run as it ends."""
    last = None
    for step in compare_steps(engine, req, check, cancel):
        if log and step.event is not None and step.event.kind == "done" and step.phase != "testing":
            r = step.event.result
            log(f"{step.phase}: {method_name(step.method)}, {r.stats.tokens} tokens in "
                f"{format_seconds(r.stats.prefill_s + r.stats.decode_s)}")
        last = step
    return last.comparison
