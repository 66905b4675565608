"""Shared candidates and helpers of the sandbox tests (a unique module name: conftest is not importable)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ADD = "def add(a, b):\n    return a + b\n"
ADD_TESTS = """
def check(candidate):
    assert candidate(1, 2) == 3
    assert candidate(-1, 1) == 0
    assert candidate(10, 5) == 15
"""


def sandbox_processes() -> list[int]:
    """Live (non-zombie) processes owned by a sandbox uid (the runner allocates from 2e9 upwards)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) >= 2_000_000_000 and not fields["State"].strip().startswith("Z"):
            alive.append(int(entry.name))
    return alive


def interruptible() -> None:
    """`preexec_fn` of a CLI run that a test interrupts: SIGINT at its default and unblocked in the child, whatever
    the test process inherited or set (a child inherits an ignored or blocked SIGINT, and Python then leaves it so)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
