"""The fair comparison (`bass.eval.compare`): the same request and the same work for every method, repeated in
alternating order, partial runs marked and never compared, texts cut at their first stop, one sentence and one
table; the CLI prints them."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

import pytest
import torch
from scripted import ScriptedEngine

from bass import cli
from bass.config import SamplingParams
from bass.decode.sequences import Sequence, StopRule
from bass.eval.compare import SEEDED_DRAFT_LENGTH, WARM_TOKENS, CompareRequest, run_comparison
from bass.eval.compare_report import COLUMNS, format_table, sentence, table_cells, table_rows
from bass.eval.compare_results import Comparison
from bass.eval.first_stop import FirstStop
from bass.events import Candidate, SequenceStats
from bass.metrics import candidates_ms_per_token, format_seconds

ROUND_S = {"bass": 0.1, "regular": 0.2, "single": 0.4}  # seconds per scripted round of each method
PREFILL_S = 0.05
STOP = "\ndef"
LIMIT = 10  # the token limit of `request`: one character is one token in the scripted engine


class MethodEngine:
    """The real engine's `stream` signature; each method replays its scripts at its own round time, one character
    (token) a round. A normal run ends a script at its first stop string or the token limit; with `ignore_eos` it
    runs to the token limit exactly, padded with "z". `slow[method]` scales the round time of its successive calls."""

    device = torch.device("cpu")

    def __init__(self, texts: dict[str, list[str]] | list[str], fail: str | None = None, on_round=None,
                 slow: dict[str, list[float]] | None = None):
        self.texts = texts if isinstance(texts, dict) else {m: texts for m in ROUND_S}
        self.fail, self.on_round, self.slow = fail, on_round or (lambda method: None), slow or {}
        self.calls: list[dict] = []

    def stream(self, prompts, *, k, params, method="bass", drafter=None, backend=None, draft_length=None,
               chat=False, cancel=None, look_ahead=None, exclusive=False):
        self.calls.append(dict(k=k, params=params, method=method, draft_length=draft_length, exclusive=exclusive))
        if method == self.fail:
            raise ValueError(f"drafter 'model' is not available for {method}")
        texts = [self._script(t, params) for t in self.texts[method][:k]]
        nth = sum(c["method"] == method for c in self.calls) - 1
        factors = self.slow.get(method, [])
        round_s = ROUND_S[method] * (factors[nth % len(factors)] if factors else 1.0)
        scripted = ScriptedEngine(texts, PREFILL_S, round_s, settle=lambda: self.on_round(method))
        for event in scripted.stream(prompts, k=k, params=params, method=method, cancel=cancel):
            if event.kind == "done":  # the engine's own mean ms/token and reasons, which the scripted engine lacks
                cands = tuple(replace(c, finish_reason="length") if c.finish_reason == "stop" and params.ignore_eos
                              else c for c in event.result.candidates)
                stats = replace(event.result.stats, mean_ms_per_token=candidates_ms_per_token(cands))
                event = replace(event, result=replace(event.result, candidates=cands, stats=stats))
            yield event

    @staticmethod
    def _script(text: str, params: SamplingParams) -> str:
        if params.ignore_eos:
            return (text + "z" * params.max_new_tokens)[:params.max_new_tokens]
        hits = [i for s in params.stop if (i := text.find(s)) >= 0]
        return text[:min(hits, default=len(text))][:params.max_new_tokens]  # as the engine's, it ends before the stop


def passes(items) -> list[bool]:
    return ["P" in text for _, text in items]


def request(k=2, repeats=1, warm_up=False, **kw) -> CompareRequest:
    params = {f: kw.pop(f) for f in ("time_budget_s",) if f in kw}
    return CompareRequest("def f():\n", k, SamplingParams(temperature=0.7, seed=11, max_new_tokens=LIMIT, stop=(STOP,),
                                                          **params), repeats=repeats, warm_up=warm_up, **kw)


def wall(method: str, rounds: int) -> float:
    return PREFILL_S + rounds * ROUND_S[method]


def test_every_method_gets_the_same_request_alone_with_the_fixed_draft_length():
    engine = MethodEngine(["abP", "xyzw"])
    cmp = run_comparison(engine, request(warm_up=True), passes)
    warm, timed, normal = engine.calls[:3], engine.calls[3:6], engine.calls[6:]
    assert [c["method"] for c in timed] == ["bass", "regular", "single"] == [c["method"] for c in normal]
    assert all(c["params"] == timed[0]["params"] and c["k"] == 2 for c in timed)
    assert timed[0]["params"].ignore_eos and timed[0]["params"].time_budget_s is None  # no budget unless set
    assert all(c["params"] == replace(timed[0]["params"], ignore_eos=False) for c in normal)  # stop strings end them
    assert all(c["params"].max_new_tokens == WARM_TOKENS for c in warm)  # no CUDA graphs: a short warm-up
    assert all(c["exclusive"] and c["draft_length"] == SEEDED_DRAFT_LENGTH for c in engine.calls)
    assert SEEDED_DRAFT_LENGTH.policy == "fixed"
    assert set(cmp.results) == {"bass", "regular", "single"} and not cmp.failures


def test_equal_work_gives_every_method_the_same_tokens_and_compares_wall_times():
    cmp = run_comparison(MethodEngine(["abP", "xyzw\ndef g"]), request(), passes)
    assert {r.tokens for r in cmp.results.values()} == {2 * LIMIT}  # every candidate ran to the token limit
    up_reg, up_single = wall("regular", LIMIT) / wall("bass", LIMIT), wall("single", LIMIT) / wall("bass", LIMIT)
    bass, reg, single = (format_seconds(wall(m, LIMIT)) for m in ("bass", "regular", "single"))
    text = sentence(cmp)
    assert text.startswith(
        f"BASS wrote the 2 candidates ({2 * LIMIT} tokens, the same for every method) {up_reg:.1f}x faster than "
        f"regular decoding ({bass} vs {reg}) and {up_single:.1f}x faster than single-sequence speculative decoding "
        f"({bass} vs {single}) in wall time; in a normal run with stop strings"), text
    rows = {r.method: r for r in table_rows(cmp)}
    assert rows["BASS"].wall_speed_up == pytest.approx(up_reg) and rows["regular"].wall_speed_up == pytest.approx(1)
    assert rows["BASS"].passing == "1/2 pass" and rows["BASS"].status == "complete"
    assert {r.tokens for r in rows.values()} == {2 * LIMIT} and rows["BASS"].spread is None


def test_texts_are_cut_at_their_first_stop_and_tested_as_cut():
    seen = []

    def tester(items):
        seen.extend(text for _, text in items)
        return passes(items)

    # seq 0's "P" comes after its stop: cut, it fails; seq 1 passes before its stop
    cmp = run_comparison(MethodEngine(["ab\ndefP", "xP\ndef"]), request(), tester)
    shown = cmp.results["bass"].candidates
    assert [c.text for c in shown] == ["ab", "xP"] and [c.finish_reason for c in shown] == ["stop", "stop"]
    assert cmp.results["bass"].run.result.candidates[0].text == "ab\ndefPzzz"  # the work done, kept as it ran
    assert cmp.results["bass"].passed == (False, True)
    assert seen[:6] == ["ab", "xP"] * 3  # the shown candidates of each method, cut, in one batch
    assert all(STOP not in t for t in seen)


def test_natural_stops_compare_tokens_per_second_and_say_the_lengths_differ():
    engine = MethodEngine({"bass": ["abcdP", "ab"], "regular": ["abc", "ab"], "single": ["abcd", "ab"]})
    cmp = run_comparison(engine, request(equal_work=False), None)
    assert [c["params"].ignore_eos for c in engine.calls] == [False] * 3
    text = sentence(cmp)
    bass_rate, reg_rate = 7 / wall("bass", 5), 5 / wall("regular", 3)
    assert f"{bass_rate / reg_rate:.1f}x faster than regular decoding ({bass_rate:.1f} vs {reg_rate:.1f} tok/s)" \
        in text, text
    assert "in tokens per second of wall time" in text and "stop strings ended them at different lengths: " \
        "BASS 7, regular 5, single-seq 6 tokens" in text
    assert "first pass" not in text  # no tests given


def test_repeats_alternate_the_order_and_report_the_median_and_spread():
    slow = {"regular": [1.0, 1.5, 0.5]}  # regular's three runs: rounds of 0.2, 0.3 and 0.1 s
    engine = MethodEngine(["ab", "cd"], slow=slow)
    cmp = run_comparison(engine, request(repeats=3), None)
    assert [c["method"] for c in engine.calls] == ["bass", "regular", "single", "single", "regular", "bass",
                                                    "bass", "regular", "single"]
    walls = [PREFILL_S + LIMIT * 0.2 * f for f in slow["regular"]]
    reg = cmp.results["regular"]
    assert reg.walls_s == pytest.approx(walls) and reg.wall_s == pytest.approx(walls[0])  # the median run's
    assert reg.spread == pytest.approx((walls[1] - walls[2]) / walls[0])
    rows = {r.method: r for r in table_rows(cmp)}
    assert rows["regular"].runs == 3 and rows["BASS"].spread == 0.0
    assert rows["BASS"].wall_speed_up == pytest.approx(walls[0] / wall("bass", LIMIT))
    shown = dict(zip(COLUMNS, table_cells(table_rows(cmp))[1], strict=True))
    assert shown["spread"] == f"{reg.spread:.1%} of 3" and shown["wall (median)"] == format_seconds(walls[0])
    assert "in wall time (median of 3 runs each)" in sentence(cmp)


def test_first_pass_comes_from_a_normal_run_tested_as_it_finishes():
    # equal work runs every candidate to 10 tokens; the normal run ends seq 0 at its stop after 3 rounds
    cmp = run_comparison(MethodEngine(["abP\ndef", "xyzwvu"]), request(), passes)
    res = cmp.results["bass"]
    assert res.first_run.result.candidates[0].text == "abP" and res.first_passed == (True, False)
    assert res.first_pass_s == pytest.approx(PREFILL_S + 3 * ROUND_S["bass"])
    assert cmp.results["single"].first_pass_s == pytest.approx(PREFILL_S + 3 * ROUND_S["single"])
    firsts = [format_seconds(PREFILL_S + 3 * ROUND_S[m]) for m in ("bass", "regular", "single")]
    text = sentence(cmp)
    assert (f"in a normal run with stop strings its first passing candidate came at {firsts[0]} vs {firsts[1]} "
            f"(regular), {firsts[2]} (single-seq) (which candidate passes first depends on the texts sampled)."
            ) in text, text


def test_a_method_cut_by_the_budget_is_marked_untested_not_repeated_and_never_compared():
    # budget 0.4 s (0.35 s after the prefill): 10 tokens take BASS 1 s, the others longer: all are cut
    engine = MethodEngine(["abP", "xyz"])
    cmp = run_comparison(engine, request(time_budget_s=0.4, repeats=2), passes)
    rows = {r.method: r for r in table_rows(cmp)}
    assert rows["regular"].status == "cut at 0.4 s" and {r.runs for r in rows.values()} == {1}  # not run again
    assert rows["regular"].passing == "2 untested" and rows["regular"].wall_speed_up is None
    assert sentence(cmp).startswith("No speed-up is claimed: BASS was cut at 0.4 s before its 2 candidates")
    shown = dict(zip(COLUMNS, table_cells(table_rows(cmp))[1], strict=True))
    assert shown["status"] == "cut at 0.4 s" and shown["passing"] == "2 untested" and shown["× regular (wall)"] == "—"


def test_only_bass_complete_claims_no_speed_up_over_cut_methods():
    # a limit BASS reaches within the budget (4 rounds of 0.1 s) and the others do not
    cmp = run_comparison(MethodEngine(["abP", "xyz"]), replace(request(time_budget_s=0.5),
                         params=SamplingParams(temperature=0.7, seed=11, max_new_tokens=4, time_budget_s=0.5)), passes)
    assert cmp.results["bass"].state == "complete" and cmp.results["regular"].state == "cut"
    text = sentence(cmp)
    assert "no speed-up is claimed, as regular decoding was cut at 0.5 s and single-sequence speculative " \
           "decoding was cut at 0.5 s" in text and "faster" not in text


def test_stop_during_regular_marks_it_stopped_and_runs_nothing_after():
    cancel = threading.Event()
    engine = MethodEngine(["abcP", "xyzw"], on_round=lambda m: cancel.set() if m == "regular" else None)
    cmp = run_comparison(engine, request(), passes, cancel=cancel)
    assert list(cmp.results) == ["bass", "regular"] and [c["method"] for c in engine.calls] == ["bass", "regular"]
    rows = {r.method: r for r in table_rows(cmp)}
    assert rows["regular"].status.startswith("stopped at ") and rows["regular"].passing == "2 untested"
    assert rows["BASS"].wall_speed_up is None and rows["BASS"].token_speed_up is None
    assert "x faster" not in sentence(cmp) and "regular decoding was stopped at" in sentence(cmp)


def test_a_failing_method_is_named_and_the_others_compared():
    cmp = run_comparison(MethodEngine(["ab", "cd"], fail="single"), request(repeats=2), None)
    assert set(cmp.results) == {"bass", "regular"} and "not available" in cmp.failures["single"]
    assert "faster than regular decoding" in sentence(cmp)
    assert "not compared: single-sequence speculative decoding failed" in sentence(cmp)
    assert sentence(Comparison({}, {"bass": "no draft"})) == "BASS did not run (no draft), so there is nothing to " \
                                                             "compare."


def test_table_text_has_every_column_in_order():
    cmp = run_comparison(MethodEngine(["abP", "xyzw"]), request(), passes)
    lines = format_table(table_rows(cmp)).splitlines()
    assert lines[0].split("  ")[0] == "method" and "× regular (wall)" in lines[0] and "tokens/round" in lines[0]
    assert "wall (median)" in lines[0] and "spread" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["BASS", "regular", "single-seq"]
    untested = format_table(table_rows(run_comparison(MethodEngine(["ab", "cd"]), request(), None))).splitlines()
    assert "no tests" in untested[1] and "—" in untested[1]  # no first pass without tests


class CharTokenizer:
    """Token i is chr(i); 0 is the end-of-text token, which decodes to nothing."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i != 0)


