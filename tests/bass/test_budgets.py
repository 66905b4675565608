"""The time-budget experiment from one run: metrics at smaller budgets derived from finish times, checked
by hand and against separate runs truncated by the budget itself."""

import pytest
from scripted import ScriptedEngine, ScriptedTester

from bass.config import SamplingParams
from bass.eval.budgets import budget_key, counted_finish_times, format_budget_table, parse_budgets
from bass.eval.humaneval import TTFP, problem_row, run_humaneval, stream_with_verdicts
from bass.eval.verdicts import VerdictWorker
from bass.events import Candidate, SequenceStats

# seq i finishes by itself in round len(text): rounds 4, 1, 5, 2; round r starts at r - 1 s of decoding
TEXTS = ["abcP", "x", "abcdP", "aP"]
PREFILL, LARGEST = 0.5, 6.0


def _run(budget_s: float):
    """One scripted problem at `budget_s`: (result, passed per candidate, round starts by sequence)."""
    engine = ScriptedEngine(TEXTS, prefill_s=PREFILL, round_s=1.0)
    starts: dict = {}
    result, verdicts = stream_with_verdicts(engine, "p", VerdictWorker(ScriptedTester(), bool), round_starts=starts,
                                            k=len(TEXTS), params=SamplingParams(time_budget_s=budget_s), method="bass")
    passed = [verdicts[i].passed if i in verdicts else None for i in range(len(TEXTS))]
    return result, passed, starts


def test_counted_finish_times_by_hand():
    cands = [Candidate(0, i, "", (1,), r, SequenceStats(1, 1, 0, 0, t))
             for i, (r, t) in enumerate([("stop", 1.2), ("eos", 0.0), ("budget", 2.0), ("length", 3.1)])]
    starts = {0: 0.9, 1: None, 2: 2.0, 3: 2.4}  # seq 1 ended on the prefill's first token
    # budget 3.0 with prefill 0.5: rounds that started before 2.5 s of decoding ran
    assert counted_finish_times(cands, starts, 0.5, 3.0) == [1.2, 0.0, None, 3.1]
    # seq 3's round started at 2.4 >= 1.0: cut; seq 0's at 0.9 < 1.0 counts although it ended at 1.2
    assert counted_finish_times(cands, starts, 0.5, 1.5) == [1.2, 0.0, None, None]
    # a budget shorter than the prefill still keeps the first token (no check precedes it)
    assert counted_finish_times(cands, starts, 0.5, 0.25) == [None, 0.0, None, None]


def test_derived_budgets_by_hand():
    result, passed, starts = _run(LARGEST)
    assert [c.finish_reason for c in result.candidates] == ["stop"] * 4
    assert passed == [True, False, True, True]
    expect = {  # budget: (counted sequences, Pass@First, Pass@All, time to first pass)
        1.0: ([1], False, False, None),  # only round 1 (started 0 < 0.5) ran: seq 1 fails
        2.0: ([1, 3], False, True, PREFILL + 2.0),  # round 2 started at 1 < 1.5 and ended at 2.5 s > budget
        4.0: ([0, 1, 3], False, True, PREFILL + 2.0),
        6.0: ([0, 1, 2, 3], False, True, PREFILL + 2.0),
    }
    for b, (seqs, first, every, ttfp) in expect.items():
        times = counted_finish_times(result.candidates, starts, result.stats.prefill_s, b)
        assert [i for i, t in enumerate(times) if t is not None] == seqs
        row = problem_row("T", result.candidates, passed, result.stats.prefill_s, times)
        assert (row["pass_at_first"], row["pass_at_all"], row[TTFP]) == (first, every, ttfp)
        assert row["passed"] == sum(passed[i] for i in seqs) and row["finished"] == len(seqs)


