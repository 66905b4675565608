"""Limits that hold for a candidate's processes together and for the whole batch: memory (memfd included)
by cgroup, or by the memory watch where cgroups are switched off, and a CPU share per candidate."""

import time

import pytest

from sandbox import SandboxConfig, Status, run_candidates

pytestmark = pytest.mark.slow  # batches that fill hundreds of MB and wait on them: seconds each

TESTS = "def check(candidate):\n    assert candidate(2) == 5\n"
HONEST = "def f(x):\n    return 2 * x + 1\n"

# Three processes of 300 MB each: every one is under memory_mb, together they are not.
PROCESSES = """
import os, time
def f(x):
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            hold = bytearray(b"x") * (300 << 20)
            time.sleep(2)
            os._exit(0)
        pids.append(pid)
    hold = bytearray(b"x") * (300 << 20)
    time.sleep(2)
    return 2 * x + 1 if not any(os.waitpid(pid, 0)[1] for pid in pids) else -1
"""


def memfd_holder(files: int, hold_s: float) -> str:
    """A candidate that writes `files` memfds of 64 MB (the file-size limit) and holds them `hold_s` seconds, as
    a candidate's working memory would be held: memfd memory is outside the address-space limit."""
    return f"""
import os, time
files = []
def f(x):
    for _ in range({files}):
        fd = os.memfd_create("hold")
        for _ in range(64):
            os.write(fd, b"x" * (1 << 20))
        files.append(fd)
    time.sleep({hold_s})
    return 2 * x + 1
"""


MEMFD = memfd_holder(12, 1)
HOLD_300 = """
import time
def f(x):
    hold = bytearray(b"x") * (300 << 20)
    time.sleep(2)
    return 2 * x + 1
"""
MODES = {"cgroup": frozenset(), "memwatch": frozenset({"cgroup"})}


def _config(mode: str, **kw) -> SandboxConfig:
    return SandboxConfig(timeout_s=20, memory_mb=512, disabled_layers=MODES[mode], **kw)


OWN_CAP = {"cgroup": "a memory cap ended it: its processes together reached memory_mb (512 MB; cgroup)",
           "memwatch": "a memory cap ended it: its processes held "}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_candidates_processes_and_memfd_share_one_memory_cap(mode):
    outcomes = run_candidates([PROCESSES, MEMFD, HONEST], TESTS, entry_point="f", config=_config(mode, workers=3))
    assert [o.status for o in outcomes] == [Status.MEMORY, Status.MEMORY, Status.PASSED], [o.detail for o in outcomes]
    assert mode in outcomes[2].isolation
    for outcome in outcomes[:2]:  # its own cap tripped, not the batch's (which holds three times as much)
        assert outcome.detail.startswith(OWN_CAP[mode]) and "batch" not in outcome.detail, outcome.detail


# 448 MB in memfds it no longer maps: charged to its cgroup, in no process's resident memory, so the
# kernel's own choice at the batch's cap (the largest process) would be the honest candidate below.
UNMAPPED_MEMFD = memfd_holder(7, 4)
HONEST_300_LATER = """
import time
def f(x):
    time.sleep(1)  # the other holds its memfds by then
    hold = bytearray(b"x") * (300 << 20)
    return 2 * x + 1
"""


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_batch_cap_ends_the_candidate_that_holds_the_most(mode):
    hoarder, honest = run_candidates([UNMAPPED_MEMFD, HONEST_300_LATER], TESTS, entry_point="f",
                                     config=_config(mode, workers=2, batch_memory_mb=600))
    assert (honest.status, hoarder.status) == (Status.PASSED, Status.MEMORY), (honest, hoarder)
    assert hoarder.detail.startswith(f"a memory cap ended it: the batch reached batch_memory_mb (600 MB; {mode})")
    held = int(hoarder.detail.split("held the most of it (")[1].split(" MB")[0])
    assert 400 < held < 512, hoarder.detail


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_batch_has_one_memory_cap(mode):
    outcomes = run_candidates([HOLD_300] * 4, TESTS, entry_point="f",
                              config=_config(mode, workers=4, batch_memory_mb=768))
    statuses = [o.status for o in outcomes]
    assert Status.MEMORY in statuses and set(statuses) <= {Status.MEMORY, Status.PASSED}, [o.detail for o in outcomes]
    assert any("batch_memory_mb" in o.detail for o in outcomes)


BUSY_LOOPS = """
import os
def f(x):
    for _ in range(29):
        if os.fork() == 0:
            os.setsid()
            while True:
                pass
    while True:
        pass
"""
NEEDS_CPU = """
def f(x):
    total = 0
    for i in range(8_000_000):  # about half a second of CPU
        total += i
    return 2 * x + 1
"""


def test_a_fork_of_busy_loops_gets_one_candidates_cpu_share():
    started = time.monotonic()
    bomb, honest = run_candidates([BUSY_LOOPS, NEEDS_CPU], TESTS, entry_point="f",
                                  config=SandboxConfig(timeout_s=5, workers=2))
    assert honest.status is Status.PASSED and honest.wall_s < 4, (honest, time.monotonic() - started)
    assert bomb.status is Status.TIMEOUT and "cgroup" in honest.isolation
