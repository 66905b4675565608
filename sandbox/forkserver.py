"""The template's loop: receive a job's descriptors, fork a child for it, report how each child ended.

Runs inside the sandbox's template interpreter (loaded by `harness.py` as a top-level module; standard
library only). The job itself never passes through this process: it arrives as a file descriptor (a
memfd the runner wrote) that only the fork reads. So the template's memory, which every later fork
inherits, never holds a candidate's program or tests: no candidate can find an earlier one's code in it.
"""

from __future__ import annotations

import contextlib
import gc
import marshal
import os
import select
import signal
import socket
import struct
from collections.abc import Callable

# A request: the run's nonce (for the exit line), with SCM_RIGHTS stdout, stderr, result, tests, job.
REQUEST = struct.Struct("32s")
DESCRIPTORS = 5
SETUP_SIZE = struct.Struct("!I")


def read_job(fd: int) -> bytes:
    """All bytes of the job file `fd` (read in the fork, never in the template); closes it."""
    size = os.fstat(fd).st_size
    data = bytearray()
    while len(data) < size:
        data += os.pread(fd, size - len(data), len(data))
    os.close(fd)
    return bytes(data)


def read_setup() -> dict:
    """The batch's setup, sent by the runner on the socket at fd 0 before any job: a 4-byte length, then a
    marshalled dict (the file-system view, see view.py). Read before `serve`."""
    with socket.socket(fileno=os.dup(0)) as sock:
        (size,) = SETUP_SIZE.unpack(_read_exactly(sock, SETUP_SIZE.size))
        return marshal.loads(_read_exactly(sock, size))


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def serve(child: Callable[..., None], die_with_parent: Callable[[], None]) -> None:
    """Wait for jobs on the socket at fd 0, fork `child(out, err, result, tests, job)` for each (it never
    returns), reply with its pid, and write `{"k": "exit", ...}` down its result pipe when it ends.

    End of input (the runner closed the socket or died) ends the template and, through
    PR_SET_PDEATHSIG, its children.
    """
    sock = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    die_with_parent()
    # Everything imported so far moves to a generation the collector never scans: each fork then shares
    # those pages with the template instead of copying them the first time its collector runs.
    gc.freeze()
    running: dict[int, tuple[int, int, bytes]] = {}  # pidfd -> (pid, result fd, nonce)
    while True:
        ready, _, _ = select.select([sock.fileno(), *running], [], [])
        for pidfd in (fd for fd in ready if fd in running):
            pid, result_fd, nonce = running.pop(pidfd)
            _, status = os.waitpid(pid, 0)
            exit_line = repr({"k": "exit", "code": os.waitstatus_to_exitcode(status), "n": nonce.decode()}) + "\n"
            with contextlib.suppress(OSError):  # the runner stopped listening
                os.write(result_fd, exit_line.encode())
            os.close(result_fd)
            os.close(pidfd)
        if sock.fileno() not in ready:
            continue
        try:
            header, fds, _, _ = socket.recv_fds(sock, REQUEST.size, DESCRIPTORS)
            header += _read_exactly(sock, REQUEST.size - len(header)) if header else b""
            if not header:
                raise EOFError
        except EOFError:
            for pid, _, _ in running.values():
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            return
        (nonce,) = REQUEST.unpack(header)
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            sock.sendall(struct.pack("q", -exc.errno))
            continue
        if pid == 0:
            sock.close()
            child(*fds)
        result_fd = fds[2]
        for fd in fds:
            if fd != result_fd:
                os.close(fd)
        running[os.pidfd_open(pid)] = (pid, result_fd, nonce)
        sock.sendall(struct.pack("q", pid))