def test_first_stop_cuts_where_the_stop_rule_would_have_ended_the_sequence():
    """Random token streams over a few characters and EOS, run to the limit, then cut: the text, tokens and reason
    the engine's stop rule gives when it runs them normally (its own, round-by-round implementation)."""
    rng = torch.Generator().manual_seed(0)
    alphabet = [0] + [ord(c) for c in "\ndefx"] * 8  # EOS one draw in 41
    params = SamplingParams(max_new_tokens=30, stop=("\ndef", "xxx"))
    cutter = FirstStop(params.stop, [0], CharTokenizer().decode)
    reasons = set()
    for _ in range(300):
        ids = [alphabet[i] for i in torch.randint(len(alphabet), (30,), generator=rng).tolist()]
        ran = Candidate(0, 0, CharTokenizer().decode(ids), tuple(ids), "length", SequenceStats(30, 30, 0, 0, 1.0))
        seq = Sequence(seq=0, prompt_index=0, sample_index=0, prompt_len=1, history=[ord("#")])
        rule = StopRule(CharTokenizer(), [0], params)
        for j in range(0, 30, 4):  # rounds of 4 tokens
            if not seq.finished:
                rule.extend(seq, ids[j:j + 4])
        got = cutter.cut(ran)
        assert (got.text, list(got.token_ids), got.finish_reason) == (seq.text, seq.generated, seq.finish_reason)
        assert got.stats == ran.stats  # the work it did is kept
        reasons.add(got.finish_reason)
    assert reasons == {"eos", "stop", "length"}


