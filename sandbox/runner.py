"""Run candidates in a bounded pool of sandboxed child interpreters and judge what they report.

One thread per running candidate drives its child: it has the batch's template interpreter fork a child
in a new session with a scrubbed environment and an empty temporary directory (the child is the tests'
process; it forks the candidate's, see harness.py), drains stdout/stderr (kept up to a cap, the rest read
and dropped so the child never blocks) and the result pipe, and at the end, whatever happened, kills the
whole process group and every process of the candidate's private uid, then removes the directory.
"""

from __future__ import annotations

import contextlib
import keyword
import marshal
import math
import os
import resource
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from sandbox.cgroups import BatchGroups, CandidateGroup
from sandbox.cleanup import remove_tree
from sandbox.collect import Run, collect
from sandbox.config import MAX_SOURCE_BYTES, SandboxConfig
from sandbox.judge import isolation, judge
from sandbox.memwatch import MemoryWatch, UidMeter
from sandbox.outcome import Outcome, Status
from sandbox.splitter import TestPlan, defined_names, split_tests
from sandbox.template import PYTHON, TEMPLATE_ENV, Template
from sandbox.view import batch_files, site_paths

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

    def __post_init__(self) -> None:
        for name in ("program", "tests", "helpers"):
            value = getattr(self, name)
            if value is None and name != "program":
                continue
            if type(value) is not str:
                raise ValueError(f"the job's {name} must be source text (str), not {type(value).__name__}")
            if len(value) > MAX_SOURCE_BYTES:
                raise ValueError(f"the job's {name} is {len(value):,} characters long, more than the "
                                 f"{MAX_SOURCE_BYTES:,} the sandbox runs: shorten it")
        name = self.entry_point
        if name is not None and not (type(name) is str and name.isidentifier() and not keyword.iskeyword(name)):
            raise ValueError(f"entry_point must be the name of a function, such as 'add' (got {str(name)[:80]!r})")


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


