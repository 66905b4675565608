"""The paper's time-budget experiment from one run per problem: the metrics at every budget b <= B.

Each problem runs once per method at the largest budget B; the metrics at a smaller budget b are derived
afterwards from when each candidate finished. This is exact because a budget only truncates.

The clock. `SamplingParams.time_budget_s` covers the whole request, prefill included. The engine checks
it before every round on its decode clock (seconds since decoding began, `time.perf_counter`, the clock
of every finish time): a round starts iff the reading `started_s` satisfies

    started_s < b - prefill_s                                      (bass/decode/round.py, bass/decode/pipeline.py)

and a round that started runs to its end, so a sequence may finish a little after b - prefill_s and still
count (exactly as it does in a run at budget b). The prefill's first tokens are preceded by no check.

Why one run suffices. Nothing the engine does before a check depends on the budget, so a run at b is,
round for round, the run at B cut at the first check that reads started_s >= b - prefill_s. With s_i the
reading before the round in which candidate i finished by itself (EOS, stop string, token limit; None
for the prefill's first token):

    counted_b(i)  <=>  i finished by itself  and  (s_i is None  or  s_i < b - prefill_s)

Pass@First(b), Pass@All(b), pass@k(b) and the time to first pass at b (prefill + finish time of the
earliest counted passing candidate) follow from the counted candidates (`bass.eval.humaneval.problem_row`). The
comparison is the engine's own, on the same floats, so the derivation says exactly which candidates
the same run would have kept at b. Stopping at the first pass keeps this exact: the cancel lands at a
check too, at a time that does not depend on b.

Caveat: nothing in a run reads the budget, so the truncation argument holds for the run that happened; but a
separate run at b may share its batch with other requests (whose rows change the heuristic's draft lengths)
and draw other tokens (the same distribution: sampling is lossless). The derived figures are those of one
sample path cut at b, not a rerun at b.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from bass.events import Candidate, GenerationEvent


def record_round_starts(event: GenerationEvent, starts: dict[int, float | None]) -> None:
    """Note, for each sequence that finished in `event`'s round, the budget check's reading before it."""
    for u in event.updates:
        if u.finished:
            starts[u.seq] = event.started_s


def counted_finish_times(candidates: Sequence[Candidate], starts: Mapping[int, float | None], prefill_s: float,
                         budget_s: float) -> list[float | None]:
    """Each candidate's finish time if it counts at `budget_s` (see the module docstring), else None.

    `starts[i]` is the reading before candidate i's last round (`record_round_starts`); a candidate
    missing from it did not finish by itself.
    """
    left = budget_s - prefill_s  # the engine's own expression: the decode-clock budget after the prefill
    out: list[float | None] = []
    for i, c in enumerate(candidates):
        t = c.finish_time_or_none
        if t is not None and i in starts and (starts[i] is None or starts[i] < left):
            out.append(t)
        else:
            out.append(None)
    return out


def parse_budgets(text: str) -> tuple[float, ...]:
    """'0.25,0.5,1' -> (0.25, 0.5, 1.0), sorted, each > 0, with an error that says what to write."""
    try:
        budgets = tuple(sorted({float(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise ValueError(f"--budgets must be comma-separated seconds, e.g. 0.25,0.5,1.0; got {text!r}") from None
    if not budgets or budgets[0] <= 0:
        raise ValueError(f"--budgets needs at least one budget, each > 0 seconds; got {text!r}")
    return budgets


def budget_key(budget_s: float) -> str:
    """How a budget names its entry in the JSON: '0.25', '1.0'."""
    return repr(float(budget_s))


def format_budget_table(reports: Mapping[str, dict], budgets: Iterable[float]) -> str:
    """One line per method and budget: Pass@First, Pass@All, time to first pass, share with a pass."""
    lines = [f"{'method':<9} {'budget s':>8} {'Pass@First':>10} {'Pass@All':>9} {'first pass s':>12} "
             f"{'with pass':>9}"]
    for method, report in reports.items():
        for b in budgets:
            s = report["by_budget"][budget_key(b)]["summary"]
            ttfp = s.get("mean_time_to_first_pass_s")
            lines.append(f"{method:<9} {b:>8.3g} {s.get('pass_at_first', 0):>10.3f} {s.get('pass_at_all', 0):>9.3f} "
                         f"{'none' if ttfp is None else f'{ttfp:.3f}':>12} {s.get('share_with_pass', 0):>9.1%}")
    return "\n".join(lines)