def test_request_refuses_bad_input_with_what_to_do():
    with pytest.raises(ValueError, match="prompt is empty"):
        CompareRequest("  ", 2, SamplingParams())
    with pytest.raises(ValueError, match="distinct names"):
        CompareRequest("x", 2, SamplingParams(), methods=("bass", "fast"))
    with pytest.raises(ValueError, match="repeats must be a whole number of timed runs per method from 1 to 20"):
        CompareRequest("x", 2, SamplingParams(), repeats=0)


def _cli(monkeypatch, tmp_path, texts, *flags) -> tuple[int, str]:
    import bass.engine

    monkeypatch.setattr(bass.engine, "Engine", lambda config, progress=None: MethodEngine(texts))
    prompt = tmp_path / "p.py"
    prompt.write_text("def one():\n")
    tests = tmp_path / "t.py"
    tests.write_text("assert one() == 1\n")
    return cli.main(["compare", "--prompt-file", str(prompt), "--tests-file", str(tests), "-k", "2",
                     "--max-new-tokens", "16", "--stop", STOP, *flags])


def test_cli_prints_the_sentence_table_and_note_and_writes_the_json(monkeypatch, capsys, tmp_path):
    texts = {m: ["    return 1\ndef x", "    return 2\n"] for m in ROUND_S}
    out = tmp_path / "runs" / "he.json"
    assert _cli(monkeypatch, tmp_path, texts, "--repeats", "2", "--out", str(out)) == 0
    printed = capsys.readouterr().out
    up = wall("regular", 16) / wall("bass", 16)
    assert f"BASS wrote the 2 candidates (32 tokens, the same for every method) {up:.1f}x faster than regular " \
        "decoding" in printed and "(median of 2 runs each)" in printed
    assert "first passing candidate came at" in printed and "1/2 pass" in printed  # the real sandbox ran the tests
    assert "What these numbers mean:" in printed and "equal work (the default)" in printed
    assert "CPU" in printed.splitlines()[-1]  # the device line names the machine
    report = json.loads(out.read_text())
    assert report["sentence"] in printed and report["settings"]["repeats"] == 2 and report["equal_work"]
    assert [r["tokens"] for r in report["summary"]] == [32] * 3 and len(report["summary"][0]["walls_s"]) == 2
    assert report["runs"]["BASS"]["candidates"][0]["text"] == "    return 1"  # cut at its stop
    assert report["runs"]["BASS"]["time_to_first_pass_s"] == pytest.approx(PREFILL_S + 12 * ROUND_S["bass"])


