"""HumanEval-under-a-budget plumbing: metric arithmetic by hand, and one run on a tiny model."""

import pytest

from bass.eval.humaneval import problem_row, run_humaneval, summarize
from bass.events import Candidate, SequenceStats


def _cand(reason, t, tokens=10):
    return Candidate(0, 0, "", (1,) * tokens, reason, SequenceStats(tokens, 5, 8, 4, t))


def test_problem_row_by_hand():
    cands = [_cand("stop", 2.0), _cand("budget", 3.0), _cand("eos", 1.0, tokens=20), _cand("length", 2.5)]
    row = problem_row("T/0", cands, [True, True, False, True])
    # the budget-cut sequence counts as failing even though its text would pass
    assert row["finished"] == 3 and row["passed"] == 2
    assert row["pass_at_first"] is False  # seq 2 finished first (1.0 s) and failed
    assert row["pass_at_all"] is True
    assert row["pass_at_1"] == pytest.approx(2 / 4)
    assert row["pass_at_4"] == 1.0
    # ms/token per sequence: 200, 300, 50, 250 -> mean 200
    assert row["mean_ms_per_token"] == pytest.approx(200.0)


def test_summarize_means_over_problems():
    rows = [{"task_id": "a", "n": 2, "pass_at_first": True, "pass_at_1": 0.5, "mean_ms_per_token": 10.0},
            {"task_id": "b", "n": 2, "pass_at_first": False, "pass_at_1": 0.0, "mean_ms_per_token": 30.0}]
    s = summarize(rows)
    assert s == {"problems": 2, "pass_at_first": 0.5, "pass_at_1": 0.25, "mean_ms_per_token": 20.0}


def test_run_on_a_tiny_model(tiny_engine):
    engine = tiny_engine("llama")
    report = run_humaneval(engine.config, k=2, budget_s=30.0, method="bass", limit=2, engine=engine,
                           params=__import__("bass").SamplingParams(max_new_tokens=8))
    assert [r["task_id"] for r in report["problems"]] == ["HumanEval/0", "HumanEval/1"]
    for r in report["problems"]:
        assert r["n"] == 2 and r["finished"] == 2  # 8 tokens take far less than the budget
        assert r["passed"] == 0 and r["pass_at_all"] is False  # random weights write no working code
        assert [c["passed"] for c in r["candidates"]] == [False, False]
        assert all(c["tokens"] == 8 and c["reason"] == "length" and c["finish_s"] > 0 for c in r["candidates"])
    assert report["summary"]["problems"] == 2 and report["config"]["method"] == "bass"


def test_warmup_prefills_every_problem_untimed_before_the_first_timed_one(tiny_engine):
    """Each problem's prompt runs a few untimed tokens, then the longest in full, before any budget runs."""
    from bass.eval.humaneval import WARMUP_TOKENS

    engine = tiny_engine("llama")
    calls, generate = [], engine.generate
    engine.generate = lambda prompt, **kw: calls.append((prompt, kw["params"])) or generate(prompt, **kw)
    report = run_humaneval(engine.config, k=2, budget_s=30.0, method="regular", limit=3, engine=engine,
                           params=__import__("bass").SamplingParams(max_new_tokens=8), warmup=True)
    from sandbox import load_humaneval

    prompts = [p.prompt for p in load_humaneval()[:3]]
    assert [c[0] for c in calls[:3]] == prompts
    assert all(c[1].max_new_tokens == WARMUP_TOKENS and c[1].time_budget_s is None for c in calls[:3])
    assert calls[3][0] in prompts and calls[3][1].max_new_tokens == 8 and calls[3][1].time_budget_s is None
    assert len(calls) == 4 and len(report["problems"]) == 3  # the timed runs stream


