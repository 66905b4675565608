"""The child side: a template interpreter that forks, per candidate, a tests' process and a candidate's process.

The runner starts this file once per batch as a fresh interpreter (`python -I -S -B harness.py`, with a
scrubbed environment) and sends it jobs over a socket (see `serve`). The template never runs candidate
code; each job runs in a fork of it, so every candidate starts from the same pristine interpreter, never
from the caller's process, and the ~15 ms of interpreter start-up is paid once per batch instead of once
per candidate.

That fork is the **tests' process**. It confines itself, forks the **candidate's process**, and runs the
tests; every function of the candidate's module that the tests use is a proxy that calls into the
candidate's process and gets back plain data only (bridge.py, plain.py). The two run as different uids and
the tests' process is not dumpable, so the candidate can neither read nor write its memory, file
descriptors or signals; the result pipe is held by the tests' process alone, and the test source never
enters the candidate's process (it comes through its own file descriptor, read after the fork). Where the
kernel allows it, the candidate's process is the child of `_init`, PID 1 of a PID namespace of its own
with a fresh /proc: it sees neither the host's processes nor its tests' process, and everything it
starts dies with that init. The job itself arrives as a file the template passes on unread (forkserver.py).

Results go to that pipe, one line per event (the `repr` of a dict of literals), each carrying the run's
random nonce; the runner ignores lines without it. A test counts only when its "unit" line arrives, so a
candidate that exits or dies early can never claim a pass.

Events: start (layers in effect in both processes), load (the candidate's module ran, or why not), unit
(one per test or setup statement), gone (the candidate's process ended or broke its channel before the
end), done; then "exit" from the template when the tests' process has ended. Standard library only, and
only modules that import fast; this file must not import the `sandbox` package.
"""

import builtins
import contextlib
import gc
import marshal
import os
import select
import signal
import socket
import struct
import sys
import time
import types

_VIEW_HELD = False  # whether this template holds the batch's file-system view (set at start, see __main__)


def _reporter(fd: int, nonce: str):
    write, getpid, dumps = os.write, os.getpid, repr  # bound now: the test code may patch os and builtins
    pid = getpid()

    def report(**message: object) -> None:
        if getpid() != pid:  # a fork made by the test code reached harness code: its word does not count
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


def _entry_point(namespace: dict, name: str | None) -> tuple[str | None, str]:
    if name is not None:
        if callable(namespace.get(name)):
            return name, ""
        return None, f"the candidate defines no function {name!r}: the tests call it through check()"
    defined = [key for key, value in namespace.items()
               if isinstance(value, types.FunctionType) and value.__code__.co_filename == "candidate.py"]
    if len(defined) == 1:
        return defined[0], ""
    return None, (f"the candidate defines {len(defined)} functions: name the one check() tests "
                  "(entry_point / --entry-point)")


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: B036 - the candidate may have closed or replaced them
            continue


# ---- the candidate's process ---------------------------------------------------------------------------


def _load(job: dict) -> tuple[str | None, dict, dict[str, object] | None]:
    """Run the candidate's module: (entry point name, what the tests may use of it, failure or None)."""
    reserve = bytearray(1 << 20)  # freed on MemoryError so that reporting it still has room
    program = job["program"]
    namespace = {"__name__": "__candidate__" if job["has_tests"] else "__main__", "__builtins__": builtins,
                 "__file__": "candidate.py"}
    try:
        exec(compile(program, "candidate.py", "exec"), namespace)
    except BaseException as exc:  # noqa: B036 - SystemExit and KeyboardInterrupt are the candidate's too
        namespace.clear()
        del reserve
        gc.collect()
        return None, {}, _failure(exc, "candidate.py", dict(enumerate(program.splitlines(), start=1)))
    entry = None
    if job["needs_entry"]:
        entry, problem = _entry_point(namespace, job["entry_point"])
        if entry is None:
            return None, {}, {"file": "candidate.py", "line": None, "source": "", "message": problem, "memory": False}
    names = job["names"] + ([entry] if entry else [])
    return entry, {"namespace": namespace, "found": bridge.describe(namespace, names)}, None


def _candidate(job: dict, sock: socket.socket, layers: list[str]) -> None:
    """In the candidate's process, confined: say which layers hold, load the program, serve the calls."""
    bridge.send(sock, ("ready", layers))
    try:
        entry, loaded, failure = _load(job)
        if failure is None:
            bridge.send(sock, ("loaded", True, entry, loaded["found"]))
    except BaseException as exc:  # noqa: B036 - e.g. a module attribute that cannot be described
        failure = _failure(exc, "candidate.py", {})
    if failure is not None:
        _flush()
        bridge.send(sock, ("loaded", False, failure))
        bridge.serve(sock, {}, _flush)  # until the tests' process says "finish"
        return
    namespace = loaded["namespace"]
    functions = {name: namespace[name] for name, kind in loaded["found"].items() if kind == ("call",)}
    bridge.serve(sock, functions, _flush)


# ---- the tests' process --------------------------------------------------------------------------------


