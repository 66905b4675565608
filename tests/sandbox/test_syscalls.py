"""The seccomp filter, always beside the namespaces: no kernel keys (which would outlive the run), no
socket family but AF_UNIX and IP (no AF_VSOCK to the host), no namespaces of its own, no io_uring; and
what a candidate needs (threads, fork, AF_UNIX pairs) still works."""

import errno
import json
import os
import re

import pytest

from sandbox import SandboxConfig, Status, run_candidates
from sandbox.syscall_filter import ARCHES

NUMBERS = ARCHES.get(os.uname().machine)
PROBE = """
import ctypes, json, os, socket, threading
libc = ctypes.CDLL(None, use_errno=True)
NR = {numbers}

def call(name, *args):
    result = libc.syscall(ctypes.c_long(NR[name]), *args)
    return result if result >= 0 else -ctypes.get_errno()

def family(number, kind):
    try:
        socket.socket(number, kind).close()
        return 0
    except OSError as exc:
        return -exc.errno

report = {{"uid": os.getuid()}}
report["add_key"] = call("add_key", b"user", b"sandbox-probe", b"secret", ctypes.c_size_t(6), ctypes.c_int(-4))
report["keyctl"] = call("keyctl", ctypes.c_int(22), ctypes.c_int(-1), ctypes.c_int(-3))  # the persistent keyring
report["request_key"] = call("request_key", b"user", b"sandbox-probe", None, ctypes.c_int(0))
report["unshare_user"] = call("unshare", ctypes.c_int(0x10000000))
report["clone3"] = call("clone3", None, ctypes.c_size_t(0))
report["io_uring_setup"] = call("io_uring_setup", ctypes.c_uint(4), None)
for name, number, kind in (("vsock", 40, socket.SOCK_STREAM), ("netlink", 16, socket.SOCK_DGRAM),
                           ("packet", 17, socket.SOCK_DGRAM), ("alg", 38, socket.SOCK_SEQPACKET),
                           ("bluetooth", 31, socket.SOCK_STREAM), ("inet", 2, socket.SOCK_STREAM)):
    report[name] = family(number, kind)
a, b = socket.socketpair()
a.sendall(b"ok")
report["unix_pair"] = b.recv(2).decode()
box = []
thread = threading.Thread(target=box.append, args=("ran",))
thread.start()
thread.join()
report["thread"] = box
pid = os.fork()
if pid == 0:
    os._exit(7)
report["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(report))
"""


def _key_users() -> set[int]:
    with open("/proc/key-users") as users:
        return {int(match.group(1)) for line in users if (match := re.match(r"\s*(\d+):", line))}


@pytest.mark.skipif(NUMBERS is None, reason="the filter is written for x86_64 and aarch64 only")
def test_keys_foreign_sockets_and_namespaces_are_refused_and_nothing_outlives_the_run():
    [outcome] = run_candidates([PROBE.format(numbers=NUMBERS.numbers)], None, config=SandboxConfig(timeout_s=10))
    assert outcome.status is Status.RAN and "seccomp" in outcome.isolation, outcome
    report = json.loads(outcome.stdout)
    denied = {name: report[name] for name in ("add_key", "keyctl", "request_key", "unshare_user", "io_uring_setup")}
    assert denied == dict.fromkeys(denied, -errno.EPERM), report
    assert report["clone3"] == -errno.ENOSYS  # so that glibc falls back to clone, whose flags the filter reads
    families = {name: report[name] for name in ("vsock", "netlink", "packet", "alg", "bluetooth")}
    assert families == dict.fromkeys(families, -errno.EACCES), report
    # What a candidate needs still works: IP sockets inside the empty network namespace, AF_UNIX, threads, fork.
    assert (report["inet"], report["unix_pair"], report["thread"], report["fork"]) == (0, "ok", ["ran"], 7)
    assert report["uid"] not in _key_users()  # no key, no keyring: nothing of it is left in the kernel
