"""Drain one candidate's pipes until it is done, times out or the batch stops: what the runner judges.

stdout and stderr are kept up to a cap (the rest read and dropped, so the child never blocks on a full
pipe); the result pipe is parsed line by line, and only lines carrying the run's nonce count.
"""

from __future__ import annotations

import ast
import os
import selectors
import threading
import time
from dataclasses import dataclass, field

from sandbox.config import SandboxConfig

_RESULT_CAP = 4 << 20  # bytes of result messages kept; only a candidate spamming the channel gets near it
_EXIT_GRACE_S = 0.3  # after the child exits, how long grandchildren may hold the pipes open


@dataclass
class Run:
    """What one candidate's run produced, as read from its pipes (and the watchers' notes)."""

    messages: list[dict] = field(default_factory=list)
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    dropped: dict[str, int] = field(default_factory=lambda: {"stdout": 0, "stderr": 0})
    exit_code: int | None = None  # of the tests' process, as reported by the template: negative for a signal
    gone: str | None = None  # how the candidate's process ended or broke its channel before the end
    candidate_code: int | None = None  # its exit code then, when the tests' process saw it
    timed_out: bool = False
    done: bool = False
    memory: str | None = None  # why a memory cap ended it, when one did


def collect(out_fd: int, err_fd: int, result_fd: int, nonce: str, deadline: float, config: SandboxConfig,
             stop: threading.Event) -> Run:
    """Read the three pipes until the run is done, `deadline` passes or `stop` is set; see the module doc."""
    run = Run()
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


def _accept(run: Run, line: bytes, nonce: str) -> None:
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