def _memory_file(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    written = 0
    while written < len(data):
        written += os.write(fd, data[written:])
    return fd


@dataclass(frozen=True)
class _Batch:
    """What every candidate of one batch shares: the template, the limits, the stop signal (Ctrl-C),
    the batch's cgroups, or the memory watch that stands in for their memory caps."""

    template: Template
    config: SandboxConfig
    stop: threading.Event
    groups: BatchGroups
    watch: MemoryWatch | None
    temp_root: str  # where the working directories go (each candidate sees its own tmpfs there)
    files: dict  # the file system each child sets up (mounts.confine_files)


def _execute(batch: _Batch, job: Job, plan: TestPlan, workdir: str, uids: tuple[int | None, int | None],
             group: CandidateGroup | None) -> Run:
    config = batch.config
    nonce = secrets.token_hex(16)
    candidate_uid, tests_uid = uids
    payload = {"nonce": nonce, "program": job.program, "entry_point": job.entry_point, "workdir": workdir,
               "has_tests": bool(plan.units), "needs_entry": plan.candidate_param is not None,
               "names": list(plan.names), "uid": candidate_uid, "tests_uid": tests_uid,
               "fs": batch.files, "site_paths": site_paths(),
               "env": _scrubbed_env(workdir), "rlimits": _rlimits(config), "disabled": sorted(config.disabled_layers),
               "cgroups": group.directories if group is not None else []}
    # The job and the tests travel as files: the template passes them on unread (so its memory, which
    # every later fork inherits, never holds a program), and only the tests' process reads the tests
    # (after forking the candidate's), so the test source is never in the candidate's memory.
    tests = marshal.dumps({"units": [(u.source, u.lineno) for u in plan.units],
                           "candidate_param": plan.candidate_param, "helpers": job.helpers or ""})
    files = [_memory_file("tests", tests), _memory_file("job", marshal.dumps(payload))]
    pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, results
    deadline = time.monotonic() + config.timeout_s
    try:
        pid = batch.template.spawn(nonce, *(w for _, w in pipes), *files)
    except BaseException:
        for r, _ in pipes:
            os.close(r)
        raise
    finally:
        for fd in [w for _, w in pipes] + files:
            os.close(fd)
    run, over = Run(), []

    def over_memory(why: str) -> None:  # called by the memory watch's thread
        over.append(why)
        _kill_everything(pid, candidate_uid)

    key = group if group is not None else candidate_uid  # what the batch's meter measures it by
    if batch.watch is not None and key is not None:
        batch.watch.watch(key, config.memory_mb, over_memory)
    try:
        run = collect(*(r for r, _ in pipes), nonce, deadline, config, batch.stop)
    finally:
        if batch.watch is not None and key is not None:
            batch.watch.forget(key)
        # Sweep the uid, even after "done", unless the candidate ran in a PID namespace: a grandchild that
        # is forking in its own session can outrun the group's kill (seen: one survived as an orphan), but
        # none can leave the namespace, whose processes all die with its init, in the group killed here.
        # The tests' uid needs no sweep: only our own test code runs as it, inside the process group.
        _kill_everything(pid, None if _in_pid_namespace(run) else candidate_uid)
        for r, _ in pipes:
            os.close(r)
    run.memory = over[0] if over else None
    return run


def _in_pid_namespace(run: Run) -> bool:
    """Whether the tests' process reported that the candidate's process ran in a PID namespace of its own."""
    return any(m.get("k") == "start" and "pidns" in (m.get("layers") or ()) for m in run.messages)


def _oom(group: CandidateGroup | None, config: SandboxConfig) -> str | None:
    """Why the kernel's OOM killer ended a process of this candidate, if it did. The batch's cap never does
    (the memory watch ends a candidate for it, and says so itself)."""
    if group is None or not group.oom_kills():
        return None
    if group.hit_own_cap():
        return f"its processes together reached memory_mb ({config.memory_mb} MB; cgroup)"
    return "the kernel's OOM killer ended one of its processes: the host ran out of memory"


def _run_one(batch: _Batch, index: int, job: Job, plan: TestPlan) -> Outcome:
    """One candidate, start to verdict. Never raises (but KeyboardInterrupt and friends): whatever this
    candidate did, the other candidates of the batch keep their verdicts."""
    started = time.monotonic()
    # Two uids: the candidate's process must not be able to signal, ptrace or open the files of its tests'.
    uids = (_allocate_uid(), _allocate_uid()) if os.geteuid() == 0 else (None, None)
    workdir, left, group = None, None, None
    try:
        workdir = tempfile.mkdtemp(prefix="sandbox-", dir=batch.temp_root)
        if uids[0] is not None:
            os.chown(workdir, uids[0], uids[0])
        group = batch.groups.candidate(index, batch.config.memory_mb)
        run = _execute(batch, job, plan, workdir, uids, group)
        run.memory = run.memory or _oom(group, batch.config)
    except Exception as exc:  # e.g. no process slot or file descriptor left on the host
        return Outcome(index, Status.CRASHED, 0, plan.total, None, "", "", time.monotonic() - started,
                       isolation(None), f"could not run the sandbox: {type(exc).__name__}: {exc}")
    finally:
        left = remove_tree(workdir) if workdir is not None else None
        batch.groups.release(group)
        for uid in uids:
            _release_uid(uid)
    watched = ("memwatch",) if not batch.groups.available and batch.watch is not None and uids[0] is not None \
        else ()
    outcome = judge(index, run, plan, time.monotonic() - started, watched)
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
    groups = BatchGroups(config.batch_memory_mb, config.workers) if "cgroup" not in config.disabled_layers \
        else BatchGroups.unavailable()
    watch = None
    if groups.available:
        watch = MemoryWatch(config.batch_memory_mb, groups, interval_s=0.05)  # allocations wait on it (v1)
    elif "memwatch" not in config.disabled_layers and os.geteuid() == 0:
        watch = MemoryWatch(config.batch_memory_mb, UidMeter(config.batch_memory_mb))
    temp_root = os.path.realpath(tempfile.gettempdir())
    try:
        view, files = batch_files(config, temp_root)
        with Template(view) as template, ThreadPoolExecutor(config.workers, thread_name_prefix="sandbox") as pool:
            batch = _Batch(template, config, threading.Event(), groups, watch, temp_root, files)
            futures = [pool.submit(_run_one, batch, i, job, plans[job.tests, job.helpers])
                       for i, job in enumerate(jobs)]
            try:
                return [future.result() for future in futures]
            except BaseException:
                # KeyboardInterrupt (Ctrl-C) lands here: running candidates stop within one poll of their
                # pipes (50 ms), are killed and their directories removed before the pool's exit returns.
                batch.stop.set()
                for future in futures:
                    future.cancel()
                raise
    finally:
        if watch is not None:
            watch.close()
        groups.close()


def run_candidates(candidates: Sequence[str], tests: str | None = None, *, entry_point: str | None = None,
                   timeout_s: float | None = None, memory_mb: int | None = None, workers: int | None = None,
                   config: SandboxConfig | None = None, helpers: str | None = None) -> list[Outcome]:
    """Run k candidate programs against the same tests; one Outcome per candidate, in input order.

    `tests` is a file defining `check(candidate)` (HumanEval style: `entry_point` names the function it
    receives, or the candidate's only function is used), a script of plain asserts, or None for no tests.
    `timeout_s`, `memory_mb` and `workers` override the same fields of `config`; `helpers` is the
    problem's own source the tests may call (see Job).
    """
    overrides = {"timeout_s": timeout_s, "memory_mb": memory_mb, "workers": workers}
    config = replace(config or SandboxConfig(), **{k: v for k, v in overrides.items() if v is not None})
    return run_jobs([Job(program, tests, entry_point, helpers) for program in candidates], config)