def test_warmup_drafts_every_length_where_graphs_are_captured(tiny_engine, monkeypatch):
    """With CUDA graphs, a drafting method's warm-up ends by drafting every length at its batch from the longest
    prompt (`Engine.warm_draft_lengths`), so no timed problem captures a width; without graphs (the CPU) and
    for regular decoding there is nothing to capture."""
    from bass.engine import Engine
    from sandbox import load_humaneval

    engine = tiny_engine("llama")
    warmed = []
    monkeypatch.setattr(engine, "warm_draft_lengths", lambda prompt, params, **kw: warmed.append((prompt, kw)))
    run = dict(k=2, budget_s=30.0, limit=2, engine=engine, warmup=True,
               params=__import__("bass").SamplingParams(max_new_tokens=4))
    run_humaneval(engine.config, method="bass", **run)
    assert warmed == []  # no graphs on the CPU
    monkeypatch.setattr(Engine, "captures_graphs", property(lambda self: True))
    for method in ("regular", "bass"):
        run_humaneval(engine.config, method=method, **run)
    prompts = [p.prompt for p in load_humaneval()[:2]]
    longest = max(prompts, key=lambda p: len(engine.encode(p)[0]))
    assert warmed == [(longest, {"k": 2, "method": "bass"})]


# ---- streaming verdicts, stop at the first pass, time to first pass ------------------------------------
import time  # noqa: E402

from scripted import ScriptedEngine, ScriptedTester  # noqa: E402

from bass.config import SamplingParams  # noqa: E402
from bass.eval.humaneval import TTFP, format_report, stream_with_verdicts  # noqa: E402
from bass.eval.verdicts import VerdictWorker  # noqa: E402

# seq i finishes after len(text) rounds: seq0 at 4, seq1 at 1, seq2 at 5, seq3 at 2; 'P' marks a pass
TEXTS = ["abcP", "x", "abcdP", "aP"]


def _run(stop: bool, texts=TEXTS):
    tester = ScriptedTester()
    engine = ScriptedEngine(texts, prefill_s=0.5, round_s=1.0)
    worker = VerdictWorker(tester, bool, stop_at_first_pass=stop, clock=lambda: engine.now)
    engine.settle = worker.wait_idle  # the tester keeps up with every round: cancels land at a known round
    result, verdicts = stream_with_verdicts(engine, "p", worker, k=len(texts), params=SamplingParams(), method="bass")
    return result, verdicts, tester


def test_each_candidate_is_tested_the_moment_it_finishes():
    result, verdicts, tester = _run(stop=False)
    assert tester.seen == [1, 3, 0, 2]  # finish order: rounds 1, 2, 4, 5
    assert {s: (v.passed, v.at_s) for s, v in verdicts.items()} == \
        {1: (False, 1.0), 3: (True, 2.0), 0: (True, 4.0), 2: (True, 5.0)}
    assert [c.finish_reason for c in result.candidates] == ["stop"] * 4
    passed = [verdicts[i].passed for i in range(4)]
    row = problem_row("T", result.candidates, passed, result.stats.prefill_s)
    assert row[TTFP] == pytest.approx(0.5 + 2.0)  # prefill + seq 3's finish at 2 s
    assert row["passed"] == 3 and row["pass_at_first"] is False  # seq 1 finished first and failed


def test_stop_at_first_pass_cancels_the_siblings_keeping_their_text():
    result, verdicts, tester = _run(stop=True)
    # seq 3 passes at round 2; the engine sees the cancel at the start of round 3
    assert sorted(verdicts) == [1, 3] and verdicts[3].passed and not verdicts[1].passed
    assert tester.seen == [1, 3]
    reasons = [c.finish_reason for c in result.candidates]
    assert reasons == ["cancelled", "stop", "cancelled", "stop"]
    assert [c.text for c in result.candidates] == ["ab", "x", "ab", "aP"]  # partial text kept
    assert [c.stats.finish_time_s for c in result.candidates] == [3.0, 1.0, 3.0, 2.0]
    passed = [verdicts[i].passed if i in verdicts else None for i in range(4)]
    row = problem_row("T", result.candidates, passed, result.stats.prefill_s)
    assert row[TTFP] == pytest.approx(2.5) and row["finished"] == 2 and row["passed"] == 1


def test_no_pass_gives_no_time_to_first_pass_and_runs_to_the_end():
    result, verdicts, _ = _run(stop=True, texts=["ab", "x", "abc"])
    assert [c.finish_reason for c in result.candidates] == ["stop"] * 3 and len(verdicts) == 3
    row = problem_row("T", result.candidates, [False] * 3, result.stats.prefill_s)
    assert row[TTFP] is None