def test_cli_compares_several_humaneval_problems_on_one_engine(monkeypatch, capsys, tmp_path):
    import bass.engine

    made = []
    texts = {m: ["    return 1\n", "    return 2\n"] for m in ROUND_S}
    monkeypatch.setattr(bass.engine, "Engine", lambda config, progress=None: made.append(1) or MethodEngine(texts))
    out = tmp_path / "he.json"
    assert cli.main(["compare", "--humaneval", "0,2", "-k", "2", "--max-new-tokens", "16", "--no-warmup",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert made == [1] and "HumanEval/0: BASS wrote" in printed and "HumanEval/2: BASS wrote" in printed
    report = json.loads(out.read_text())
    assert [c["settings"]["humaneval"] for c in report["comparisons"]] == [0, 2]
    with pytest.raises(SystemExit) as exc:
        cli.main(["compare", "--humaneval", "0,x", "-k", "2"])
    assert exc.value.code == 2 and "problem numbers such as 0 or 0,35,90" in capsys.readouterr().err


def test_cli_natural_stops(monkeypatch, capsys, tmp_path):
    texts = {m: ["    return 1\n", "    return 2\n"] for m in ROUND_S}
    assert _cli(monkeypatch, tmp_path, texts, "--natural-stops", "--json", "--no-warmup") == 0
    report = json.loads(capsys.readouterr().out)
    assert not report["equal_work"] and [r["tokens"] for r in report["summary"]] == [26] * 3
    assert "in tokens per second of wall time" in report["sentence"] and "every method wrote 26 tokens" in \
        report["sentence"]


def test_cli_refuses_bad_flags_before_loading_a_model(capsys, tmp_path):
    assert cli.main(["compare", "--humaneval", "999", "-k", "2"]) == 2
    assert "--humaneval takes a problem number from 0 to 163" in capsys.readouterr().err
    assert cli.main(["compare", "--prompt", "def f():", "--budget-s", "-1"]) == 2
    assert "--budget-s must be > 0" in capsys.readouterr().err
    assert cli.main(["compare", "--prompt", "def f():", "--repeats", "0", "--target", "no-such-model"]) == 2
    assert "--repeats must be a whole number of timed runs per method from 1 to 20" in capsys.readouterr().err
    assert cli.main(["compare", "--prompt", "def f():", "--out", str(tmp_path), "--target", "no-such-model"]) == 2
    assert "is a directory: give a file name" in capsys.readouterr().err


@pytest.mark.parametrize("tests, why", [
    ("assert one( == 1\n", "the tests do not parse (line 1"),
    ("one()\nassert True\n", "no tests: the test file has no assert that can fail")])
def test_cli_refuses_tests_no_candidate_could_pass_before_generating(tmp_path, capsys, tests, why):
    """--target names no model: the tests' error, not the target's, shows they were read first."""
    path = tmp_path / "t.py"
    path.write_text(tests)
    for command in ("generate", "compare"):
        flags = ["--prompt", "def one():", "--tests-file", str(path), "--target", "no-such-model"]
        assert cli.main([command, *flags]) == 2
        err = capsys.readouterr().err
        assert f"--tests-file {path}: {why}" in err and "(nothing was generated)" in err, err


def test_a_seed_reproduces_every_methods_candidates(tiny_engine):
    """A real (tiny) engine sampling at temperature 0.8: the same seed gives the same texts, run after run."""
    engine = tiny_engine("llama", draft_seed=1)
    req = CompareRequest("def fib(n):\n", 3, SamplingParams(temperature=0.8, seed=5, max_new_tokens=12))
    texts = [{m: [c.text for c in r.candidates] for m, r in run_comparison(engine, req).results.items()}
             for _ in range(2)]
    assert texts[0] == texts[1] and set(texts[0]) == {"bass", "regular", "single"}


def test_cut_texts_are_what_a_normal_run_of_the_seed_writes(tiny_engine):
    """A real (tiny) engine: each method's candidates, run to the token limit and cut at their first stop (an EOS
    token, a stop string), are the texts and tokens a normal run with the same seed ends with."""
    engine = tiny_engine("llama", draft_seed=1)
    params = SamplingParams(temperature=0.8, seed=5, max_new_tokens=24, stop=("K",))
    cmp = run_comparison(engine, CompareRequest("def fib(n):\n", 4, params, warm_up=False))
    reasons = set()
    for method, res in cmp.results.items():
        assert {c.stats.tokens for c in res.run.result.candidates} == {24}  # the work: every candidate to the limit
        normal = engine.generate("def fib(n):\n", k=4, params=params, method=method,
                                 draft_length=SEEDED_DRAFT_LENGTH).candidates
        assert [(c.text, c.token_ids, c.finish_reason) for c in res.candidates] == \
            [(c.text, c.token_ids, c.finish_reason) for c in normal], method
        reasons |= {c.finish_reason for c in normal}
    assert reasons >= {"eos", "stop"}  # both kinds of stop were cut at


def test_no_pass_in_any_normal_run_reads_as_such():
    cmp = run_comparison(MethodEngine(["ab", "cd"]), request(), passes)
    assert sentence(cmp).endswith("in wall time; in a normal run with stop strings no candidate of any method "
                                  "passed the tests.")
