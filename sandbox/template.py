"""The runner's handle on the template interpreter that forks one child per candidate (harness.serve)."""

from __future__ import annotations

import marshal
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

from sandbox.forkserver import SETUP_SIZE

HARNESS = Path(__file__).with_name("harness.py")
# The interpreter itself rather than a virtualenv's link to it: it starts faster (no pyvenv.cfg lookup),
# and with -S the virtualenv's packages come through the job's `site_paths` anyway.
PYTHON = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
# Constants only: nothing of the caller's environment (tokens, keys) reaches the template or its children.
TEMPLATE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "MALLOC_ARENA_MAX": "2"}


class Template:
    """A fresh interpreter started for one batch; `spawn` forks it into a new candidate child.

    `view` is the batch's file-system view (view.View.as_dict), which the template applies to a mount
    namespace of its own before its first fork, or None for none. Thread-safe: worker threads share it,
    one request at a time (a request is a fork, well under 1 ms). Restarted once if it died, so one bad
    moment does not fail the rest of the batch.
    """

    def __init__(self, view: dict | None = None) -> None:
        self._lock = threading.Lock()
        self._setup = marshal.dumps({"view": view})
        self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        self._proc = subprocess.Popen([PYTHON, "-I", "-S", "-B", str(HARNESS)], stdin=theirs,
                                      stdout=subprocess.DEVNULL, cwd="/", env=TEMPLATE_ENV, start_new_session=True)
        theirs.close()
        ours.sendall(SETUP_SIZE.pack(len(self._setup)) + self._setup)
        self._sock = ours

    def spawn(self, nonce: str, out_fd: int, err_fd: int, result_fd: int, tests_fd: int, job_fd: int) -> int:
        """Fork a child that runs the job in `job_fd` (a file holding it marshalled: the template passes it on
        unread) with these pipes as stdout, stderr and result channel, and `tests_fd` (a file holding the
        tests) for its tests' process alone. `nonce` tags the template's line saying how the child ended."""
        with self._lock:
            for attempt in range(2):
                try:
                    socket.send_fds(self._sock, [struct.pack("32s", nonce.encode())],
                                    [out_fd, err_fd, result_fd, tests_fd, job_fd])
                    reply = self._sock.recv(8, socket.MSG_WAITALL)
                    if len(reply) == 8:
                        break
                except OSError:
                    if attempt:
                        raise
                if attempt:
                    raise OSError("the sandbox template process died")
                self.close()
                self._start()
        pid = struct.unpack("q", reply)[0]
        if pid < 0:
            raise OSError(-pid, f"the sandbox template could not fork: {os.strerror(-pid)}")
        return pid

    def close(self) -> None:
        """End the template (it exits when its socket closes); children still running are killed with it."""
        self._sock.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> Template:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