def test_time_to_first_pass_summary_and_report():
    rows = [{"task_id": "a", "n": 2, "pass_at_all": True, TTFP: 2.0},
            {"task_id": "b", "n": 2, "pass_at_all": True, TTFP: 5.0},
            {"task_id": "c", "n": 2, "pass_at_all": False, TTFP: None}]
    s = summarize(rows)
    assert s["mean_" + TTFP] == pytest.approx(3.5) and s["share_with_pass"] == pytest.approx(2 / 3)
    assert summarize(rows[2:])["mean_" + TTFP] is None
    report = {"config": {"k": 2, "budget_s": 9, "method": "bass", "drafter": "ngram", "target": "t",
                         "device": "cpu", "stop_at_first_pass": True}, "summary": s}
    text = format_report(report)
    assert "time to first pass: mean 3.5 s" in text and "66.7% of problems" in text
    assert "none" in format_report({**report, "summary": summarize(rows[2:])})
    gpu = summarize([{**r, TTFP: t} for r, t in zip(rows, (0.030, 0.054, None), strict=True)])
    assert "time to first pass: mean 42 ms" in format_report({**report, "summary": gpu})


def test_humaneval_with_the_real_sandbox_stops_at_the_first_pass(monkeypatch):
    from sandbox import load_humaneval

    good = ("    for i, a in enumerate(numbers):\n        for b in numbers[i + 1:]:\n"
            "            if abs(a - b) < threshold:\n                return True\n    return False\n")
    # seq 1 (a wrong one-liner) finishes first, seq 0 (correct) next; seq 2 would need ~10 s of real time
    texts = [good, "    return False\n", good * 20]
    engine = ScriptedEngine(texts, prefill_s=0.25, round_s=0.001, settle=lambda: time.sleep(0.004))
    assert load_humaneval()[0].task_id == "HumanEval/0"
    report = run_humaneval(engine_config_stub(), k=3, budget_s=60, method="bass", limit=1, engine=engine,
                           stop_at_first_pass=True)
    row = report["problems"][0]
    assert row["finished"] == 2  # seq 2 was cancelled once seq 0 passed in the sandbox
    assert row["passed"] == 1 and row[TTFP] == pytest.approx(0.25 + len(good) * 0.001)
    assert report["summary"]["share_with_pass"] == 1.0 and report["config"]["stop_at_first_pass"] is True


def engine_config_stub():
    from bass.config import EngineConfig

    return EngineConfig(target="scripted")


