"""Batch memory accounting where cgroups cannot be made: the fallback of the `cgroup` layer's memory caps.

A thread samples, every `interval_s`, the memory of each running candidate: the sum over every process of
the candidate's private uid (so it needs the `uid` layer) of its resident memory (`VmRSS`: anonymous,
file-backed and shared pages it maps), plus the size of each memfd or /dev/shm file those processes hold
open (counted once per file, mapped or not), plus the /dev/shm files the uid owns. A candidate over
`memory_mb` is killed; when the batch's total is over `batch_memory_mb`, the largest candidate is killed,
until it is not. Both are reported as `memory`.

What it does not do: stop an allocation as it happens. Between two samples a candidate may grow by what
it can allocate in `interval_s` (bounded per process by the address-space limit), so the caps hold to
within that much; pages the kernel accounts to no process (a memfd whose descriptors are all closed
while still mapped is counted through the mapping) are the limit of what /proc shows.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class _Watched:
    limit_bytes: int
    kill: Callable[[str], None]  # ends the candidate, saying why


def _resident_bytes(pid: str) -> int:
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    return 0


def _shared_files(pid: str, seen: set[tuple[int, int]]) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            path = f"/proc/{pid}/fd/{fd}"
            with contextlib.suppress(OSError):
                target = os.readlink(path)
                if target.startswith(("/memfd:", "/dev/shm/")):
                    info = os.stat(path)
                    if (info.st_dev, info.st_ino) not in seen:
                        seen.add((info.st_dev, info.st_ino))
                        total += info.st_blocks * 512
    return total


def usage_by_uid(uids: set[int]) -> dict[int, int]:
    """Bytes held by the processes (and /dev/shm files) of each uid in `uids`, as described above."""
    usage = dict.fromkeys(uids, 0)
    seen: set[tuple[int, int]] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            uid = os.stat(f"/proc/{pid}").st_uid
            if uid in usage:
                usage[uid] += _resident_bytes(pid) + _shared_files(pid, seen)
    with contextlib.suppress(OSError), os.scandir("/dev/shm") as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if info.st_uid in usage and (info.st_dev, info.st_ino) not in seen:
                    usage[info.st_uid] += info.st_blocks * 512
    return usage


class MemoryWatch:
    """The sampling thread of one batch; `watch`/`forget` register a running candidate by its uid."""

    def __init__(self, batch_memory_mb: int, interval_s: float = 0.1) -> None:
        self._batch_bytes = batch_memory_mb << 20
        self._interval_s = interval_s
        self._watched: dict[int, _Watched] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sandbox-memwatch", daemon=True)
        self._thread.start()

    def watch(self, uid: int, memory_mb: int, kill: Callable[[str], None]) -> None:
        with self._lock:
            self._watched[uid] = _Watched(memory_mb << 20, kill)

    def forget(self, uid: int) -> None:
        with self._lock:
            self._watched.pop(uid, None)

    def check(self) -> None:
        """One sample: kill each candidate over its cap, then the largest ones while the batch is over."""
        with self._lock:
            watched = dict(self._watched)
        if not watched:
            return
        usage = usage_by_uid(set(watched))
        for uid, used in list(usage.items()):
            if used > watched[uid].limit_bytes:
                watched[uid].kill(f"its processes held {used >> 20} MB together, over memory_mb "
                                  f"({watched[uid].limit_bytes >> 20} MB)")
                del usage[uid]
        while usage and sum(usage.values()) > self._batch_bytes:
            uid = max(usage, key=usage.__getitem__)
            watched[uid].kill(f"the batch held {sum(usage.values()) >> 20} MB, over batch_memory_mb "
                              f"({self._batch_bytes >> 20} MB), and this candidate was the largest "
                              f"({usage[uid] >> 20} MB)")
            del usage[uid]

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.check()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
