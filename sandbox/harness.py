"""The child side: a template interpreter that forks one confined child per candidate, and the child's code.

The runner starts this file once per batch as a fresh interpreter (`python -I -S -B harness.py`, with a
scrubbed environment) and sends it jobs over a socket (see `serve`). The template never runs candidate
code; each candidate runs in a fork of it, so every candidate starts from the same pristine interpreter,
never from the caller's process, and the ~15 ms of interpreter start-up is paid once per batch instead of
once per candidate.

Results go to a pipe the runner opened (never stdout, which the candidate owns), one line per event (the
`repr` of a dict of literals), each carrying the run's random nonce; the runner ignores lines without it.
A test counts only when its "unit" line arrives, so a candidate that exits or dies early can never claim
a pass.

Events: start (layers in effect), load (the candidate's module ran, or why not), unit (one per test or
setup statement), done; then "exit" from the template when the child has ended. Standard library only,
and only modules that import fast; this file must not import the `sandbox` package.
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
import types


def _reporter(fd: int, nonce: str):
    write, getpid, dumps = os.write, os.getpid, repr  # bound now: the candidate may patch os and builtins
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


def _run_confined(job: dict, result_fd: int) -> None:
    report = _reporter(result_fd, job.pop("nonce"))
    # Exceeding RLIMIT_FSIZE then fails the write with EFBIG instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    layers = isolation.confine(os.getcwd(), uid=job["uid"], expose=job["expose"], rlimits=job["rlimits"],
                               disabled=set(job["disabled"]))
    sys.path.extend(job["site_paths"])  # -S skipped site's scan; the candidate may still import packages
    report(k="start", layers=layers)
    run(job, report)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: B036 - the candidate may have closed or replaced them
            continue
    report(k="done")
    if "uid" in layers:
        # Every other process of our private uid is the candidate's: end them here, which saves the
        # runner an extra process per candidate (it still sweeps when we do not get this far).
        os.kill(-1, signal.SIGKILL)


def _child(job: dict, out_fd: int, err_fd: int, result_fd: int) -> None:
    """In the fork: take the candidate's pipes, drop everything else of the template's, run. Never returns."""
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.dup2(result_fd, 3, inheritable=False)  # programs the candidate starts do not get the channel
        os.closerange(4, 1 << 20)  # the template's socket and the other candidates' channels
        os.chdir(job["workdir"])
        os.environ.clear()
        os.environ.update(job["env"])
        _run_confined(job, 3)
        os._exit(0)  # skip atexit hooks and non-daemon threads the candidate left running
    finally:
        os._exit(70)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def serve() -> None:
    """The template: wait for jobs on the socket at fd 0, fork a child for each, report how each ended.

    A request is an 8-byte length carrying the candidate's stdout, stderr and result pipes (SCM_RIGHTS),
    then the marshalled job; the reply is the child's pid. When a child ends, its exit code goes down its
    own result pipe with its nonce. End of input (the runner closed the socket or died) ends the template
    and, through PR_SET_PDEATHSIG, its children.
    """
    sock = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    isolation.die_with_parent()
    running: dict[int, tuple[int, int, str]] = {}  # pidfd -> (pid, result fd, nonce)
    while True:
        ready, _, _ = select.select([sock.fileno(), *running], [], [])
        for pidfd in (fd for fd in ready if fd in running):
            pid, result_fd, nonce = running.pop(pidfd)
            _, status = os.waitpid(pid, 0)
            exit_line = repr({"k": "exit", "code": os.waitstatus_to_exitcode(status), "n": nonce}) + "\n"
            with contextlib.suppress(OSError):  # the runner stopped listening
                os.write(result_fd, exit_line.encode())
            os.close(result_fd)
            os.close(pidfd)
        if sock.fileno() not in ready:
            continue
        try:
            header, fds, _, _ = socket.recv_fds(sock, 8, 3)
            header += _read_exactly(sock, 8 - len(header)) if header else b""
            if not header:
                raise EOFError
            job = marshal.loads(_read_exactly(sock, struct.unpack("Q", header)[0]))
        except EOFError:
            for pid, _, _ in running.values():
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            return
        out_fd, err_fd, result_fd = fds
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            sock.sendall(struct.pack("q", -exc.errno))
            continue
        if pid == 0:
            _child(job, out_fd, err_fd, result_fd)
        os.close(out_fd)
        os.close(err_fd)
        running[os.pidfd_open(pid)] = (pid, result_fd, job["nonce"])
        sock.sendall(struct.pack("q", pid))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import isolation

    del sys.path[0]
    serve()
