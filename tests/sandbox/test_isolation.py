"""Each fallback layer, forced by disabling the stronger one: it still contains the candidate, and the
reported isolation level says exactly which layers were in effect (and admits a gap when there is one)."""

import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path

import pytest
from sandbox_cases import ADD

from sandbox import SandboxConfig, Status, run_candidates


def _layers(isolation: str) -> tuple[str, set[str]]:
    level, rest = isolation.split("(", 1)
    return level, set(rest.rstrip(")").split("+"))


def _run(program: str, *disabled: str):
    [outcome] = run_candidates([program], None, config=SandboxConfig(timeout_s=10,
                                                                     disabled_layers=frozenset(disabled)))
    return outcome


CONNECT = """
import socket
a, b = socket.socketpair()  # AF_UNIX stays allowed: multiprocessing and friends need it
a.sendall(b"ok")
assert b.recv(2) == b"ok"
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    print("connected")
except OSError as exc:
    print("refused:", type(exc).__name__)
"""


def test_network_fallbacks_block_or_admit():
    server = socket.create_server(("127.0.0.1", 0))
    server.listen(8)
    program = CONNECT.format(port=server.getsockname()[1])
    try:
        netns = _run(program)
        seccomp = _run(program, "netns")
        open_network = _run(program, "netns", "seccomp")
    finally:
        server.close()
    assert "netns" in _layers(netns.isolation)[1] and netns.stdout == "refused: OSError\n"
    if "seccomp" in seccomp.isolation:
        assert seccomp.stdout == "refused: PermissionError\n"  # socket() itself denied with EACCES
    else:  # an architecture without our filter: the report must not claim a network layer
        assert seccomp.stdout == "connected\n" and not _layers(seccomp.isolation)[1] & {"netns", "seccomp"}
    level, layers = _layers(open_network.isolation)
    assert open_network.stdout == "connected\n" and not layers & {"netns", "seccomp"} and level != "strict"
    assert {netns.status, seccomp.status, open_network.status} == {Status.RAN}


@pytest.fixture
def open_folder():
    """A world-writable folder outside pytest's private tree, so only the sandbox layers decide."""
    folder = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder)


def test_filesystem_fallbacks_block_or_admit(open_folder):
    target = open_folder / f"written-{uuid.uuid4().hex}"
    program = f"""
open("inside.txt", "w").write("fine")
try:
    open({str(target)!r}, "w").write("escaped")
    print("wrote outside")
except OSError as exc:
    print("blocked:", exc.strerror)
"""
    viewed = _run(program)  # the folder is not even in its view
    assert {"mountns-ro", "fsview"} <= _layers(viewed.isolation)[1] and viewed.stdout == "blocked: No such file or " \
                                                                                        "directory\n"
    mountns = _run(program, "fsview")
    assert "mountns-ro" in _layers(mountns.isolation)[1] and mountns.stdout == "blocked: Read-only file system\n"
    assert "fsview" not in mountns.isolation and not target.exists()
    landlock = _run(program, "mountns-ro")
    if "landlock-ro" in landlock.isolation:
        assert landlock.stdout == "blocked: Permission denied\n" and not target.exists()
    else:  # kernel without Landlock: nothing protects the file system, and the report says so
        assert landlock.stdout == "wrote outside\n"
        target.unlink()
    nothing = _run(program, "mountns-ro", "landlock-ro")
    level, layers = _layers(nothing.isolation)
    assert nothing.stdout == "wrote outside\n" and target.read_text() == "escaped"
    assert not layers & {"mountns-ro", "landlock-ro"} and level != "strict"
    assert {viewed.status, mountns.status, landlock.status, nothing.status} == {Status.RAN}


def test_everything_disabled_is_reported_as_minimal():
    outcome = _run(ADD + "print(add(2, 3))\n", "netns", "seccomp", "mountns-ro", "fsview", "landlock-ro", "ipcns",
                   "uid", "pidns", "cgroup", "memwatch")
    assert (outcome.status, outcome.stdout, outcome.isolation) == (Status.RAN, "5\n", "minimal(rlimits+verdict)")


def test_working_directory_is_removed_whatever_the_program_did():
    program = """
import os
os.makedirs("a/b/c")
open("a/b/c/f", "w").write("x")
os.chmod("a/b", 0)
os.chmod(".", 0o500)
print(os.getcwd())
"""
    outcomes = run_candidates([program, program + "import os\nos._exit(3)\n"], None)
    for outcome in outcomes:
        workdir = outcome.stdout.strip()
        assert workdir.startswith("/") and not os.path.exists(workdir), outcome
    assert [o.status for o in outcomes] == [Status.RAN, Status.CRASHED]
