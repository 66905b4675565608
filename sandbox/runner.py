"""Run candidates in a bounded pool of sandboxed child interpreters and judge what they report.

One thread per running candidate drives its child: it has the batch's template interpreter fork a child
in a new session with a scrubbed environment and an empty temporary directory (the child is the tests'
process; it forks the candidate's, see harness.py), drains stdout/stderr (kept up to a cap, the rest read
and dropped so the child never blocks) and the result pipe, and at the end, whatever happened, kills the
whole process group and every process of the candidate's private uid, then removes the directory.
"""

from __future__ import annotations

import ast
import contextlib
import marshal
import math
import os
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from sandbox.cleanup import remove_tree
from sandbox.config import SandboxConfig
from sandbox.isolation import is_world_traversable
from sandbox.outcome import Outcome, Status, TestFailure
from sandbox.splitter import TestPlan, defined_names, split_tests
from sandbox.template import HARNESS, PYTHON, TEMPLATE_ENV, Template

_RESULT_CAP = 4 << 20  # bytes of result messages kept; only a candidate spamming the channel gets near it
_EXIT_GRACE_S = 0.3  # after the child exits, how long grandchildren may hold the pipes open
_KILL = shutil.which("kill")
_SETPRIV = shutil.which("setpriv")  # util-linux: drops to a uid itself, so the caller need not (see _kill_everything)


@dataclass(frozen=True)
class Job:
    """One program to run: its source, its tests (None: none) and the function `check` receives.

    `helpers` is trusted source that belongs to the problem, not to the answer (HumanEval: the prompt's
    own helper functions, such as `encode_cyclic`): it runs in the tests' process before the tests, and
    the names it defines are never taken from the candidate's module, whatever the candidate redefines.
    """

    program: str
    tests: str | None = None
    entry_point: str | None = None
    helpers: str | None = None


@dataclass
class _Run:
    messages: list[dict] = field(default_factory=list)
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    dropped: dict[str, int] = field(default_factory=lambda: {"stdout": 0, "stderr": 0})
    exit_code: int | None = None  # of the tests' process, as reported by the template: negative for a signal
    gone: str | None = None  # how the candidate's process ended or broke its channel before the end
    candidate_code: int | None = None  # its exit code then, when the tests' process saw it
    timed_out: bool = False
    done: bool = False


_uids_in_use: set[int] = set()
_uids_lock = threading.Lock()


def _allocate_uid() -> int:
    # A uid no account uses, so that RLIMIT_NPROC and `kill -1` cover exactly this candidate's processes.
    # Random across runner processes, checked against this one's live candidates.
    with _uids_lock:
        while True:
            uid = 2_000_000_000 + secrets.randbelow(100_000_000)
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid


def _release_uid(uid: int | None) -> None:
    with _uids_lock:
        _uids_in_use.discard(uid)


def _scrubbed_env(workdir: str) -> dict[str, str]:
    # Built from constants only: nothing of the caller's environment (tokens, keys) reaches the candidate.
    # MALLOC_ARENA_MAX keeps glibc from reserving 64 MB of address space per thread.
    return dict(TEMPLATE_ENV, HOME=workdir, TMPDIR=workdir)


def _runtime_paths(workdir: str) -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(PYTHON), str(HARNESS.parent), workdir}
    return sorted({os.path.realpath(p) for p in paths if not is_world_traversable(os.path.realpath(p))})


def _rlimits(config: SandboxConfig) -> dict[str, int]:
    return {"RLIMIT_CPU": math.ceil(config.timeout_s) + 1, "RLIMIT_AS": config.memory_mb << 20,
            "RLIMIT_NPROC": config.max_processes, "RLIMIT_FSIZE": config.max_file_mb << 20,
            "RLIMIT_NOFILE": config.max_open_files, "RLIMIT_CORE": 0}


