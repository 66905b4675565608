"""bench/load_bench.py: its modes and bookkeeping against a scripted engine (timing, queued events, a passing
candidate through the real sandbox, a lost request), its flags, and its whole plumbing on tiny CPU models."""

import threading
import time

import pytest

from bass import SamplingParams
from bass.events import BatchStats, Candidate, GenerationEvent, GenerationResult, SequenceStats, SequenceUpdate
from bench import load_bench as lb


class ScriptedEngine:
    """Serves every request in `service_s` seconds of sleep, side by side with other callers unless `serial`:
    candidate 0 finishes at half time with `first_text(prompt)`, the others at the end with "pass"; each stream
    first says it waits at `positions`; a prompt in `fail` raises instead."""

    def __init__(self, service_s: float, serial: bool = False, positions: tuple[int, ...] = (),
                 first_text=lambda prompt: "    pass\n", fail: frozenset[str] = frozenset()):
        self.service_s, self.positions, self.first_text, self.fail = service_s, positions, first_text, fail
        self.lock = threading.Lock() if serial else None
        self.calls: list[str] = []

    def stream(self, prompt, *, k, params, method):
        self.calls.append(method)
        if prompt in self.fail:
            raise RuntimeError("out of memory")
        for n, pos in enumerate(self.positions):
            yield GenerationEvent("queued", 0, 0.01 * n, 0, queue_position=pos)
        if self.lock is not None:
            self.lock.acquire()
        try:
            texts = [self.first_text(prompt)] + ["    pass\n"] * (k - 1)
            yield GenerationEvent("prefill", 0, 0.0, 0, (), ("",) * k)
            time.sleep(self.service_s / 2)
            yield GenerationEvent("round", 1, 0.0, 0, (SequenceUpdate(0, (1, 2), texts[0], 0, 0, True, "stop"),),
                                  (texts[0],) + ("",) * (k - 1))
            time.sleep(self.service_s / 2)
            ups = tuple(SequenceUpdate(s, (3,), texts[s], 0, 0, True, "length") for s in range(1, k))
            cands = tuple(Candidate(0, s, texts[s], (s,), "stop", SequenceStats(2, 1, 0, 0, 0.1)) for s in range(k))
            stats = BatchStats(method, None, "torch", k, 0.0, self.service_s, 2 * k, k, 0, 0, 1.0)
            yield GenerationEvent("round", 2, 0.0, 0, ups, tuple(texts))
            yield GenerationEvent("done", 2, 0.0, 0, (), tuple(texts), GenerationResult(cands, stats))
        finally:
            if self.lock is not None:
                self.lock.release()


def requests(n: int, arrivals=None, k: int = 2) -> list[lb.Request]:
    from sandbox import load_humaneval

    problems = load_humaneval()[::-1]
    return [lb.Request(i, problems[i], 0.0 if arrivals is None else arrivals[i], k, SamplingParams(seed=i))
            for i in range(n)]


def test_one_at_a_time_serves_in_arrival_order_and_batched_modes_do_not_wait():
    """An engine that can run requests side by side: one-at-a-time still starts each only after the one before it is
    done (and in arrival order, not list order), while a batched mode's visitors all start at their arrival."""
    engine = ScriptedEngine(0.3)
    reqs = requests(3, arrivals=[0.0, 0.1, 0.05])
    alone = lb.run_mode(engine, reqs, "one-at-a-time", test=False, timeout_s=30)
    order = sorted(alone, key=lambda s: s.start_s)
    assert [s.request.visitor for s in order] == [0, 2, 1]
    assert all(b.start_s >= a.done_s for a, b in zip(order, order[1:]))
    assert max(s.done_s for s in alone) >= 0.9 and engine.calls == ["bass"] * 3
    batched = lb.run_mode(engine, reqs, "batched-regular", test=False, timeout_s=30)
    assert all(s.start_s >= s.request.arrival_s for s in batched)
    assert max(s.done_s for s in batched) < 0.6 and engine.calls[3:] == ["regular"] * 3
    row = lb.summarize(lb.Scenario("together", 3), "one-at-a-time", reqs, alone, None)
    to_done = sorted(s.done_s - s.request.arrival_s for s in alone)
    assert row["p50_done_s"] == pytest.approx(to_done[1]) and row["p50_done_s"] <= row["p95_done_s"] <= to_done[2]
    assert row["service_s"] == pytest.approx(0.3, abs=0.1) and row["done"] == 3 and row["lost"] == 0


def test_queued_events_first_pass_and_a_lost_request():
    """Positions in line are counted per request; the first passing candidate (HumanEval's own solution, tested by
    the sandbox) is timed when it finished decoding; a request whose stream raises is lost, with its error."""
    reqs = requests(3)
    solution = {r.problem.prompt: r.problem.canonical_solution for r in reqs[:1]}
    engine = ScriptedEngine(0.2, serial=True, positions=(2, 1), fail=frozenset({reqs[2].problem.prompt}),
                            first_text=lambda prompt: solution.get(prompt, "    pass\n"))
    served = lb.run_mode(engine, reqs, "batched-bass", timeout_s=60)
    row = lb.summarize(lb.Scenario("queued", 3, k=2), "batched-bass", reqs, served, None)
    v = row["visits"]
    assert (row["done"], row["lost"], row["saw_position"]) == (2, 1, 2)  # the refused one never waited
    assert [x["queue_positions"] for x in v] == [[2, 1], [2, 1], []] and [x["queued_events"] for x in v] == [2, 2, 0]
    assert "out of memory" in v[2]["error"] and v[2]["done_s"] is None
    assert [x["tested"] for x in v] == [2, 2, 0] and [x["passed"] for x in v] == [1, 0, 0]
    assert v[0]["start_s"] < v[0]["first_pass_s"] < v[0]["done_s"]  # its candidate 0, at half time
    assert row["with_pass"] == 1 and row["p50_first_pass_s"] == pytest.approx(v[0]["first_pass_s"])
    assert row["tokens"] == 2 * 4 and row["tokens_per_s"] == pytest.approx(8 / row["wall_s"])


def test_scenarios_parse_and_poisson_arrivals_are_seeded():
    assert lb.parse_scenario("together:4") == lb.Scenario("together", 4)
    assert lb.parse_scenario("together:1:1") == lb.Scenario("together", 1, k=1)  # a lone request of one candidate
    assert lb.parse_scenario("queued:32:16").k == 16 and lb.parse_scenario("poisson:16:32").label == "poisson:16:32"
    p = lb.Scenario("poisson", 2000, rate=40.0)
    times = p.arrivals(0)
    assert times[0] == 0.0 and times == sorted(times) and times == p.arrivals(0) and times != p.arrivals(1)
    assert (times[-1] / 1999) == pytest.approx(1 / 40, rel=0.1)  # mean gap 1 / rate
    for bad in ("together", "poisson:4", "queued:4", "queued:4:0", "together:0", "crowd:3", "poisson:2:-1",
                "together:2:0"):
        with pytest.raises(Exception, match="scenario|visitor|k|rate|poisson|queued"):
            lb.parse_scenario(bad)


@pytest.mark.parametrize("flags, said", [(["--modes", "everyone"], "--modes"), (["--k", "0"], "--k"),
                                         (["--scenarios", "poisson:3"], "poisson"), (["--pool", "0"], "--pool")])
def test_bad_flags_say_what_to_change(flags, said, capsys):
    with pytest.raises(SystemExit) as exc:
        lb.parse_args(flags)
    assert exc.value.code == 2 and said in capsys.readouterr().err