def _clean_failure(failure: object) -> dict[str, object]:
    """The candidate's own account of why it did not load, reduced to fields of the expected types."""
    failure = failure if type(failure) is dict else {}
    line = failure.get("line")
    return {"file": "candidate.py", "line": line if type(line) is int else None,
            "source": str(failure.get("source", ""))[:300], "message": str(failure.get("message", ""))[:500],
            "memory": failure.get("memory") is True}


def _gone(handle: "bridge.Candidate", exit_code, report, unit: tuple[int, int, str] | None) -> None:
    """The candidate's process ended or broke the channel: fail the current test, say how, stop."""
    code = exit_code()  # its exit follows the end of its channel closely: waited for, a little
    why = handle.gone or "closed its channel"
    if code is not None:
        why = f"exited with code {code}" if code >= 0 else f"was killed by {signal.Signals(-code).name}"
    if unit is not None:
        index, lineno, source = unit
        report(k="unit", i=index, ok=False, file="tests.py", line=lineno, source=source.strip()[:300],
               message=f"CandidateGone: the candidate's process {why} during this test"[:500], memory=False)
    report(k="gone", code=code, why=why)


def _unit_failure(exc: BaseException, left: dict[str, str], test_lines: dict[int, str]) -> dict[str, object]:
    failure = _failure(exc, "tests.py", test_lines)
    if isinstance(exc, NameError) and getattr(exc, "name", None) in left:
        name = exc.name
        failure["message"] = (f"SuiteNeedsObjects: the tests use {name!r}, a `{left[name]}` object of the "
                              "candidate's module; only plain data crosses to the tests' process")
        failure["suite"] = True
    return failure


def judge(job: dict, tests: dict, sock: socket.socket, exit_code, layers: list[str], report) -> None:
    """In the tests' process: wait for the candidate to load, then run every test unit in order, each
    call into the candidate crossing the boundary as plain data; report each unit as it ends."""
    reserve = bytearray(1 << 20)  # freed on MemoryError so that reporting it still has room
    handle = bridge.Candidate(sock)
    try:
        ready = handle.receive()
        if not (type(ready) is tuple and len(ready) == 2 and ready[0] == "ready" and type(ready[1]) is list):
            handle.gone = "did not start as expected"
            raise bridge.CandidateGone(handle.gone)
        # Those in effect in both processes; `pidns` is the candidate's alone (the tests' process stays outside).
        report(k="start", layers=[name for name in ready[1] if name in layers or name == "pidns"] + ["verdict"])
        loaded = handle.receive()
    except bridge.CandidateGone:
        return _gone(handle, exit_code, report, None)
    if type(loaded) is tuple and len(loaded) == 3 and loaded[:2] == ("loaded", False):
        report(k="load", ok=False, **_clean_failure(loaded[2]))
        with contextlib.suppress(bridge.CandidateGone):
            handle.finish()  # its output up to the error, flushed
        return report(k="done")
    if not (type(loaded) is tuple and len(loaded) == 4 and loaded[:2] == ("loaded", True)):
        handle.gone = "sent a malformed report of its loading"
        return _gone(handle, exit_code, report, None)
    _, _, entry, found = loaded
    tests_ns = {"__name__": "__tests__", "__builtins__": builtins}
    bound, left = handle.bind(found, job["names"])
    tests_ns.update(bound)
    if tests["candidate_param"] is not None:
        if type(entry) is not str or type(found) is not dict or found.get(entry) != ("call",):
            handle.gone = "sent a malformed report of its loading"
            return _gone(handle, exit_code, report, None)
        tests_ns[tests["candidate_param"]] = handle.proxy(entry)
    if tests["helpers"]:  # the problem's own helpers, over whatever the candidate's module defined
        try:
            exec(compile(tests["helpers"], "problem.py", "exec"), tests_ns)
        except BaseException as exc:  # noqa: B036 - a broken problem, reported, never a pass
            report(k="load", ok=False, **_failure(exc, "problem.py", dict(enumerate(tests["helpers"].splitlines(), 1))))
            with contextlib.suppress(bridge.CandidateGone):
                handle.finish()
            return report(k="done")
    report(k="load", ok=True)
    units = tests["units"]
    test_lines = {lineno + offset: line for source, lineno in units
                  for offset, line in enumerate(source.splitlines())}
    for index, (source, lineno) in enumerate(units):
        handle.violation = None
        failure = None
        try:
            exec(compile("\n" * (lineno - 1) + source, "tests.py", "exec"), tests_ns)
        except BaseException as exc:  # noqa: B036
            if isinstance(exc, MemoryError):
                reserve = None
                gc.collect()
            failure = _unit_failure(exc, left, test_lines)
        if handle.gone is not None:  # even when the test caught CandidateGone itself
            return _gone(handle, exit_code, report, (index, lineno, source))
        if handle.violation is not None:  # even when the test caught the exception
            line = handle.violation["line"]
            failure = {"file": "tests.py", "line": line, "source": test_lines.get(line, "").strip()[:300],
                       "message": handle.violation["message"][:500], "memory": False,
                       "suite": handle.violation["suite"]}
        report(k="unit", i=index, ok=failure is None, **(failure or {}))
    del reserve
    _flush()
    try:
        handle.finish()
    except bridge.CandidateGone:
        return _gone(handle, exit_code, report, None)
    report(k="done")


