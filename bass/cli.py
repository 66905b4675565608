"""Command line: a thin layer that maps flags onto the config dataclasses.

    python -m bass generate --prompt TEXT | --prompt-file F | --prompts-file F.jsonl  [-k 8] [--method bass] ...
    python -m bass generate --prompt-file F --tests-file T [--stop-at-first-pass]   (test as they finish)
    python -m bass eval humaneval --k 8 --budget-s 60 --method bass [--limit 20] [--stop-at-first-pass] [--json]
    python -m bass eval humaneval --k 8 --budgets 0.25,0.5,1.0 --methods bass,regular,single [--out F.json]
    python -m bass compare --humaneval 0[,35,...] -k 8 | --prompt-file P [--tests-file T] [--repeats 3] [--out F]
                                            (one sentence, one table; --natural-stops lets stop strings end them)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bass.config import (
    BACKENDS,
    CANDIDATE_TEMPERATURE,
    CANDIDATE_TOP_P,
    DRAFT_LENGTH_POLICIES,
    DRAFTERS,
    METHODS,
    DraftLengthConfig,
    EngineConfig,
    SamplingParams,
    check_draft_file,
    check_k,
)
from bass.eval.compare import SEEDED_DRAFT_LENGTH


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """Flags shared by every command that builds an engine."""
    p.add_argument("--target", default="embedded", help="'embedded', 'gemma3-270m', a folder, a .gguf or a hub id")
    p.add_argument("--draft", default="auto", help="draft for --drafter model: 'auto' (the embedded target's "
                   "trained draft), a model spec, a trained draft file (.safetensors) or 'none'")
    p.add_argument("--drafter", default="auto", choices=("auto", *DRAFTERS),
                   help="auto: the trained draft where one ships for the target, else ngram")
    p.add_argument("--backend", default="auto", choices=("auto", *BACKENDS),
                   help="attention backend; auto: ragged (our Triton kernel) on CUDA, torch elsewhere")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--draft-policy", default="auto", choices=DRAFT_LENGTH_POLICIES,
                   help="auto: each round the length of most tokens/s for the rows that run, from the cost table "
                   "measured at load (GPU), else --draft-l0; fixed: every round drafts --draft-l0 (0: no "
                   "speculation); heuristic: the paper's rule, from --draft-l0 (its 7)")
    p.add_argument("--draft-l0", type=int, default=3, help="fixed (or initial) draft length")
    p.add_argument("--layer-skip-layers", type=int, default=None)
    p.add_argument("--draft-temperature", type=float, default=None, help="the draft samples at this multiple of "
                   "--temperature (default: the draft file's own, 0.7 for the shipped draft; exact for any value)")


def add_sampling_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-k", "--k", type=int, default=8, help="samples per prompt")
    p.add_argument("--method", default="bass", choices=METHODS)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=CANDIDATE_TEMPERATURE,
                   help=f"sampling temperature (default {CANDIDATE_TEMPERATURE}, as in the app); 0 decodes greedily")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=CANDIDATE_TOP_P, help=f"nucleus mass (default {CANDIDATE_TOP_P}); 1 "
                   "keeps the whole distribution")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=None, help="a stop string (repeatable)")
    p.add_argument("--humaneval-stops", action="store_true", help="stop at the next top-level statement")
    p.add_argument("--chat", action="store_true", help="wrap prompts in the model's chat template")


def engine_config(a: argparse.Namespace) -> EngineConfig:
    draft = None if a.draft == "none" else a.draft
    check_draft_file(draft, "--draft")
    return EngineConfig(target=a.target, draft=draft, drafter=a.drafter, backend=a.backend, device=a.device,
                        dtype=a.dtype, layer_skip_layers=a.layer_skip_layers, draft_temperature=a.draft_temperature,
                        draft_length=DraftLengthConfig(policy=a.draft_policy, l0=a.draft_l0))


def sampling_params(a: argparse.Namespace, **overrides) -> SamplingParams:
    from bass.config import HUMANEVAL_STOPS

    stop = tuple(a.stop or ()) + (HUMANEVAL_STOPS if a.humaneval_stops else ())
    fields = dict(temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, max_new_tokens=a.max_new_tokens,
                  seed=a.seed, stop=stop)
    fields.update(overrides)
    return SamplingParams(**fields)


def identical_candidates_note(k: int, params: SamplingParams) -> str | None:
    """What to tell a user who asked for k > 1 greedy samples: they are all the same text (greedy decoding is
    deterministic), k times the work for one answer. A note, not an error: greedy BASS against greedy regular
    decoding, token for token, is how losslessness is checked."""
    if params.greedy and k > 1:
        return (f"note: --temperature 0 decodes greedily, so the {k} candidates of each prompt will be identical; "
                f"use -k 1, or a temperature above 0 (default {CANDIDATE_TEMPERATURE}) for {k} different ones")
    return None


def read_text_file(path: str, what: str) -> str:
    """A text file's contents, with an error that says what to do when it is missing, unreadable or not UTF-8."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such {what}: check the path (relative paths start in {Path.cwd()})") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory: give the {what} itself") from None
    except PermissionError:
        raise ValueError(f"{path}: the {what} is not readable by this user: check its permissions") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: the {what} must be UTF-8 text (byte {err.object[err.start]:#04x} at offset "
                         f"{err.start} is not); save it as UTF-8 and try again") from None


def read_tests(path: str) -> str:
    """The tests file's text, refused before any model loads when no candidate could pass it, as the app refuses
    such tests: it does not parse, or it holds no assert that can fail (`sandbox.split_tests`)."""
    tests = read_text_file(path, "tests file")
    from sandbox import split_tests

    try:
        split_tests(tests)
    except ValueError as err:
        raise ValueError(f"--tests-file {path}: {err} (nothing was generated)") from None
    return tests


def read_prompts(a: argparse.Namespace) -> list[str]:
    """The prompts of --prompt, --prompt-file or --prompts-file, refused before any model loads (seconds, not a
    minute) if one is empty or there are none."""
    if a.prompt is not None:
        if not a.prompt.strip():
            raise ValueError("--prompt is empty: give a coding prompt, e.g. --prompt 'def fib(n):'")
        prompts = [a.prompt]
    elif a.prompt_file:
        prompts = [read_text_file(a.prompt_file, "prompt file")]
    else:
        prompts = []
        for n, line in enumerate(read_text_file(a.prompts_file, "prompts file").splitlines(), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{a.prompts_file}:{n}: not JSON ({err.msg} at column {err.colno}): each line "
                                     "must be a JSON object with a \"prompt\" string") from None
                if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                    raise ValueError(f"{a.prompts_file}:{n}: each line must be a JSON object with a \"prompt\" string")
                prompts.append(row["prompt"])
        if not prompts:
            raise ValueError(f"{a.prompts_file} holds no prompt: write one {{\"prompt\": ...}} object per line")
    for i, p in enumerate(prompts):
        if not p.strip():
            raise ValueError(f"prompt {i} is empty: the file must hold a coding prompt")
    return prompts


def print_table(result) -> None:
    for c in result.candidates:
        print(f"--- prompt {c.prompt_index} sample {c.sample_index} ({c.finish_reason}) ---")
        print(c.text)
    print()
    print(f"{'seq':>4} {'tokens':>6} {'rounds':>6} {'accept':>7} {'tok/round':>9} {'ms/token':>9}  finish")
    for i, c in enumerate(result.candidates):
        s = c.stats
        print(f"{i:>4} {s.tokens:>6} {s.rounds:>6} {s.acceptance_rate:>7.2f} {s.tokens_per_round:>9.2f} "
              f"{s.ms_per_token:>9.1f}  {c.finish_reason}")
    b = result.stats
    print(f"\n{b.method} ({b.drafter or 'no draft'}, {b.backend}): prefill {b.prefill_s:.2f} s, decode "
          f"{b.decode_s:.2f} s, {b.throughput_tok_s:.1f} tok/s, mean {b.mean_ms_per_token:.1f} ms/token/seq, "
          f"acceptance {b.acceptance_rate:.2f}, {b.tokens_per_round:.2f} tokens/round")


def cmd_generate(a: argparse.Namespace) -> int:
    from bass.engine import Engine

    prompts = read_prompts(a)
    check_k(a.k, "-k")  # before any model loads (a minute for the embedded target on a CPU)
    tests = read_tests(a.tests_file) if a.tests_file else None
    if a.stop_at_first_pass and tests is None:
        raise ValueError("--stop-at-first-pass needs --tests-file: the tests decide what passes")
    if tests is not None and (len(prompts) != 1 or a.chat):
        raise ValueError("--tests-file tests completions of one code prompt: use --prompt or --prompt-file, "
                         "without --chat")
    params = sampling_params(a)
    if note := identical_candidates_note(a.k, params):
        print(note, file=sys.stderr)
    engine = Engine(engine_config(a), progress=None if a.json else _progress)
    if tests is None:
        result = engine.generate(prompts, k=a.k, params=params, method=a.method, chat=a.chat)
        if a.json:
            print(json.dumps(result.to_dict()))
        else:
            print_table(result)
        return 0
    result, passed = _generate_tested(engine, prompts[0], tests, a, params)
    if a.json:
        print(json.dumps({**result.to_dict(), "passed": passed, "time_to_first_pass_s": _ttfp(result, passed)}))
    else:
        print_table(result)
        from bass.metrics import format_seconds_or_none

        shown = ["untested" if p is None else "PASS" if p else "FAIL" for p in passed]
        print(f"tests: {' '.join(shown)}; time to first pass {format_seconds_or_none(_ttfp(result, passed))}")
    return 0


def _generate_tested(engine, prompt: str, tests: str, a: argparse.Namespace, params) -> tuple:
    """Generate with streaming verdicts: each completion runs against `tests` as soon as it finishes."""
    from bass.eval.humaneval import stream_with_verdicts
    from bass.eval.verdicts import VerdictWorker
    from sandbox import shared_service

    sandbox = shared_service()  # in its own process: off the engine's host thread

    def check(items) -> list[bool]:
        return [o.all_passed for o in sandbox.run_candidates([prompt + text for _, text in items], tests)]

    worker = VerdictWorker(check, bool, stop_at_first_pass=a.stop_at_first_pass)
    result, verdicts = stream_with_verdicts(engine, prompt, worker, k=a.k, params=params, method=a.method)
    return result, [verdicts[i].passed if i in verdicts else None for i in range(len(result.candidates))]


def _ttfp(result, passed) -> float | None:
    from bass.metrics import time_to_first_pass

    return time_to_first_pass(result.stats.prefill_s, [c.finish_time_or_none for c in result.candidates], passed)


def cmd_eval(a: argparse.Namespace) -> int:
    from bass.eval.humaneval import format_report, run_humaneval

    if a.budgets is None and a.budget_s is None:  # before loading any model, in the flags' own words
        raise ValueError("give --budget-s SECONDS, or --budgets 0.25,0.5,1.0 (one run at the largest, the "
                         "others derived from finish times)")
    if a.budget_s is not None and a.budget_s <= 0:
        raise ValueError(f"--budget-s must be > 0 seconds per problem; got {a.budget_s:g}")
    if a.limit is not None and a.limit < 1:
        raise ValueError(f"--limit must be at least 1 problem (leave it out for all 164); got {a.limit}")
    if a.out:
        check_out(a.out)
    check_k(a.k, "-k")
    budgets = None
    if a.budgets is not None:
        from bass.eval.budgets import parse_budgets

        budgets = parse_budgets(a.budgets)
        if a.budget_s is not None and a.budget_s != budgets[-1]:
            raise ValueError(f"give --budgets or --budget-s, not both: --budgets {a.budgets} runs each problem at "
                             f"its largest ({budgets[-1]:g} s), not at --budget-s {a.budget_s:g}")
    methods = [m.strip() for m in a.methods.split(",")] if a.methods else [a.method]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise ValueError(f"--methods takes a comma-separated subset of {','.join(METHODS)}; got {a.methods!r}")
    if note := identical_candidates_note(a.k, sampling_params(a)):
        print(note, file=sys.stderr)
    import time

    from bass.engine import Engine
    from bass.runtime.device import device_line

    cfg = engine_config(a)
    engine = Engine(cfg, progress=None if a.json else _progress)  # one load serves every method
    reports, t0 = {}, time.perf_counter()
    for m in methods:
        reports[m] = run_humaneval(cfg, k=a.k, budget_s=a.budget_s, budgets=budgets,
                                   method=m, limit=a.limit, params=sampling_params(a), engine=engine, warmup=True,
                                   log=None if a.json else _progress_line, stop_at_first_pass=a.stop_at_first_pass)
    if a.methods is None and budgets is None:  # one method, one budget: its report alone
        report = reports[a.method]
        _emit(a, report, lambda: format_report(report))
        return 0
    out = {"budgets": list(budgets or (a.budget_s,)), "methods": reports, "device": device_line(engine.device),
           "seconds": time.perf_counter() - t0}

    def text() -> str:
        from bass.eval.budgets import format_budget_table

        lines = [format_report(r) for r in reports.values()]
        if budgets:
            lines.append(format_budget_table(reports, budgets))
        return "\n".join(lines + [f"{out['device']}; {out['seconds']:.0f} s"])

    _emit(a, out, text)
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    """The same request under each method, one after another: one sentence, one table (`bass.eval.compare`)."""
    from bass.eval.compare import CompareRequest, check_repeats, run_comparison
    from bass.eval.compare_report import NOTE, comparison_dict, format_table, table_rows

    methods = tuple(m.strip() for m in a.methods.split(","))
    check_repeats(a.repeats, "--repeats")
    if a.out:
        check_out(a.out)
    tasks = _compare_tasks(a)
    params = sampling_params(a, time_budget_s=a.budget_s)
    if note := identical_candidates_note(a.k, params):
        print(note, file=sys.stderr)
    from bass.engine import Engine
    from bass.runtime.device import device_line

    engine = Engine(engine_config(a), progress=None if a.json else _progress)
    reports, texts = [], []
    for number, (prompt, check) in tasks:
        req = CompareRequest(prompt, a.k, params, methods, chat=a.chat,
                             draft_length=DraftLengthConfig(policy=a.draft_policy, l0=a.draft_l0),
                             equal_work=not a.natural_stops, repeats=a.repeats, warm_up=a.warmup)
        cmp = run_comparison(engine, req, check, log=None if a.json else _progress_line)
        report = {**comparison_dict(cmp), "device": device_line(engine.device),
                  "settings": {"k": a.k, "methods": list(methods), "seed": params.seed, "humaneval": number,
                               "max_new_tokens": params.max_new_tokens, "stop": list(params.stop),
                               "time_budget_s": params.time_budget_s, "draft_policy": a.draft_policy,
                               "draft_l0": a.draft_l0, "equal_work": cmp.equal_work, "repeats": cmp.repeats,
                               "warm_up": a.warmup}}
        reports.append(report)
        texts.append(_compare_text(report, cmp, format_table(table_rows(cmp))))
    texts.append("What these numbers mean:\n" + "\n".join(f"  - {line}" for line in NOTE) + "\n" + reports[0]["device"])
    _emit(a, reports[0] if len(reports) == 1 else {"comparisons": reports}, lambda: "\n".join(texts))
    return 0 if all(r["runs"] for r in reports) else 1


def _compare_text(report: dict, cmp, table: str) -> str:
    """One comparison's sentence, table and notes, as the CLI prints it."""
    head = "" if report["settings"]["humaneval"] is None else f"HumanEval/{report['settings']['humaneval']}: "
    lines = [f"\n{head}{report['sentence']}\n", table, ""]
    lines += [f"{method} failed: {why}" for method, why in cmp.failures.items()]
    if cmp.captures:
        lines.append(f"note: {cmp.captures} CUDA graph capture(s) happened inside the timed runs, and their "
                     "wall times include them")
    return "\n".join(lines)


def _problem_numbers(text: str) -> list[int]:
    """--humaneval's problem numbers: 'N' or 'N,N,...'."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--humaneval takes problem numbers such as 0 or 0,35,90; got {text!r}") \
            from None


def _compare_tasks(a: argparse.Namespace) -> list[tuple[int | None, tuple]]:
    """(problem number or None, (prompt, tester)) of each comparison, checked before any model loads."""
    if a.humaneval is None:
        return [(None, _compare_task(a, None))]
    return [(n, _compare_task(a, n)) for n in a.humaneval]


def _compare_task(a: argparse.Namespace, number: int | None) -> tuple:
    """The prompt and the tester of `compare` (None: no tests) of HumanEval problem `number`, or of the prompt
    flags where it is None."""
    check_k(a.k, "-k")
    if a.budget_s is not None and a.budget_s <= 0:
        raise ValueError(f"--budget-s must be > 0 seconds per method (leave it out for none); got {a.budget_s:g}")
    if number is not None:
        from sandbox import load_humaneval, shared_service

        problems = load_humaneval()
        if not 0 <= number < len(problems):
            raise ValueError(f"--humaneval takes a problem number from 0 to {len(problems) - 1}; got {number}")
        if a.tests_file or a.chat:
            raise ValueError("--humaneval brings its own tests and completes code: leave out --tests-file and --chat")
        prob = problems[number]
        a.humaneval_stops = True

        def check_problem(items) -> list[bool]:
            return [o.all_passed for o in shared_service().run_humaneval([prob] * len(items), [t for _, t in items])]

        return prob.prompt, check_problem
    prompt = read_prompts(a)[0]
    if not a.tests_file:
        return prompt, None
    if a.chat:
        raise ValueError("--tests-file tests completions of a code prompt: leave out --chat")
    tests = read_tests(a.tests_file)
    from sandbox import shared_service

    def check_tests(items) -> list[bool]:
        return [o.all_passed for o in shared_service().run_candidates([prompt + t for _, t in items], tests)]

    return prompt, check_tests


def check_out(path: str) -> None:
    """Refuse an --out the report could not be written to, before a run of minutes whose report it would lose."""
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"--out {path} is a directory: give a file name, e.g. {out / 'report.json'}")
    blocking = next((q for q in out.parents if q.exists() and not q.is_dir()), None)
    if blocking is not None:
        raise ValueError(f"--out {path}: {blocking} is a file, not a folder: choose another path")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out {path}: its folder cannot be made ({err.strerror}): choose another path") from None
    if not os.access(out.parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise ValueError(f"--out {path} is not writable by this user: choose another path")


def _emit(a: argparse.Namespace, report: dict, text) -> None:
    """Print the report (JSON with --json, else a table) and write its JSON to --out when given."""
    if a.out:  # its folder made by check_out, before the run
        Path(a.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report) if a.json else text())


def _progress(msg: str, frac: float | None) -> None:
    if frac is None:  # a stage that cannot tell how far it is
        print(f"{msg}…", file=sys.stderr, flush=True)
        return
    print(f"\r{msg}: {100 * frac:5.1f}%", end="\n" if frac >= 1 else "", file=sys.stderr, flush=True)


def _progress_line(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m bass", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = root.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate k candidates per prompt")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one prompt, given inline (quote it; a multi-line prompt reads better from "
                     "--prompt-file)")
    src.add_argument("--prompt-file", help="a text file holding one prompt")
    src.add_argument("--prompts-file", help="a .jsonl file, one {\"prompt\": ...} per line")
    add_engine_flags(g)
    add_sampling_flags(g)
    g.add_argument("--tests-file", default=None,
                   help="tests (check(candidate) or asserts) each completion runs against as soon as it finishes")
    g.add_argument("--stop-at-first-pass", action="store_true",
                   help="cancel the other sequences once one passes the tests (needs --tests-file)")
    g.add_argument("--json", action="store_true", help="print exactly one JSON object")
    g.set_defaults(func=cmd_generate)

    e = sub.add_parser("eval", help="HumanEval within a time budget (Pass@First, Pass@All, pass@k)")
    e.add_argument("suite", choices=["humaneval"])
    add_engine_flags(e)
    add_sampling_flags(e)
    e.add_argument("--budget-s", type=float, default=None, help="wall-clock budget per problem, seconds "
                   "(prefill included)")
    e.add_argument("--budgets", default=None, help="comma-separated budgets, e.g. 0.25,0.5,1.0: each problem runs "
                   "once at the largest; Pass@First / Pass@All / time to first pass at every budget")
    e.add_argument("--methods", default=None, help="comma-separated methods in one run (one model load), e.g. "
                   "bass,regular,single; replaces --method")
    e.add_argument("--out", default=None, help="also write the JSON report to this file")
    e.add_argument("--limit", type=int, default=None, help="only the first N problems")
    e.add_argument("--stop-at-first-pass", action="store_true",
                   help="per problem, cancel the other sequences once one passes (the race Pass@First measures)")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_eval, humaneval_stops=True)

    c = sub.add_parser("compare", help="the same prompt, k, seed and token limit under each method, one after "
                       "another: one sentence and one table")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one prompt, given inline")
    src.add_argument("--prompt-file", help="a text file holding one prompt")
    src.add_argument("--humaneval", type=_problem_numbers, metavar="N[,N...]", help="HumanEval problem N (0-163): its "
                     "prompt, tests and stop strings; several, comma-separated: one comparison each, one model load")
    add_engine_flags(c)
    add_sampling_flags(c)
    c.add_argument("--tests-file", default=None, help="tests each completion runs against as soon as it finishes")
    c.add_argument("--methods", default="bass,regular,single", help="comma-separated methods, run in this order")
    c.add_argument("--budget-s", type=float, default=None, help="a time budget per method, seconds (default none: "
                   "every method writes all its candidates; a method cut by it is marked, never compared)")
    c.add_argument("--natural-stops", action="store_true", help="let end of text and stop strings end each "
                   "candidate (lengths then differ per method: the speed-up is in tokens per second); by default "
                   "every candidate runs to --max-new-tokens and is cut at its first stop afterwards")
    c.add_argument("--repeats", type=int, default=None, help="timed runs of each method, the order alternating; the "
                   "table shows the median and the spread (default 3 on a GPU, 1 on a CPU)")
    c.add_argument("--out", default=None, help="also write the JSON report to this file")
    c.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the untimed run of each method "
                   "first (which keeps one-time costs, such as CUDA graph capture, off every method's clock)")
    c.add_argument("--json", action="store_true", help="print exactly one JSON object")
    # a seed reproduces the candidates only with a fixed draft length (`bass.eval.compare.SEEDED_DRAFT_LENGTH`)
    c.set_defaults(func=cmd_compare, draft_policy=SEEDED_DRAFT_LENGTH.policy, draft_l0=SEEDED_DRAFT_LENGTH.l0,
                   prompts_file=None)
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
