"""The fair comparison (`bass.eval.compare`): the same request for every method, partial runs marked and never
compared, one sentence and one table; the CLI prints them."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import torch
from scripted import ScriptedEngine

from bass import cli
from bass.config import SamplingParams
from bass.eval.compare import (
    COLUMNS,
    SEEDED_DRAFT_LENGTH,
    CompareRequest,
    format_table,
    run_comparison,
    sentence,
    table_cells,
)
from bass.metrics import candidates_ms_per_token

ROUND_S = {"bass": 0.1, "regular": 0.2, "single": 0.4}  # seconds per scripted round of each method
PREFILL_S = 0.05


class MethodEngine:
    """The real engine's `stream` signature; each method replays its texts at its own round time."""

    device = torch.device("cpu")

    def __init__(self, texts: dict[str, list[str]] | list[str], fail: str | None = None, on_round=None):
        self.texts = texts if isinstance(texts, dict) else {m: texts for m in ROUND_S}
        self.fail, self.on_round = fail, on_round or (lambda method: None)
        self.calls: list[dict] = []

    def stream(self, prompts, *, k, params, method="bass", drafter=None, backend=None, draft_length=None,
               chat=False, cancel=None, look_ahead=None, exclusive=False):
        self.calls.append(dict(k=k, params=params, method=method, draft_length=draft_length, exclusive=exclusive))
        if method == self.fail:
            raise ValueError(f"drafter 'model' is not available for {method}")
        scripted = ScriptedEngine(self.texts[method][:k], PREFILL_S, ROUND_S[method],
                                  settle=lambda: self.on_round(method))
        for event in scripted.stream(prompts, k=k, params=params, method=method, cancel=cancel):
            if event.kind == "done":  # the engine's own mean ms/token, which the scripted engine leaves at 0
                cands = event.result.candidates
                stats = replace(event.result.stats, mean_ms_per_token=candidates_ms_per_token(cands))
                event = replace(event, result=replace(event.result, stats=stats))
            yield event


def passes(items) -> list[bool]:
    return ["P" in text for _, text in items]


def request(k=2, **params) -> CompareRequest:
    return CompareRequest("def f():\n", k, SamplingParams(temperature=0.7, seed=11, max_new_tokens=64,
                                                          stop=("\ndef",), **params))


def wall(method: str, chars: int) -> float:
    return PREFILL_S + chars * ROUND_S[method]


def test_every_method_gets_the_same_request_alone_with_the_fixed_draft_length():
    engine = MethodEngine(["abP", "xyzw"])
    cmp = run_comparison(engine, request(), passes)
    assert [c["method"] for c in engine.calls] == ["bass", "regular", "single"]
    first = engine.calls[0]
    assert all(c["params"] == first["params"] and c["k"] == 2 for c in engine.calls)
    assert first["params"].time_budget_s is None  # no budget unless the caller sets one
    assert all(c["exclusive"] and c["draft_length"] == SEEDED_DRAFT_LENGTH for c in engine.calls)
    assert SEEDED_DRAFT_LENGTH.policy == "fixed"
    assert set(cmp.runs) == {"bass", "regular", "single"} and not cmp.failures


def test_equal_work_reads_as_a_wall_time_speed_up_with_first_passes():
    cmp = run_comparison(MethodEngine(["abP", "xyzw"]), request(), passes)
    # 4 rounds each (the longest text): regular's wall over BASS's, single's likewise
    up_reg, up_single = wall("regular", 4) / wall("bass", 4), wall("single", 4) / wall("bass", 4)
    text = cmp.sentence
    assert text.startswith(f"BASS wrote the 2 candidates (7 tokens, the same for every method) {up_reg:.1f}x "
                           f"faster than regular decoding (450 ms vs 850 ms) and {up_single:.1f}x faster than "
                           "single-sequence speculative decoding (450 ms vs 1.7 s) in wall time"), text
    # seq 0 passes after 3 rounds: prefill + 3 rounds, in ms under a second
    assert (f"first passing candidate at {1000 * (PREFILL_S + 0.3):.0f} ms vs {1000 * (PREFILL_S + 0.6):.0f} ms "
            f"(regular), {PREFILL_S + 3 * ROUND_S['single']:.1f} s (single-seq)") in text
    rows = {r.method: r for r in cmp.rows}
    assert rows["BASS"].wall_speed_up == pytest.approx(up_reg) and rows["regular"].wall_speed_up == pytest.approx(1)
    assert rows["BASS"].passing == "1/2 pass" and rows["BASS"].status == "complete"


def test_different_lengths_compare_tokens_per_second_of_wall_time():
    engine = MethodEngine({"bass": ["abcdefgh", "ab"], "regular": ["abc", "ab"], "single": ["abcd", "ab"]})
    text = run_comparison(engine, request(), None).sentence
    bass_rate, reg_rate = 10 / wall("bass", 8), 5 / wall("regular", 3)
    assert f"{bass_rate / reg_rate:.1f}x faster than regular decoding ({bass_rate:.1f} vs {reg_rate:.1f} tok/s)" \
        in text, text
    assert "in tokens per second of wall time" in text and "BASS 10, regular 5, single-seq 6 tokens" in text
    assert "first pass" not in text  # no tests given


