"""Control groups for a batch: one memory cap for the whole batch, one per candidate, equal CPU shares.

Made by the runner (root only: the cgroup file system belongs to root), joined by each candidate's
tests' process before it confines itself (`isolation.join_cgroups`), so the candidate's process and
everything it starts are inside. Layout, under the runner's own cgroup of each hierarchy:

    sandbox-<random>/            memory: batch_memory_mb        cpu: workers x the default weight
        c<index>-<random>/       memory: memory_mb              cpu: the default weight

- **Memory** counts every page a candidate's processes hold, together: anonymous memory, page cache,
  and tmpfs pages, which is where `memfd_create`, `/dev/shm` and the working directory's memory lives.
  Over the candidate's cap, the kernel's OOM killer ends a process of that group, and the runner, reading
  the group's OOM count, reports `memory`. The batch's cap is not left to the kernel, which would end the
  largest *process* of the batch, whatever each candidate holds in files it has unmapped: its OOM killer
  is off in the batch's group (v1: processes that allocate wait at the cap; v2: `memory.high`, which
  throttles), and this class is the meter of the sandbox's own watch (memwatch.py), which ends the
  candidate whose group holds the most. Swap is capped at zero where the kernel accounts it, so a cap
  cannot be dodged by swapping.
- **CPU**: siblings of equal weight get equal CPU time when they compete, whatever the number of
  processes or threads in each, so a candidate that forks 30 busy loops gets one candidate's share.

Both cgroup v2 (the unified hierarchy, where our cgroup may enable the memory and cpu controllers for
its children) and v1 (separate memory and cpu hierarchies) are handled. Where neither can be written the
runner falls back to `memwatch.py` for memory and has no CPU share; the isolation report says which.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass

_UNLIMITED_WEIGHT = {"v1": 1024, "v2": 100}  # cpu.shares, cpu.weight: the kernel's defaults


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(hierarchy root, mount point, fstype, super options) of every cgroup mount of this process."""
    found = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append((fields[3], fields[4], tail[0], set(tail[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" for v2."""
    paths = {}
    with open("/proc/self/cgroup") as cgroup:
        for line in cgroup:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


def _directory(root: str, mount_point: str, path: str) -> str | None:
    relative = path[len(root):] if root != "/" and path.startswith(root) else path
    directory = os.path.join(mount_point, relative.lstrip("/"))
    return directory if os.path.isdir(directory) else None


def _bases() -> tuple[str, dict[str, str]] | None:
    """The cgroup version we can use and, per controller ("memory", "cpu"), the directory to create the
    batch's group in; None where neither version lets us."""
    mounts, own = _mounts(), _own_paths()
    for root, mount_point, fstype, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        base = _directory(root, mount_point, own[""])
        if base is None or not os.path.exists(os.path.join(base, "cgroup.subtree_control")):
            continue
        with contextlib.suppress(OSError):
            _write(os.path.join(base, "cgroup.subtree_control"), "+memory +cpu")
        with open(os.path.join(base, "cgroup.subtree_control")) as enabled:
            if {"memory", "cpu"} <= set(enabled.read().split()):
                return "v2", {"memory": base, "cpu": base}
    bases = {}
    for controller in ("memory", "cpu"):
        for root, mount_point, fstype, options in mounts:
            if fstype == "cgroup" and controller in options and controller in own:
                base = _directory(root, mount_point, own[controller])
                if base is not None and os.access(base, os.W_OK):
                    bases[controller] = base
                    break
    return ("v1", bases) if len(bases) == 2 else None


@dataclass(frozen=True)
class CandidateGroup:
    """One candidate's groups: the directories its tests' process joins, and what the kernel did there."""

    version: str
    memory: str
    cpu: str

    @property
    def directories(self) -> list[str]:
        return sorted({self.memory, self.cpu})

    def _read_int(self, name: str) -> int | None:
        with contextlib.suppress(OSError, ValueError), open(os.path.join(self.memory, name)) as f:
            return int(f.read())
        return None

    def usage(self) -> int:
        """Bytes charged to this candidate's group now (0 once it is gone)."""
        return self._read_int("memory.current" if self.version == "v2" else "memory.usage_in_bytes") or 0

    def _count(self, name: str, key: str) -> int:
        with contextlib.suppress(OSError, ValueError), open(os.path.join(self.memory, name)) as f:
            for line in f:
                field, _, value = line.partition(" ")
                if field == key:
                    return int(value)
        return 0

    def oom_kills(self) -> int:
        """Processes of this candidate the kernel's OOM killer ended (its own cap, or the host's memory)."""
        if self.version == "v2":
            return self._count("memory.events", "oom_kill")
        return self._count("memory.oom_control", "oom_kill")

    def hit_own_cap(self) -> bool:
        """Whether this candidate reached its own cap (the kernel's OOM kills here then came from it). In v1
        by its high-water mark, within a megabyte of its limit: recent kernels no longer count `failcnt`."""
        if self.version == "v2":
            return self._count("memory.events", "max") > 0
        peak, limit = self._read_int("memory.max_usage_in_bytes"), self._read_int("memory.limit_in_bytes")
        return peak is not None and limit is not None and peak >= limit - (1 << 20)


class BatchGroups:
    """The batch's cgroups; `available` is False (and every method a no-op) where they cannot be made.

    Also the meter of the batch's memory watch (memwatch.Meter): candidates are keyed by their
    CandidateGroup; the kernel enforces each one's own cap."""

    own_caps = False
    name = "cgroup"

    def __init__(self, batch_memory_mb: int, workers: int, *, create: bool = True) -> None:
        self.version: str | None = None
        self._batch: dict[str, str] = {}
        self._pending: list[str] = []  # candidates' groups that were still busy when released
        self._batch_bytes = 0
        if not create or os.geteuid() != 0:
            return
        try:
            found = _bases()
            if found is None:
                return
            version, bases = found
            name = f"sandbox-{secrets.token_hex(6)}"
            for controller, base in bases.items():
                path = os.path.join(base, name)
                if path not in self._batch.values():
                    os.mkdir(path, 0o755)
                self._batch[controller] = path
            if version == "v2":
                _write(os.path.join(self._batch["memory"], "cgroup.subtree_control"), "+memory +cpu")
                _write(os.path.join(self._batch["memory"], "memory.high"), str(batch_memory_mb << 20))
            else:
                self._limit(version, self._batch["memory"], batch_memory_mb)
                _write(os.path.join(self._batch["memory"], "memory.oom_control"), "1")  # the watch chooses
            self._batch_bytes = batch_memory_mb << 20
            _write(os.path.join(self._batch["cpu"], "cpu.weight" if version == "v2" else "cpu.shares"),
                   str(min(_UNLIMITED_WEIGHT[version] * workers, 10_000 if version == "v2" else 262_144)))
            self.version = version
        except OSError:
            self.close()

    @classmethod
    def unavailable(cls) -> BatchGroups:
        """A batch without cgroups (the `cgroup` layer switched off)."""
        return cls(0, 0, create=False)

    @property
    def available(self) -> bool:
        return self.version is not None

    def usage(self, keys: set) -> dict:
        """Bytes charged to each candidate's group (memwatch.Meter)."""
        return {group: group.usage() for group in keys}

    def excess(self, usage: dict) -> int:
        """Bytes the batch must give back now (memwatch.Meter): v1, at least one while a process of the batch
        waits at its cap (`under_oom`); v2, what its group holds over `memory.high`."""
        if self.version is None:
            return 0
        if self.version == "v1":
            with contextlib.suppress(OSError), open(os.path.join(self._batch["memory"], "memory.oom_control")) as f:
                return 1 if "under_oom 1" in f.read() else 0
            return 0
        with contextlib.suppress(OSError, ValueError), open(os.path.join(self._batch["memory"], "memory.current")) as f:
            return max(0, int(f.read()) - self._batch_bytes)
        return 0

    @staticmethod
    def _limit(version: str, directory: str, megabytes: int) -> None:
        limit = str(megabytes << 20)
        if version == "v2":
            _write(os.path.join(directory, "memory.max"), limit)
            with contextlib.suppress(OSError):
                _write(os.path.join(directory, "memory.swap.max"), "0")
            return
        _write(os.path.join(directory, "memory.limit_in_bytes"), limit)
        with contextlib.suppress(OSError):  # only where the kernel accounts swap
            _write(os.path.join(directory, "memory.memsw.limit_in_bytes"), limit)

    def candidate(self, index: int, memory_mb: int) -> CandidateGroup | None:
        """A fresh pair of groups for one candidate, or None when the batch has none (or making one failed)."""
        if self.version is None:
            return None
        name = f"c{index}-{secrets.token_hex(4)}"
        made: list[str] = []
        try:
            for controller in ("memory", "cpu"):
                path = os.path.join(self._batch[controller], name)
                if path not in made:
                    os.mkdir(path, 0o755)
                    made.append(path)
            group = CandidateGroup(self.version, os.path.join(self._batch["memory"], name),
                                   os.path.join(self._batch["cpu"], name))
            self._limit(self.version, group.memory, memory_mb)
            if self.version == "v1":  # a new group inherits its parent's switch: its own cap is the kernel's
                _write(os.path.join(group.memory, "memory.oom_control"), "0")
            return group
        except OSError:
            for path in made:
                _remove(path)
            return None

    def release(self, group: CandidateGroup | None) -> None:
        """Remove a candidate's groups now if the kernel lets us, else when the batch closes: a group goes
        once its last process is reaped, which may trail the SIGKILL by a few milliseconds, and the
        candidate's thread should not wait for that."""
        if group is not None:
            self._pending.extend(path for path in group.directories if not _remove(path, attempts=1))

    def close(self) -> None:
        """Remove every group left, the batch's last."""
        for path in [*self._pending, *set(self._batch.values())]:
            _remove(path)
        self._pending, self._batch = [], {}
        self.version = None


def _remove(path: str, attempts: int = 100) -> bool:
    """rmdir a cgroup, retrying every 10 ms while it still holds a dying process; whether it is gone."""
    for attempt in range(attempts):
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if attempt + 1 < attempts:
                time.sleep(0.01)
    return False
