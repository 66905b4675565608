"""Kernel confinement applied by the child to itself before any candidate code runs.

This module runs inside the sandboxed interpreter (imported by `harness.py` as a top-level module), so it
uses the standard library only and never imports from the `sandbox` package.

`enclose` applies what the candidate's process and its tests' process share (namespaces, the file system),
before the one forks the other; `restrict` what each applies to itself afterwards. Each layer is tried in
order of strength and the names of the layers that took effect are returned; the parent reports them as
the isolation level. A layer that the kernel refuses is skipped, never faked:

- `uid`: a fresh unprivileged uid per process (root only: one for the candidate, another for its tests).
  Capabilities go with it, so the candidate cannot signal the caller or its tests' process, write root's
  files, or undo the layers below; `RLIMIT_NPROC` counts only its processes.
- `netns`: an empty network namespace (only a loopback that is down): no connection anywhere, not even to
  127.0.0.1.
- `seccomp`: a system-call filter (syscall_filter.py): no kernel keys, io_uring, namespaces or mounts, and
  sockets of AF_UNIX only (AF_INET and AF_INET6 too inside the empty network namespace).
- `mountns-ro`: a private mount namespace where every mount is read-only but the working directory, a
  tmpfs of its own bounded in bytes and files (mounts.py). Else `landlock-ro`: a Landlock ruleset that
  denies every write outside the working directory (then on the host's disk).
- `fsview`: in that namespace, the batch's view (view.py): the runtime and nothing else of the host's
  files but its system directories; no project tree, tests file, answer key or data directory.
- `ipcns`: a private System V IPC namespace.
- `pidns`: a PID namespace whose init mounts a fresh, read-only /proc: the candidate sees its own
  processes only (no host command lines, no tests' process), and they all die with that init.
- `rlimits`: CPU seconds, address space, processes, file size, open files, no core dumps.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal

if __package__:
    from sandbox import mounts, syscall_filter
    from sandbox.kernel import LayerUnavailableError
    from sandbox.kernel import check as _check
    from sandbox.kernel import libc as _libc
    from sandbox.kernel import syscall as _syscall
else:  # loaded by harness.py as a top-level module, next to the others
    import mounts
    import syscall_filter
    from kernel import LayerUnavailableError
    from kernel import check as _check
    from kernel import libc as _libc
    from kernel import syscall as _syscall

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

SYS_LANDLOCK_CREATE, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT = 444, 445, 446
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38


def _enter_user_namespace(flags: int) -> None:
    # Without root, a user namespace is what grants the right to create the other namespaces. We map
    # our own uid to itself so files keep their owners, and lose the namespace's capabilities later.
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(ctypes.c_int(CLONE_NEWUSER | flags)), "unshare")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


# Landlock filesystem rights (ABI 1, then REFER in ABI 2 and TRUNCATE in ABI 3).
_LANDLOCK_WRITES = sum(1 << bit for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))
_LANDLOCK_WRITE_FILE, _LANDLOCK_REFER, _LANDLOCK_TRUNCATE = 1 << 1, 1 << 13, 1 << 14


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _landlock_read_only_except(workdir: str) -> None:
    abi = _check(_syscall(SYS_LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint(1)), "landlock ABI")
    handled = _LANDLOCK_WRITES | (_LANDLOCK_REFER if abi >= 2 else 0) | (_LANDLOCK_TRUNCATE if abi >= 3 else 0)
    ruleset = ctypes.c_uint64(handled)
    ruleset_fd = _check(_syscall(SYS_LANDLOCK_CREATE, ctypes.byref(ruleset), ctypes.c_size_t(8), ctypes.c_uint(0)),
                        "landlock_create_ruleset")
    file_rights = handled & (_LANDLOCK_WRITE_FILE | _LANDLOCK_TRUNCATE)
    for path, rights in ((workdir, handled), ("/dev/null", file_rights)):
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        rule = _PathBeneath(rights, fd)
        _check(_syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset_fd), ctypes.c_int(1), ctypes.byref(rule),
                        ctypes.c_uint(0)), f"landlock_add_rule {path}")
        os.close(fd)
    _no_new_privs()
    _check(_syscall(SYS_LANDLOCK_RESTRICT, ctypes.c_int(ruleset_fd), ctypes.c_uint(0)), "landlock_restrict_self")
    os.close(ruleset_fd)


def _no_new_privs() -> None:
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _set_rlimits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


def _drop_to_uid(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # leaving uid 0 clears every capability


def _drop_capabilities() -> None:
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.capset(header, data), "capset")


def enclose(workdir: str, *, uid: int | None, fs: dict, view_held: bool, disabled: set[str]) -> list[str]:
    """The layers both processes of a candidate share, applied before the tests' process forks the
    candidate's: namespaces and the file system (mounts.confine_files, given `fs` and whether the template
    holds the view), then `chdir(workdir)`. Returns the names of those in effect.

    `uid` says whether `restrict` will change uids; `disabled` names layers to skip, so tests can
    exercise fallbacks.
    """
    layers: list[str] = []
    wanted = [flag for flag, name in ((CLONE_NEWNET, "netns"), (CLONE_NEWNS, "mountns-ro"), (CLONE_NEWIPC, "ipcns"))
              if name not in disabled]
    namespaces = 0
    if os.geteuid() == 0:
        for flag in wanted:
            try:
                _check(_libc.unshare(ctypes.c_int(flag)), "unshare")
                namespaces |= flag
            except LayerUnavailableError:
                pass
    elif wanted:
        try:
            _enter_user_namespace(sum(wanted))
            namespaces = sum(wanted)
        except OSError:
            pass
    if namespaces & CLONE_NEWNET:
        layers.append("netns")
    if namespaces & CLONE_NEWIPC:
        layers.append("ipcns")
    if namespaces & CLONE_NEWNS:
        try:
            shown = mounts.confine_files(workdir, uid=uid, fs=fs, view_held=view_held)
            layers += ["mountns-ro", "fsview"] if shown else ["mountns-ro"]
        except OSError:
            pass
    if "mountns-ro" not in layers:
        os.chdir(workdir)
        if "landlock-ro" not in disabled:
            try:
                _landlock_read_only_except(workdir)
                layers.append("landlock-ro")
            except OSError:
                pass
    return layers


def restrict(layers: list[str], workdir: str, *, uid: int | None, blocked: list[str], rlimits: dict[str, int],
             disabled: set[str]) -> list[str]:
    """The layers each process applies to itself after `enclose` (whose `layers` it extends, returning a
    new list): rlimits, its own uid, no capabilities, no_new_privs, death with its parent, the seccomp
    filter. Per process, not shared: the fork between the two must not count against RLIMIT_NPROC."""
    layers = list(layers)
    _set_rlimits(rlimits)
    layers.append("rlimits")
    # Without the mount namespace the runtime beneath `blocked` (e.g. /root) would become unreadable:
    # stay uid 0 then, but without capabilities.
    if uid is not None and "uid" not in disabled and ("mountns-ro" in layers or not blocked):
        _drop_to_uid(uid)
        layers.append("uid")
    else:
        if uid is not None:  # the runner gave the directory to `uid`; without CAP_DAC_OVERRIDE we need it back
            os.chown(workdir, os.getuid(), os.getgid())
        _drop_capabilities()
    _no_new_privs()
    # Cleared by the uid change above, so set afterwards: if the parent dies, so do we.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if "seccomp" not in disabled:
        try:  # last: nothing after it in this process needs the calls it denies
            syscall_filter.install(allow_ip="netns" in layers)
            layers.append("seccomp")
        except OSError:
            pass
    return layers


def new_pid_namespace() -> bool:
    """Make the next child of this process PID 1 of a new PID namespace; whether the kernel allowed it.

    As root directly; without root it works inside the user namespace `enclose` entered."""
    try:
        _check(_libc.unshare(ctypes.c_int(CLONE_NEWPID)), "unshare(CLONE_NEWPID)")
        return True
    except LayerUnavailableError:
        return False


def join_cgroups(directories: list[str]) -> list[str]:
    """Move this process (and so every process it starts) into each cgroup directory: the candidate's
    memory cap and CPU share (see cgroups.py, which made them). Before `enclose`: /sys becomes read-only.
    Returns ["cgroup"] when it joined them all, else [] (the layer is not claimed)."""
    try:
        for directory in directories:
            with open(os.path.join(directory, "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
    except OSError:
        return []
    return ["cgroup"] if directories else []


def hide_memory() -> None:
    """Make this process non-dumpable: a process of the same uid (there is one when the `uid` layer is
    missing) can then neither ptrace it nor open its /proc/<pid>/mem, /proc/<pid>/fd/*, /proc/<pid>/environ."""
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "PR_SET_DUMPABLE")


def die_with_parent() -> None:
    """Get SIGKILL when the process that started us exits (the runner, for the template)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # it already had
        os._exit(1)