def test_cli_says_what_is_wrong_with_a_prompt_or_tests_file(tmp_path, capsys):
    from bass.cli import main

    bad = tmp_path / "prompt.txt"
    bad.write_bytes(b"\xff\xfedef f(x):\n")
    assert main(["generate", "--prompt-file", str(bad), "--target", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "the prompt file must be UTF-8 text" in err and "codec" not in err
    ok = tmp_path / "tests.py"
    ok.write_text("assert True\n")
    assert main(["generate", "--prompt-file", str(ok), "--stop-at-first-pass"]) == 2
    assert "--stop-at-first-pass needs --tests-file" in capsys.readouterr().err
    for flags, want in ((["--prompt-file", str(tmp_path / "gone.py")], "gone.py: no such prompt file: check the path"),
                        (["--prompt-file", str(tmp_path)], "is a directory: give the prompt file itself"),
                        (["--prompt", "def f():", "--tests-file", str(tmp_path / "t.py")], "no such tests file")):
        assert main(["generate", *flags, "--target", "no-such-model"]) == 2
        err = capsys.readouterr().err
        assert want in err and "Errno" not in err


def test_cli_refuses_empty_prompts_before_loading_a_model(tmp_path, capsys):
    """--target names no model: an error about the prompts, not about the target, shows they came first."""
    from bass.cli import main

    blank = tmp_path / "blank.py"
    blank.write_text("  \n")
    lines = tmp_path / "prompts.jsonl"
    for text, want in (("", "holds no prompt"), ('{"prompt": "def f():"}\n{"prompt": " "}\n', "prompt 1 is empty")):
        lines.write_text(text)
        assert main(["generate", "--prompts-file", str(lines), "--target", "no-such-model"]) == 2
        assert want in capsys.readouterr().err
    assert main(["generate", "--prompt-file", str(blank), "--target", "no-such-model"]) == 2
    assert "prompt 0 is empty: the file must hold a coding prompt" in capsys.readouterr().err
    lines.write_text('{"prompt": "def f():"}\n{"prompt": "def g():",}\n')
    assert main(["generate", "--prompts-file", str(lines), "--target", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert f"{lines}:2: not JSON" in err and 'each line must be a JSON object with a "prompt" string' in err
    assert main(["generate", "--prompt", " ", "--target", "no-such-model"]) == 2
    assert "--prompt is empty: give a coding prompt" in capsys.readouterr().err


def test_cli_refuses_eval_flags_no_run_could_use_before_loading_a_model(tmp_path, capsys):
    """--target names no model: each flag's own error, not the target's, shows the flags were read first."""
    from bass.cli import main

    base = ["eval", "humaneval", "--target", "no-such-model"]
    for flags, want in ((["--budget-s", "-1"], "--budget-s must be > 0 seconds per problem; got -1"),
                        (["--budget-s", "1", "-k", "0"], "-k must be an integer in 1 .. 64 candidates"),
                        (["--budget-s", "1", "--limit", "0"], "--limit must be at least 1 problem"),
                        (["--budgets", "0.1,0.2", "--budget-s", "1"], "give --budgets or --budget-s, not both")):
        assert main([*base, *flags]) == 2
        err = capsys.readouterr().err
        assert want in err and "no-such-model" not in err
    assert main(["generate", "--prompt", "def f():", "-k", "65", "--target", "no-such-model"]) == 2
    assert "-k must be an integer in 1 .. 64" in capsys.readouterr().err
    assert main(["generate", "--prompt", "def f():", "--draft", "gone.safetensors", "--target", "no-such-model"]) == 2
    assert "--draft gone.safetensors: no such draft file" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("")
    for out, want in ((tmp_path, "is a directory: give a file name"), (tmp_path / "a-file" / "x.json",
                                                                        "a-file is a file, not a folder")):
        assert main([*base, "--budget-s", "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert want in err and "no-such-model" not in err
    assert main([*base, "--budgets", "0.1,0.2", "--budget-s", "0.2", "--limit", "1"]) == 2  # the same run: allowed
    assert "no-such-model" in capsys.readouterr().err  # it got as far as the target


def test_run_humaneval_refuses_a_run_it_cannot_make():
    """The API refuses limit 0 and a k past the engine's as the CLI does, before any engine is built (the target
    here names no model)."""
    from bass.config import EngineConfig

    with pytest.raises(ValueError, match="limit must be at least 1 problem"):
        run_humaneval(EngineConfig(target="no-such-model"), k=1, budget_s=1.0, method="bass", limit=0)
    with pytest.raises(ValueError, match="k must be an integer in 1 .. 64"):
        run_humaneval(EngineConfig(target="no-such-model"), k=65, budget_s=1.0, method="bass")


def test_cli_takes_a_prompt_inline_as_the_file_would_give_it(tmp_path):
    """--prompt TEXT reads as --prompt-file holding TEXT (the exact flag, not argparse's ambiguous prefix), and
    only one source of prompts is taken."""
    from bass.cli import parser, read_prompts

    text = 'def fib(n: int) -> int:\n    """The n-th Fibonacci number."""\n'
    inline = parser().parse_args(["generate", "--prompt", text])
    (tmp_path / "p.py").write_text(text)
    from_file = parser().parse_args(["generate", "--prompt-file", str(tmp_path / "p.py")])
    assert read_prompts(inline) == read_prompts(from_file) == [text]
    with pytest.raises(SystemExit):
        parser().parse_args(["generate", "--prompt", text, "--prompt-file", str(tmp_path / "p.py")])



def test_cli_passes_the_draft_temperature_to_the_engine(tmp_path, capsys):
    from bass.cli import engine_config, main, parser

    prompt = tmp_path / "prompt.txt"
    prompt.write_text("def f():\n")
    flags = ["generate", "--prompt-file", str(prompt)]
    assert engine_config(parser().parse_args([*flags, "--draft-temperature", "0.5"])).draft_temperature == 0.5
    assert engine_config(parser().parse_args(flags)).draft_temperature is None
    assert main([*flags, "--draft-temperature", "3"]) == 2
    assert "draft_temperature must be a multiple of the request's temperature in (0, 2]" in capsys.readouterr().err


def test_cli_samples_by_default_and_says_when_greedy_candidates_would_be_identical(tmp_path, capsys):
    """k candidates of one prompt are samples: the CLI starts where the app does. Asked for k > 1 greedy ones, it
    says they will be the same text, before any model loads (the target here names none)."""
    from bass.cli import main, parser, sampling_params
    from bass.config import CANDIDATE_TEMPERATURE, CANDIDATE_TOP_P

    prompt = tmp_path / "prompt.txt"
    prompt.write_text("def f():\n")
    flags = ["generate", "--prompt-file", str(prompt), "--target", "no-such-model"]
    params = sampling_params(parser().parse_args(flags))
    assert (params.temperature, params.top_p) == (CANDIDATE_TEMPERATURE, CANDIDATE_TOP_P) and params.temperature > 0
    assert main([*flags, "--temperature", "0"]) == 2  # k is 8 by default
    assert "note: --temperature 0 decodes greedily, so the 8 candidates of each prompt will be identical" in \
        capsys.readouterr().err
    assert main(["eval", "humaneval", "--budget-s", "1", "-k", "3", "--temperature", "0", "--target",
                 "no-such-model"]) == 2
    assert "the 3 candidates of each prompt will be identical" in capsys.readouterr().err
    for quiet in ([*flags, "--temperature", "0", "-k", "1"], flags):
        assert main(quiet) == 2
        assert "identical" not in capsys.readouterr().err


def test_on_verdicts_runs_once_the_verdicts_can_be_polled():
    got: list[list[int]] = []  # what a poll found at each call: the batch that triggered it
    worker: VerdictWorker[bool] = VerdictWorker(
        lambda items: ["P" in text for _, text in items], bool,
        on_verdicts=lambda: got.append([v.seq for v in worker.poll()]))
    worker.submit(2, "P")
    assert worker.wait_idle(10)
    worker.submit(0, "F")
    worker.close(10)
    assert got == [[2], [0]]
    assert {s: v.passed for s, v in worker.verdicts.items()} == {2: True, 0: False}


def test_drain_reports_the_pending_candidates_until_the_last_verdict_or_a_stop():
    import threading

    release = threading.Event()

    def slow(items):  # the sandbox answers only once released
        release.wait(10)
        return ["P" in text for _, text in items]

    worker: VerdictWorker[bool] = VerdictWorker(slow, bool)
    worker.submit(0, "P")
    worker.submit(1, "F")
    worker.close(timeout_s=0)
    seen = []
    for pending, waited in worker.drain(threading.Event(), poll_s=0.01):
        seen.append(pending)
        assert waited >= 0
        if len(seen) == 3:
            release.set()
    assert seen[:3] == [2, 2, 2] and len(seen) >= 3 and worker.pending == 0
    assert {s: v.passed for s, v in worker.verdicts.items()} == {0: True, 1: False}

    stuck: VerdictWorker[bool] = VerdictWorker(lambda items: threading.Event().wait(30) or [], bool)
    stuck.submit(0, "P")
    stop = threading.Event()
    t0 = time.perf_counter()
    for _ in stuck.drain(stop, poll_s=0.01):
        stop.set()  # a Stop while the sandbox is busy ends the wait at the next poll
    assert time.perf_counter() - t0 < 5 and stuck.pending == 1


def test_stream_with_verdicts_runs_the_drafter_asked_for(tiny_engine):
    engine = tiny_engine("llama", draft_seed=1)  # its default drafter is the draft model
    assert engine.default_drafter == "model"
    worker = VerdictWorker(lambda items: [False] * len(items), bool)
    result, _ = stream_with_verdicts(engine, "def f():", worker, k=2, params=SamplingParams(max_new_tokens=6),
                                     method="bass", drafter="ngram")
    assert result.stats.drafter == "ngram"