def _tests_process(job: dict, sock: socket.socket, shared: list[str], exit_code) -> None:
    os.chdir("/")  # the working directory belongs to the candidate's uid
    layers = isolation.restrict(shared, job["workdir"], uid=job["tests_uid"], blocked=job["fs"]["blocked"],
                                rlimits=job["rlimits"], disabled=set(job["disabled"]))
    isolation.hide_memory()
    sys.path.extend(job["site_paths"])
    tests = marshal.loads(forkserver.read_job(4))
    judge(job, tests, sock, exit_code, layers, _reporter(3, job["nonce"]))


def _candidate_process(job: dict, sock: socket.socket, shared: list[str]) -> None:
    """In the fork of the tests' process: keep only the channel, confine, run the candidate. Never returns."""
    try:
        os.dup2(sock.fileno(), 3, inheritable=False)  # replaces the result pipe: the candidate never holds it
        os.closerange(4, 1 << 20)  # the tests' file descriptor and the tests' end of the channel
        sock.detach()
        job.pop("nonce")
        layers = isolation.restrict(shared, os.getcwd(), uid=job["uid"], blocked=job["fs"]["blocked"],
                                    rlimits=job["rlimits"], disabled=set(job["disabled"]))
        sys.path.extend(job["site_paths"])  # -S skipped site's scan; the candidate may still import packages
        _candidate(job, socket.socket(fileno=3), layers)
        os._exit(0)  # skip atexit hooks and non-daemon threads the candidate left running
    finally:
        os._exit(70)


def _init(job: dict, sock: socket.socket, shared: list[str], status_fd: int) -> None:
    """PID 1 of the candidate's PID namespace: mount a fresh /proc (it shows this namespace only), fork
    the candidate's process, reap every orphan, and when the candidate's process ends send its exit code
    down `status_fd` and exit, which kills whatever is left in the namespace. Never returns."""
    try:
        isolation.hide_memory()
        fresh = mounts.fresh_proc()
        pid = os.fork()
        if pid == 0:
            os.close(status_fd)
            _candidate_process(job, sock, shared + ["pidns"] if fresh else shared)
        os.closerange(0, status_fd)  # the pipes and the channel: the candidate holds its own copies
        os.closerange(status_fd + 1, 1 << 20)
        while True:
            waited, status = os.wait()
            if waited == pid:
                os.write(status_fd, struct.pack("i", os.waitstatus_to_exitcode(status)))
                break
    finally:
        os._exit(0)


def _exit_code_reader(pid: int, status_fd: int | None):
    """How the tests' process learns the candidate's exit code, waiting a little for it: from its init's
    status pipe in a PID namespace, else by waiting for the candidate's process itself."""

    def exit_code() -> int | None:
        if status_fd is not None:
            if select.select([status_fd], [], [], 0.2)[0]:
                data = os.read(status_fd, 4)
                return struct.unpack("i", data)[0] if len(data) == 4 else None
            return None
        for _ in range(20):
            try:
                waited, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if waited:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.01)
        return None

    return exit_code


def _child(out_fd: int, err_fd: int, result_fd: int, tests_fd: int, job_fd: int) -> None:
    """In the fork: take the job's pipes, drop everything else of the template's, run. Never returns."""
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.dup2(result_fd, 3, inheritable=False)  # programs started later do not get the channel
        os.dup2(tests_fd, 4, inheritable=False)
        os.dup2(job_fd, 5, inheritable=False)
        os.closerange(6, 1 << 20)  # the template's socket and the other candidates' channels
        job = marshal.loads(forkserver.read_job(5))
        os.environ.clear()
        os.environ.update(job["env"])
        # Exceeding RLIMIT_FSIZE then fails the write with EFBIG instead of killing the process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        sys.stdout.reconfigure(line_buffering=True)
        sys.stderr.reconfigure(line_buffering=True)
        joined = isolation.join_cgroups(job["cgroups"])
        shared = isolation.enclose(job["workdir"], uid=job["uid"], fs=job["fs"], view_held=_VIEW_HELD,
                                   disabled=set(job["disabled"]))
        shared += joined
        pid_namespace = "pidns" not in job["disabled"] and isolation.new_pid_namespace()
        ours, theirs = socket.socketpair()
        status_r, status_w = os.pipe() if pid_namespace else (None, None)
        pid = os.fork()
        if pid == 0:
            ours.close()
            if status_w is None:
                _candidate_process(job, theirs, shared)
            os.close(status_r)
            _init(job, theirs, shared, status_w)
        theirs.close()
        if status_w is not None:
            os.close(status_w)
        _tests_process(job, ours, shared, _exit_code_reader(pid, status_r))
        _flush()
        os._exit(0)
    finally:
        os._exit(70)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bridge
    import forkserver
    import isolation
    import mounts

    del sys.path[0]
    setup = forkserver.read_setup()
    _VIEW_HELD = setup["view"] is not None and mounts.enter_view(setup["view"])
    forkserver.serve(_child, isolation.die_with_parent)