@pytest.mark.parametrize("budget", [0.4, 1.0, 1.5, 2.0, 2.6, 4.0, 5.5])
def test_derived_equals_a_run_truncated_by_the_budget(budget):
    big, passed, starts = _run(LARGEST)
    derived = problem_row("T", big.candidates, passed, big.stats.prefill_s,
                          counted_finish_times(big.candidates, starts, big.stats.prefill_s, budget))
    small, small_passed, _ = _run(budget)
    direct = problem_row("T", small.candidates, small_passed, small.stats.prefill_s)
    speed = "mean_ms_per_token"  # a cut sequence's latency differs; the budget metrics must not
    assert {k: v for k, v in derived.items() if k != speed} == {k: v for k, v in direct.items() if k != speed}


def test_run_humaneval_with_budgets_and_the_real_sandbox():
    from bass.config import EngineConfig

    good = ("    for i, a in enumerate(numbers):\n        for b in numbers[i + 1:]:\n"
            "            if abs(a - b) < threshold:\n                return True\n    return False\n")
    wrong = "    return False\n"
    # 0.01 s per round: wrong ends in round 17 (started 0.16 s), good in round len(good) (started ~1.69 s),
    # good * 3 would need ~5.1 s and is cut by the largest budget
    engine = ScriptedEngine([wrong, good, good * 3], prefill_s=0.25, round_s=0.01)
    report = run_humaneval(EngineConfig(target="scripted"), k=3, method="regular", limit=1, engine=engine,
                           budgets=[2.0, 0.5, 5.0])
    assert report["config"]["budget_s"] == 5.0 and report["config"]["budgets"] == [0.5, 2.0, 5.0]
    by = {b: report["by_budget"][budget_key(b)]["problems"][0] for b in (0.5, 2.0, 5.0)}
    assert (by[0.5]["finished"], by[0.5]["pass_at_all"], by[0.5][TTFP]) == (1, False, None)
    assert (by[2.0]["finished"], by[2.0]["pass_at_first"], by[2.0]["pass_at_all"]) == (2, False, True)
    assert by[2.0][TTFP] == pytest.approx(0.25 + len(good) * 0.01)
    run = dict(report["problems"][0])
    candidates = run.pop("candidates")  # per-candidate rows: in the run's rows only
    assert by[5.0] == run  # the largest budget's row is the run's own
    assert [c["passed"] for c in candidates].count(True) == run["passed"]
    assert report["by_budget"][budget_key(2.0)]["summary"]["share_with_pass"] == 1.0
    table = format_budget_table({"regular": report}, [0.5, 2.0, 5.0])
    assert table.splitlines()[1].split()[:5] == ["regular", "0.5", "0.000", "0.000", "none"]


def test_parse_budgets_sorts_and_refuses_nonsense():
    assert parse_budgets("1, 0.25,0.5") == (0.25, 0.5, 1.0)
    for bad in ("", "0,1", "a,b"):
        with pytest.raises(ValueError, match="--budgets"):
            parse_budgets(bad)


def test_the_engine_budget_covers_the_prefill_and_reports_its_clock(tiny_engine):
    """On a real (tiny) engine: every round that ran started before budget - prefill on the decode clock,
    the halting check read at least that, and the derivation at the run's own budget keeps every
    candidate that finished by itself."""
    engine = tiny_engine("llama")
    budget = 0.4
    params = SamplingParams(max_new_tokens=1000, time_budget_s=budget, temperature=0.8, seed=3)
    starts: dict = {}
    events = list(engine.stream("def f(x):", k=3, params=params, method="bass", drafter="ngram"))
    result = events[-1].result
    left = budget - result.stats.prefill_s
    for ev in events:
        if ev.kind == "round" and ev.started_s is not None:
            halted = any(u.finish_reason == "budget" for u in ev.updates)
            assert (ev.started_s >= left) == halted
        if ev.kind == "round":
            for u in ev.updates:
                if u.finished:
                    starts[u.seq] = ev.started_s
    assert {c.finish_reason for c in result.candidates} <= {"budget", "eos", "stop", "length"}
    assert counted_finish_times(result.candidates, starts, result.stats.prefill_s, budget) == \
        [c.finish_time_or_none for c in result.candidates]