def test_a_method_cut_by_the_budget_is_marked_untested_and_never_compared():
    # budget 0.4 s (0.35 s after the prefill): BASS (0.1 s rounds) writes 3 chars; regular and single are cut
    cmp = run_comparison(MethodEngine(["abP", "xyz"]), request(time_budget_s=0.4), passes)
    rows = {r.method: r for r in cmp.rows}
    assert rows["BASS"].status == "complete" and rows["regular"].status == "cut at 0.4 s"
    assert rows["regular"].passing == "2 untested" and rows["regular"].wall_speed_up is None
    assert rows["BASS"].wall_speed_up is None  # its baseline is partial: no speed-up at all
    text = cmp.sentence
    assert "no speed-up is claimed, as regular decoding was cut at 0.4 s and single-sequence speculative " \
           "decoding was cut at 0.4 s" in text and "faster" not in text
    shown = dict(zip(COLUMNS, table_cells(cmp.rows)[1], strict=True))
    assert shown["status"] == "cut at 0.4 s" and shown["passing"] == "2 untested" and shown["× regular (wall)"] == "—"


def test_bass_cut_claims_nothing():
    text = run_comparison(MethodEngine(["abcdefghijP", "x"]), request(time_budget_s=0.3), passes).sentence
    assert text.startswith("No speed-up is claimed: BASS was cut at 0.3 s before its 2 candidates finished"), text


def test_stop_during_regular_marks_it_stopped_and_runs_nothing_after():
    cancel = threading.Event()
    engine = MethodEngine(["abcP", "xyzw"], on_round=lambda m: cancel.set() if m == "regular" else None)
    cmp = run_comparison(engine, request(), passes, cancel=cancel)
    assert list(cmp.runs) == ["bass", "regular"] and [c["method"] for c in engine.calls] == ["bass", "regular"]
    rows = {r.method: r for r in cmp.rows}
    assert rows["regular"].status.startswith("stopped at ") and rows["regular"].passing == "2 untested"
    assert rows["BASS"].wall_speed_up is None and rows["BASS"].token_speed_up is None
    assert "x faster" not in cmp.sentence and "regular decoding was stopped at" in cmp.sentence


def test_a_failing_method_is_named_and_the_others_compared():
    cmp = run_comparison(MethodEngine(["ab", "cd"], fail="single"), request(), None)
    assert set(cmp.runs) == {"bass", "regular"} and "not available" in cmp.failures["single"]
    assert "faster than regular decoding" in cmp.sentence
    assert "not compared: single-sequence speculative decoding failed" in cmp.sentence
    assert sentence({}, {"bass": "no draft"}) == "BASS did not run (no draft), so there is nothing to compare."


def test_table_text_has_every_column_in_order():
    cmp = run_comparison(MethodEngine(["abP", "xyzw"]), request(), passes)
    lines = format_table(cmp.rows).splitlines()
    assert lines[0].split("  ")[0] == "method" and "× regular (wall)" in lines[0] and "tokens/round" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["BASS", "regular", "single-seq"]
    untested = format_table(run_comparison(MethodEngine(["ab", "cd"]), request(), None).rows).splitlines()
    assert "no tests" in untested[1] and "—" in untested[1]  # no first pass without tests


def test_request_refuses_bad_input_with_what_to_do():
    with pytest.raises(ValueError, match="prompt is empty"):
        CompareRequest("  ", 2, SamplingParams())
    with pytest.raises(ValueError, match="distinct names"):
        CompareRequest("x", 2, SamplingParams(), methods=("bass", "fast"))


def test_cli_prints_the_sentence_table_and_note(monkeypatch, capsys, tmp_path):
    import bass.engine

    texts = {m: ["    return 1\n", "    return 2\n"] for m in ROUND_S}
    monkeypatch.setattr(bass.engine, "Engine", lambda config, progress=None: MethodEngine(texts))
    prompt = tmp_path / "p.py"
    prompt.write_text("def one():\n")
    tests = tmp_path / "t.py"
    tests.write_text("assert one() == 1\n")
    code = cli.main(["compare", "--prompt-file", str(prompt), "--tests-file", str(tests), "-k", "2", "--no-warmup"])
    out = capsys.readouterr().out
    assert code == 0
    up = wall("regular", 13) / wall("bass", 13)
    assert f"BASS wrote the 2 candidates (26 tokens, the same for every method) {up:.1f}x faster than regular " \
        "decoding" in out
    assert "first passing candidate at" in out and "1/2 pass" in out  # the real sandbox ran the tests
    assert "What these numbers mean:" in out and "single-seq decodes one candidate at a time" in out


def test_cli_refuses_bad_flags_before_loading_a_model(capsys):
    assert cli.main(["compare", "--humaneval", "999", "-k", "2"]) == 2
    assert "--humaneval takes a problem number from 0 to 163" in capsys.readouterr().err
    assert cli.main(["compare", "--prompt", "def f():", "--budget-s", "-1"]) == 2
    assert "--budget-s must be > 0" in capsys.readouterr().err


def test_a_seed_reproduces_every_methods_candidates(tiny_engine):
    """A real (tiny) engine sampling at temperature 0.8: the same seed gives the same texts, run after run."""
    engine = tiny_engine("llama", draft_seed=1)
    req = CompareRequest("def fib(n):\n", 3, SamplingParams(temperature=0.8, seed=5, max_new_tokens=12))
    texts = [{m: [c.text for c in r.result.candidates] for m, r in run_comparison(engine, req).runs.items()}
             for _ in range(2)]
    assert texts[0] == texts[1] and set(texts[0]) == {"bass", "regular", "single"}
