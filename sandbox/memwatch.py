"""The batch's memory victim, chosen by the sandbox: a thread that samples each running candidate's memory
and, when the batch is over `batch_memory_mb`, ends the candidate that holds the most.

The kernel's own choice would be wrong: its OOM killer ends the largest *process* (by resident memory),
and memory a candidate holds in memfd or tmpfs files it has unmapped belongs to no process, so an honest
candidate of 300 MB would die for one holding 448 MB in unmapped memfds. Here each candidate is measured
as a whole, by a *meter*:

- `UidMeter` (the `memwatch` layer, where no cgroup can be made): the sum over every process of the
  candidate's private uid (so it needs the `uid` layer) of its resident memory (`VmRSS`), plus each memfd or
  /dev/shm file those processes hold open (once per file, mapped or not), plus the /dev/shm files the uid
  owns. It also enforces each candidate's own `memory_mb`, which nothing else does then.
- `cgroups.BatchGroups` (the `cgroup` layer): each candidate group's charged memory, memfd, tmpfs and page
  cache included. The kernel enforces each candidate's own cap; the batch's group has its OOM killer off
  (cgroup v1) or only throttles (v2, `memory.high`), so the batch's cap is this thread's to enforce.

A meter gives `usage(keys)` (bytes per candidate) and `excess(usage)`: how many bytes the batch must give
back now (0 when it is within its cap; a meter that does not enforce candidates' own caps reads it without
`usage`, so a sample of a batch within its cap costs one read). While the excess is positive the largest
candidate is ended, its usage counted as freed. Then, while a candidate ended for the batch still holds
over half of what it held (its memory is on its way back: a killed process takes a moment to free it),
nobody else is ended, for up to `SETTLE_S`.

What it does not do: stop an allocation as it happens where the meter is `UidMeter`: between two samples a
candidate may grow by what it can allocate in `interval_s` (bounded per process by the address-space
limit); with cgroups the kernel holds the batch at its cap meanwhile (v1: allocating processes wait).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

SETTLE_S = 1.0  # how long a candidate ended for the batch may take to give its memory back


class Meter(Protocol):
    own_caps: bool  # whether the watch must also end a candidate over its own memory_mb
    name: str  # how the detail names the measure ("cgroup", "memwatch")

    def usage(self, keys: set[Hashable]) -> dict[Hashable, int]: ...

    def excess(self, usage: dict[Hashable, int]) -> int: ...


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


class UidMeter:
    """Candidates keyed by their private uid, measured through /proc (see the module docstring)."""

    own_caps = True
    name = "memwatch"

    def __init__(self, batch_memory_mb: int) -> None:
        self._batch_bytes = batch_memory_mb << 20

    def usage(self, keys: set[Hashable]) -> dict[Hashable, int]:
        return usage_by_uid(keys)  # type: ignore[arg-type]

    def excess(self, usage: dict[Hashable, int]) -> int:
        return max(0, sum(usage.values()) - self._batch_bytes)


class MemoryWatch:
    """The sampling thread of one batch; `watch`/`forget` register a running candidate under its meter's key."""

    def __init__(self, batch_memory_mb: int, meter: Meter, interval_s: float = 0.1) -> None:
        self._batch_mb = batch_memory_mb
        self._meter = meter
        self._interval_s = interval_s
        self._watched: dict[Hashable, _Watched] = {}
        self._ended: dict[Hashable, tuple[int, float]] = {}  # ended for the batch: (bytes held, when)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sandbox-memwatch", daemon=True)
        self._thread.start()

    def watch(self, key: Hashable, memory_mb: int, kill: Callable[[str], None]) -> None:
        with self._lock:
            self._watched[key] = _Watched(memory_mb << 20, kill)

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._watched.pop(key, None)

    def check(self) -> None:
        """One sample: end each candidate over its own cap (UidMeter), then the largest while the batch is over."""
        with self._lock:
            watched = dict(self._watched)
        now = time.monotonic()
        self._ended = {key: ended for key, ended in self._ended.items() if now - ended[1] < SETTLE_S}
        if not watched or (not self._meter.own_caps and not self._ended and not self._meter.excess({})):
            return  # the kernel holds each candidate's cap, and the batch is within its own: nothing to read
        measured = self._meter.usage(set(watched) | set(self._ended))
        usage = {key: measured.get(key, 0) for key in watched if key not in self._ended}
        if self._meter.own_caps:
            for key, used in list(usage.items()):
                if used > watched[key].limit_bytes:
                    watched[key].kill(f"its processes held {used >> 20} MB together, over memory_mb "
                                      f"({watched[key].limit_bytes >> 20} MB; {self._meter.name})")
                    del usage[key]
        if any(measured.get(key, 0) > held // 2 for key, (held, _) in self._ended.items()):
            return  # the memory of a candidate ended for the batch is still coming back
        excess, total = self._meter.excess(usage), sum(usage.values())
        while usage and excess > 0:
            key = max(usage, key=usage.__getitem__)
            watched[key].kill(f"the batch reached batch_memory_mb ({self._batch_mb} MB; {self._meter.name}) with "
                              f"{total >> 20} MB, and this candidate held the most of it ({usage[key] >> 20} MB, "
                              "memfd and shared memory included)")
            self._ended[key] = (usage[key], now)
            excess -= usage.pop(key)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.check()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
