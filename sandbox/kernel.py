"""libc through ctypes, for the confinement modules: raw system calls and the error a refused layer raises.

Standard library only: `harness.py` loads this file (through isolation.py and mounts.py) as a top-level
module inside the sandbox.
"""

from __future__ import annotations

import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)


class LayerUnavailableError(OSError):
    """The kernel refused a confinement layer; the caller falls back to a weaker one."""


def check(result: int, what: str) -> int:
    """`result`, or LayerUnavailableError naming `what` and errno when it is negative."""
    if result < 0:
        errno = ctypes.get_errno()
        raise LayerUnavailableError(errno, f"{what}: {os.strerror(errno)}")
    return result


def syscall(number: int, *args: object) -> int:
    """A system call by number (for those glibc has no wrapper for)."""
    return libc.syscall(ctypes.c_long(number), *args)
