"""The candidate's file system, made of mounts in namespaces of its own: the view, its working directory, /proc.

- `enter_view` (the template, once per batch): a mount namespace where what view.py lists is covered by
  empty tmpfs (files by /dev/null) and the Python runtime is mounted back at its own paths over the
  covers. Every candidate's namespace is a copy of it, so the few hundred mounts are made once per batch.
- `confine_files` (each candidate, in its copy): its own tmpfs over the batch's temp directory, bounded
  in bytes (`size=`) and files (`nr_inodes=`), holding its working directory; then every mount read-only
  but that tmpfs. Whatever the candidate writes lives in memory charged to its cgroup and goes when its
  namespace does: removing it is the kernel's unmount, whatever the candidate made.
- `fresh_proc` (the PID namespace's init): a /proc that shows that namespace only.

Standard library only: `harness.py` loads this file (through isolation.py) as a top-level module.
"""

from __future__ import annotations

import ctypes
import os
import stat

if __package__:
    from sandbox.kernel import LayerUnavailableError, check, libc, syscall
else:  # loaded by harness.py as a top-level module
    from kernel import LayerUnavailableError, check, libc, syscall

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 0x1, 0x2, 0x4, 0x8, 0x1000, 0x4000, 0x40000
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 0x1, os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2
# Syscalls numbered 424 and above are the same on every architecture.
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
COVER = "mode=755,size=64k,nr_inodes=1024"  # an empty directory, room for the paths mounted back into it


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda s: s.encode() if s is not None else None  # noqa: E731
    check(libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
          f"mount {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _mount_setattr(path: str, flags: int, attr_set: int = 0, attr_clr: int = 0) -> None:
    attr = _MountAttr(attr_set, attr_clr, 0, 0)
    check(syscall(SYS_MOUNT_SETATTR, ctypes.c_int(AT_FDCWD), path.encode(), ctypes.c_uint(flags),
                  ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))), f"mount_setattr {path}")


def blocking_ancestor(path: str) -> str | None:
    """The highest ancestor of `path` that other users cannot traverse, if any."""
    parts = path.strip("/").split("/")
    for depth in range(1, len(parts)):
        ancestor = "/" + "/".join(parts[:depth])
        if os.stat(ancestor).st_mode & 0o005 != 0o005:
            return ancestor
    return None


def cover(path: str, expose: list[str], options: str = COVER) -> None:
    """Cover `path` (a directory with an empty tmpfs mounted with `options`, anything else with /dev/null),
    then mount each outermost path of `expose` beneath it back at its own path: cloned before the cover
    (with the mounts beneath it), moved onto a directory made in the cover after."""
    inside = sorted(p for p in expose if p.startswith(path.rstrip("/") + "/"))
    inside = [p for p in inside if not any(p.startswith(other + "/") for other in inside)]
    clones = []
    try:
        for p in inside:
            clones.append(check(syscall(SYS_OPEN_TREE, ctypes.c_int(AT_FDCWD), p.encode(),
                                        ctypes.c_uint(OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)),
                                f"open_tree {p}"))
        if stat.S_ISDIR(os.lstat(path).st_mode):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, options)
        else:
            mount("/dev/null", path, None, MS_BIND)
        for p, fd in zip(inside, clones):
            os.makedirs(p, mode=0o755, exist_ok=True)
            check(syscall(SYS_MOVE_MOUNT, ctypes.c_int(fd), b"", ctypes.c_int(AT_FDCWD), p.encode(),
                          ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH)), f"move_mount {p}")
    finally:
        for fd in clones:
            os.close(fd)


def build_view(view: dict) -> None:
    """In a private mount namespace: cover `view["hide"]` (shallowest first), keeping `view["expose"]`
    reachable, and make sure `view["temp_root"]` exists (in a cover, if it is hidden)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    for path in view["hide"]:
        if os.path.lexists(path):
            cover(path, view["expose"])
    os.makedirs(view["temp_root"], mode=0o755, exist_ok=True)


def enter_view(view: dict) -> bool:
    """Move this process (the template) into a new mount namespace holding the view; whether it holds. On
    a refusal part way, back to the namespace it came from, unchanged, and False (nothing claimed)."""
    original = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        check(libc.unshare(ctypes.c_int(CLONE_NEWNS)), "unshare(CLONE_NEWNS)")
        try:
            build_view(view)
            return True
        except OSError:
            check(libc.setns(ctypes.c_int(original), ctypes.c_int(CLONE_NEWNS)), "setns")
            return False
    except LayerUnavailableError:
        return False
    finally:
        os.close(original)


def confine_files(workdir: str, *, uid: int | None, fs: dict, view_held: bool) -> bool:
    """In the candidate's fresh mount namespace: its tmpfs working directory (see the module docstring), the
    runtime reachable by `uid`, everything else read-only; then `chdir(workdir)`. Whether the view is in
    effect: the template's (`view_held`), else built here when `fs["build"]` says so (without root).

    Without a view, the tmpfs covers `workdir` itself, and only the directories that keep `uid` from the
    runtime (`fs["blocked"]`, e.g. /root) are covered, the runtime mounted back into them.
    """
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    shown = view_held
    if not shown and fs["build"]:
        try:
            build_view(fs["view"])
            shown = True
        except OSError:
            pass
    if not shown:
        for path in fs["blocked"]:
            cover(path, fs["expose"])
    mount_point = fs["view"]["temp_root"] if shown else workdir
    cover(mount_point, fs["expose"], f"{fs['tmpfs']},mode={755 if shown else 700}")
    if shown:
        os.makedirs(workdir, mode=0o700, exist_ok=True)
    if uid is not None:
        os.chown(workdir, uid, uid)
    _mount_setattr("/", AT_RECURSIVE, attr_set=MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID)
    _mount_setattr(mount_point, 0, attr_clr=MOUNT_ATTR_RDONLY)
    os.chdir(workdir)
    return shown


def fresh_proc() -> bool:
    """In the first process of a new PID namespace: a private mount namespace with a /proc of this
    namespace mounted read-only over the host's. False (nothing claimed) when the kernel refuses."""
    try:
        check(libc.unshare(ctypes.c_int(CLONE_NEWNS)), "unshare(CLONE_NEWNS)")
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        mount("proc", "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        return True
    except (LayerUnavailableError, OSError):
        return False
