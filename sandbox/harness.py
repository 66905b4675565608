"""The child: confine this fresh interpreter, load the candidate, run the test units, report each one.

Started by the runner as `python -I -B harness.py`; reads one JSON job from stdin, then stdin becomes
/dev/null. Results go to a pipe the runner opened (never stdout, which the candidate owns), one JSON line
per event, each carrying the run's random nonce; the runner ignores lines without it. A test counts only
when its "unit" line arrives, so a candidate that exits or dies early can never claim a pass.

Events: start (layers in effect), load (the candidate's module ran, or why not), unit (one per test or
setup statement), done. Standard library only: this file must not import the `sandbox` package.
"""

import builtins
import contextlib
import gc
import json
import os
import signal
import sys
import types


def _reporter(fd: int, nonce: str):
    write, getpid, dumps = os.write, os.getpid, json.dumps  # bound now: the candidate may patch os and json
    pid = getpid()

    def report(**message: object) -> None:
        if getpid() != pid:  # a fork of the candidate reached harness code: its word does not count
            return
        data = (dumps(dict(message, n=nonce)) + "\n").encode()
        while data:
            data = data[write(fd, data):]

    return report


def _failure(exc: BaseException, filename: str, lines: dict[int, str]) -> dict[str, object]:
    lineno = exc.lineno if isinstance(exc, SyntaxError) and exc.filename == filename else None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            lineno = tb.tb_lineno  # the deepest frame in our file: the assert, not the `for` above it
        tb = tb.tb_next
    text = str(exc)
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return {"file": filename, "line": lineno, "source": lines.get(lineno, "").strip()[:300], "message": message[:500],
            "memory": isinstance(exc, MemoryError)}


def _entry_point(namespace: dict, name: str | None) -> tuple[object, str]:
    if name is not None:
        if callable(namespace.get(name)):
            return namespace[name], ""
        return None, f"the candidate defines no function {name!r}: the tests call it through check()"
    defined = [v for v in namespace.values()
               if isinstance(v, types.FunctionType) and v.__code__.co_filename == "candidate.py"]
    if len(defined) == 1:
        return defined[0], ""
    return None, (f"the candidate defines {len(defined)} functions: name the one check() tests "
                  "(entry_point / --entry-point)")


def run(job: dict, report) -> None:
    """Load the candidate as a module, then run every test unit in order in a copy of its namespace."""
    reserve = bytearray(1 << 20)  # freed on MemoryError so that reporting it still has room
    program = job["program"]
    units = job["units"]
    namespace = {"__name__": "__candidate__" if units else "__main__", "__builtins__": builtins,
                 "__file__": "candidate.py"}
    program_lines = dict(enumerate(program.splitlines(), start=1))
    try:
        exec(compile(program, "candidate.py", "exec"), namespace)
    except BaseException as exc:  # noqa: B036 - SystemExit and KeyboardInterrupt are the candidate's too
        namespace.clear()
        del reserve
        gc.collect()
        report(k="load", ok=False, **_failure(exc, "candidate.py", program_lines))
        return
    tests_ns = dict(namespace, __name__="__tests__")
    if job["candidate_param"] is not None:
        function, problem = _entry_point(namespace, job["entry_point"])
        if function is None:
            report(k="load", ok=False, file="candidate.py", line=None, source="", message=problem, memory=False)
            return
        tests_ns[job["candidate_param"]] = function
    report(k="load", ok=True)
    test_lines = {lineno + offset: line for source, lineno, _ in units
                  for offset, line in enumerate(source.splitlines())}
    for index, (source, lineno, _) in enumerate(units):
        try:
            exec(compile("\n" * (lineno - 1) + source, "tests.py", "exec"), tests_ns)
        except BaseException as exc:  # noqa: B036
            if isinstance(exc, MemoryError):
                reserve = None
                gc.collect()
            report(k="unit", i=index, ok=False, **_failure(exc, "tests.py", test_lines))
        else:
            report(k="unit", i=index, ok=True)


def main() -> None:
    """Read the job, confine, run, report; exit without running the candidate's atexit hooks."""
    job = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    result_fd = job.pop("result_fd")
    os.set_inheritable(result_fd, False)  # programs the candidate starts do not get the channel
    report = _reporter(result_fd, job.pop("nonce"))
    # Exceeding RLIMIT_FSIZE then fails the write with EFBIG instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import isolation

    del sys.path[0]
    layers = isolation.confine(os.getcwd(), uid=job["uid"], expose=job["expose"], rlimits=job["rlimits"],
                               disabled=set(job["disabled"]))
    report(k="start", layers=layers)
    run(job, report)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):  # the candidate may have closed or replaced them
            stream.flush()
    report(k="done")
    os._exit(0)  # skip atexit hooks and non-daemon threads the candidate left running


if __name__ == "__main__":
    main()