def _kill_everything(pid: int, uid: int | None) -> None:
    for kill in (os.killpg, os.kill):  # the group, and the child itself in case it had not called setsid yet
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)
    if uid is not None:
        # A grandchild may have left the process group (setsid); as its uid, `kill -1` reaches every process
        # of that uid in one pass of the kernel, which a fork loop cannot outrun.
        command = [_KILL, "-KILL", "--", "-1"] if _KILL else [PYTHON, "-I", "-S", "-c", "import os; os.kill(-1, 9)"]
        quiet = dict(env={}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     check=False)
        if _SETPRIV and _KILL:
            # setpriv changes uid in the exec'd program: asked of subprocess (user=...), CPython 3.11 must fork()
            # the caller rather than vfork() it, which copies its page tables: with 6 GB resident (a model
            # loaded beside the sandbox) HumanEval's 164 canonical solutions took 33 s so and 3.1 through setpriv
            subprocess.run([_SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *command], **quiet)
        else:
            subprocess.run(command, user=uid, group=uid, extra_groups=[], **quiet)


def _collect(out_fd: int, err_fd: int, result_fd: int, nonce: str, deadline: float, config: SandboxConfig,
             stop: threading.Event) -> _Run:
    run = _Run()
    names = {out_fd: "stdout", err_fd: "stderr", result_fd: "result"}
    pending = bytearray()
    result_bytes = 0

    def take(fd: int) -> int | None:
        """Read once from `fd`: bytes read, 0 at end of file, None when nothing is there yet."""
        nonlocal pending, result_bytes
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return None
        if names[fd] == "result":
            result_bytes += len(chunk)
            if result_bytes <= _RESULT_CAP:
                *lines, rest = (pending + chunk).split(b"\n")
                pending = bytearray(rest)
                for line in lines:
                    _accept(run, line, nonce)
        else:
            kept = getattr(run, names[fd])
            room = max(0, config.max_output_bytes - len(kept))
            kept += chunk[:room]
            run.dropped[names[fd]] += max(0, len(chunk) - room)
        return len(chunk)

    selector = selectors.DefaultSelector()
    for fd in names:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    exited_at = None
    while selector.get_map() and not run.done:
        now = time.monotonic()
        if now >= deadline:
            run.timed_out = True
            break
        if stop.is_set():  # the batch was interrupted (Ctrl-C): kill and clean up now
            break
        if exited_at is None and run.exit_code is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > _EXIT_GRACE_S:
            break
        for key, _ in selector.select(timeout=min(0.05, deadline - now)):
            if take(key.fd) == 0:
                selector.unregister(key.fd)
    selector.close()
    # The child flushed its output before reporting "done", so the rest of it sits in the pipes now.
    # Bounded: a grandchild may still be flooding them.
    for fd in (out_fd, err_fd):
        for _ in range(16):
            if not take(fd):
                break
    return run


def _accept(run: _Run, line: bytes, nonce: str) -> None:
    # literal_eval, not eval: the candidate can write to this pipe too, and must not run code here.
    try:
        message = ast.literal_eval(line.decode("utf-8"))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        return
    if isinstance(message, dict) and message.get("n") == nonce:
        run.messages.append(message)
        run.done = run.done or message.get("k") == "done"
        if message.get("k") == "exit" and isinstance(message.get("code"), int):
            run.exit_code = message["code"]
        if message.get("k") == "gone":
            run.gone = str(message.get("why"))
            run.candidate_code = message["code"] if isinstance(message.get("code"), int) else None


def _site_paths() -> list[str]:
    return [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]


