"""The seccomp filter every candidate's process (and its tests' process) runs under, beside the namespaces.

A classic BPF program, installed with prctl(PR_SET_SECCOMP), that the kernel runs on every system call:

    arch != native                                        -> kill the process  (32-bit entry points)
    nr >= 0x40000000                                      -> EPERM             (the x32 ABI of x86_64)
    add_key, request_key, keyctl                          -> EPERM   kernel keys outlive the process (days)
    io_uring_setup/enter/register                         -> EPERM   io_uring makes sockets past this filter
    unshare, setns; clone with a CLONE_NEW* flag          -> EPERM   no namespace of its own (user namespaces
                                                                     grant capabilities inside them)
    mount, umount2, pivot_root and the new mount API      -> EPERM
    bpf, perf_event_open, userfaultfd, syslog             -> EPERM   kernel surface no test needs
    clone3                                                -> ENOSYS  its flags are behind a pointer the filter
                                                                     cannot read; glibc then uses clone
    socket, socketpair of a family not allowed            -> EACCES  AF_UNIX always; AF_INET and AF_INET6
                                                                     only inside the empty network namespace
    anything else                                         -> allowed

So AF_VSOCK (not namespaced: it reaches the host's VM agent), AF_NETLINK, AF_PACKET, AF_ALG and every other
family fail. The program only reads the syscall number, the architecture and the low 32 bits of the first
argument (the kernel reads `family` as an int, and every CLONE_NEW* flag lies in those bits).

Standard library only: `harness.py` loads this file (through isolation.py) as a top-level module.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass

AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
CLONE_NEW_ANY = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
EPERM, EACCES, ENOSYS = 1, 13, 38
PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, SECCOMP_MODE_FILTER = 22, 38, 2
RET_KILL_PROCESS, RET_ERRNO, RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
# BPF opcodes: load a word of struct seccomp_data (nr at 0, arch at 4, args[0] at 16), jumps, return.
LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06


@dataclass(frozen=True)
class _Arch:
    audit: int
    numbers: dict[str, int]


_COMMON = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
           "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
           "mount_setattr": 442}
ARCHES = {
    "x86_64": _Arch(0xC000003E, dict(_COMMON, socket=41, socketpair=53, clone=56, syslog=103, pivot_root=155,
                                     mount=165, umount2=166, add_key=248, request_key=249, keyctl=250, unshare=272,
                                     perf_event_open=298, setns=308, bpf=321, userfaultfd=323)),
    "aarch64": _Arch(0xC00000B7, dict(_COMMON, umount2=39, mount=40, pivot_root=41, unshare=97, syslog=116,
                                      socket=198, socketpair=199, add_key=217, request_key=218, keyctl=219,
                                      clone=220, perf_event_open=241, setns=268, bpf=280, userfaultfd=282)),
}
DENIED = ("add_key", "request_key", "keyctl", "io_uring_setup", "io_uring_enter", "io_uring_register", "unshare",
          "setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
          "fspick", "mount_setattr", "bpf", "perf_event_open", "userfaultfd", "syslog")


class FilterUnavailableError(OSError):
    """No filter written for this architecture, or the kernel refused it."""


def _assemble(program: list[tuple]) -> list[tuple[int, int, int, int]]:
    """Resolve labels: an instruction is (code, k, jump-if-true, jump-if-false) with jumps given as label
    names (or 0 for the next instruction); a label is a 1-tuple ("name",) marking the next instruction."""
    labels, position = {}, 0
    for item in program:
        if len(item) == 1:
            labels[item[0]] = position
        else:
            position += 1
    out = []
    for item in program:
        if len(item) == 1:
            continue
        code, k, true, false = item
        here = len(out) + 1
        out.append((code, labels[true] - here if true else 0, labels[false] - here if false else 0, k))
    return out


def program(arch: _Arch, allow_ip: bool) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions; see the module docstring."""
    nr = arch.numbers
    families = [AF_UNIX] + ([AF_INET, AF_INET6] if allow_ip else [])
    return _assemble([
        (LD, 4, 0, 0), (JEQ, arch.audit, "syscall", 0), (RET, RET_KILL_PROCESS, 0, 0),
        ("syscall",), (LD, 0, 0, 0), (JGE, 0x40000000, "eperm", 0),
        *[(JEQ, nr[name], "eperm", 0) for name in DENIED],
        (JEQ, nr["clone3"], "enosys", 0),
        (JEQ, nr["socket"], "family", 0), (JEQ, nr["socketpair"], "family", 0),
        (JEQ, nr["clone"], "clone", 0), (RET, RET_ALLOW, 0, 0),
        ("family",), (LD, 16, 0, 0), *[(JEQ, family, "allow", 0) for family in families],
        (RET, RET_ERRNO | EACCES, 0, 0),
        ("clone",), (LD, 16, 0, 0), (JSET, CLONE_NEW_ANY, "eperm", 0),
        ("allow",), (RET, RET_ALLOW, 0, 0),
        ("eperm",), (RET, RET_ERRNO | EPERM, 0, 0),
        ("enosys",), (RET, RET_ERRNO | ENOSYS, 0, 0),
    ])


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(allow_ip: bool) -> None:
    """Set no_new_privs and install the filter on this thread (inherited by every later child);
    FilterUnavailableError where this architecture has no filter here or the kernel refuses it."""
    arch = ARCHES.get(os.uname().machine)
    if arch is None:
        raise FilterUnavailableError(0, f"no seccomp filter written for {os.uname().machine}")
    instructions = program(arch, allow_ip)
    buffer = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *insn) for insn in instructions))
    prog = _Prog(len(instructions), ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    for args, what in (((PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs"),
                       ((PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")):
        if libc.prctl(*args) != 0:
            errno = ctypes.get_errno()
            raise FilterUnavailableError(errno, f"{what}: {os.strerror(errno)}")