def _memory_file(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    written = 0
    while written < len(data):
        written += os.write(fd, data[written:])
    return fd


def _execute(template: Template, job: Job, plan: TestPlan, config: SandboxConfig, workdir: str,
             uids: tuple[int | None, int | None], stop: threading.Event) -> _Run:
    nonce = secrets.token_hex(16)
    candidate_uid, tests_uid = uids
    payload = {"nonce": nonce, "program": job.program, "entry_point": job.entry_point, "workdir": workdir,
               "has_tests": bool(plan.units), "needs_entry": plan.candidate_param is not None,
               "names": list(plan.names), "uid": candidate_uid, "tests_uid": tests_uid,
               "expose": _runtime_paths(workdir) if candidate_uid is not None else [], "site_paths": _site_paths(),
               "env": _scrubbed_env(workdir), "rlimits": _rlimits(config), "disabled": sorted(config.disabled_layers),
               "cgroups": []}
    # The job and the tests travel as files: the template passes them on unread (so its memory, which
    # every later fork inherits, never holds a program), and only the tests' process reads the tests
    # (after forking the candidate's), so the test source is never in the candidate's memory.
    tests = marshal.dumps({"units": [(u.source, u.lineno) for u in plan.units],
                           "candidate_param": plan.candidate_param, "helpers": job.helpers or ""})
    files = [_memory_file("tests", tests), _memory_file("job", marshal.dumps(payload))]
    pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, results
    deadline = time.monotonic() + config.timeout_s
    try:
        pid = template.spawn(nonce, *(w for _, w in pipes), *files)
    except BaseException:
        for r, _ in pipes:
            os.close(r)
        raise
    finally:
        for fd in [w for _, w in pipes] + files:
            os.close(fd)
    run = _Run()
    try:
        run = _collect(*(r for r, _ in pipes), nonce, deadline, config, stop)
    finally:
        # Always sweep the uid, even after "done": the child's own sweep can race a grandchild that is
        # forking in its own session at that moment (seen: one survived and slept on as an orphan).
        # The tests' uid needs no sweep: only our own test code runs as it, inside the process group.
        _kill_everything(pid, candidate_uid)
        for r, _ in pipes:
            os.close(r)
    return run


def _text(data: bytearray, dropped: int) -> str:
    text = data.decode("utf-8", errors="replace")
    return text + f"\n[... {dropped} more bytes dropped]" if dropped else text


def _isolation(layers: list[str] | None) -> str:
    if layers is None:
        return "unknown(the harness did not start)"
    # `layers` are those in effect in both processes, then "verdict": the tests ran in their own process.
    network = "netns" in layers or "seccomp-net" in layers
    filesystem = "mountns-ro" in layers or "landlock-ro" in layers
    if network and filesystem and "uid" in layers and "pidns" in layers:
        level = "strict"
    else:
        level = "partial" if network or filesystem else "minimal"
    return f"{level}({'+'.join(layers)})"


def _judge(index: int, run: _Run, plan: TestPlan, wall_s: float) -> Outcome:
    events: dict[str, list[dict]] = {}
    for message in run.messages:
        events.setdefault(message.get("k", ""), []).append(message)
    layers = events["start"][0].get("layers") if "start" in events else None
    load = events.get("load", [{}])[0]
    units = {m["i"]: m for m in events.get("unit", []) if m.get("i") in range(len(plan.units))}
    passed = sum(1 for i, m in units.items() if m.get("ok") is True and plan.units[i].is_test)
    failures = [units[i] for i in sorted(units) if units[i].get("ok") is not True]
    bad = load if load.get("ok") is False else failures[0] if failures else None
    first_failure = None if bad is None else TestFailure(str(bad.get("file", "")), bad.get("line"),
                                                         str(bad.get("source", "")), str(bad.get("message", "")))
    any_memory = any(m.get("memory") for m in [load, *failures])
    suite = next((m for m in failures if m.get("suite") is True), None)
    detail = ""
    if suite is not None:
        status, detail = Status.ERROR, (f"the test at tests.py:{suite.get('line')} needs objects shared with the "
                                        "candidate; the sandbox passes plain data only and cannot judge this suite")
    elif load.get("ok") is False:
        status = Status.MEMORY if load.get("memory") else Status.ERROR
    elif run.done and len(units) == len(plan.units):
        status = (Status.PASSED if plan.total else Status.RAN) if not failures else \
            Status.MEMORY if any_memory else Status.FAILED
    elif run.timed_out or -signal.SIGXCPU in (run.exit_code, run.candidate_code):
        status, detail = Status.TIMEOUT, "wall-clock limit reached" if run.timed_out else "CPU-time limit reached"
    elif any_memory:
        status = Status.MEMORY
    elif run.gone is not None:
        status, detail = Status.CRASHED, f"the candidate's process {run.gone} before the tests finished"
    else:
        code = run.exit_code or 0
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        status, detail = Status.CRASHED, f"the program {how} before the harness saw the tests finish"
    return Outcome(index, status, passed, plan.total, first_failure, _text(run.stdout, run.dropped["stdout"]),
                   _text(run.stderr, run.dropped["stderr"]), wall_s, _isolation(layers), detail)


def _run_one(template: Template, index: int, job: Job, plan: TestPlan, config: SandboxConfig,
             stop: threading.Event) -> Outcome:
    """One candidate, start to verdict. Never raises (but KeyboardInterrupt and friends): whatever this
    candidate did, the other candidates of the batch keep their verdicts."""
    started = time.monotonic()
    # Two uids: the candidate's process must not be able to signal, ptrace or open the files of its tests'.
    uids = (_allocate_uid(), _allocate_uid()) if os.geteuid() == 0 else (None, None)
    workdir, left = None, None
    try:
        workdir = tempfile.mkdtemp(prefix="sandbox-")
        if uids[0] is not None:
            os.chown(workdir, uids[0], uids[0])
        run = _execute(template, job, plan, config, workdir, uids, stop)
    except Exception as exc:  # e.g. no process slot or file descriptor left on the host
        return Outcome(index, Status.CRASHED, 0, plan.total, None, "", "", time.monotonic() - started,
                       _isolation(None), f"could not run the sandbox: {type(exc).__name__}: {exc}")
    finally:
        left = remove_tree(workdir) if workdir is not None else None
        for uid in uids:
            _release_uid(uid)
    outcome = _judge(index, run, plan, time.monotonic() - started)
    return replace(outcome, detail=f"{outcome.detail}; {left}".lstrip("; ")) if left else outcome


def run_jobs(jobs: Sequence[Job], config: SandboxConfig | None = None) -> list[Outcome]:
    """Run each job in its own sandbox, `config.workers` at a time; one Outcome per job, in input order.

    Raises ValueError before running anything when a job's tests do not parse.
    """
    config = config or SandboxConfig()
    plans: dict[tuple[str | None, str | None], TestPlan] = {}
    for job in jobs:
        if (job.tests, job.helpers) not in plans:
            plan, provided = split_tests(job.tests), defined_names(job.helpers)
            plans[job.tests, job.helpers] = replace(plan, names=tuple(n for n in plan.names if n not in provided))
    # Each child holds 3 descriptors here; make sure a large pool does not run the host out of them.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 8 * config.workers + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8 * config.workers + 64), hard))
    stop = threading.Event()
    with Template() as template, ThreadPoolExecutor(config.workers, thread_name_prefix="sandbox") as pool:
        futures = [pool.submit(_run_one, template, i, job, plans[job.tests, job.helpers], config, stop)
                   for i, job in enumerate(jobs)]
        try:
            return [future.result() for future in futures]
        except BaseException:
            # KeyboardInterrupt (Ctrl-C) lands here: running candidates stop within one poll of their
            # pipes (50 ms), are killed and their directories removed before the pool's exit returns.
            stop.set()
            for future in futures:
                future.cancel()
            raise


def run_candidates(candidates: Sequence[str], tests: str | None = None, *, entry_point: str | None = None,
                   timeout_s: float | None = None, memory_mb: int | None = None, workers: int | None = None,
                   config: SandboxConfig | None = None) -> list[Outcome]:
    """Run k candidate programs against the same tests; one Outcome per candidate, in input order.

    `tests` is a file defining `check(candidate)` (HumanEval style: `entry_point` names the function it
    receives, or the candidate's only function is used), a script of plain asserts, or None for no tests.
    `timeout_s`, `memory_mb` and `workers` override the same fields of `config`.
    """
    overrides = {"timeout_s": timeout_s, "memory_mb": memory_mb, "workers": workers}
    config = replace(config or SandboxConfig(), **{k: v for k, v in overrides.items() if v is not None})
    return run_jobs([Job(program, tests, entry_point) for program in candidates], config)
