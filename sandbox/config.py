"""Limits and switches for one batch of candidates, validated once, in one place."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

# Every layer the child may apply (see isolation.py); `disabled_layers` may name any of them.
LAYERS = ("pidns", "netns", "seccomp", "mountns-ro", "fsview", "landlock-ro", "ipcns", "uid", "cgroup", "memwatch")


MAX_TIMEOUT_S = 3600.0  # an hour per candidate: beyond it, a run is a hang, not a test
MAX_SOURCE_BYTES = 1 << 20  # a program, its tests or its helpers: HumanEval's largest test file is under 2 KB
WORKERS_PER_CPU = 16  # candidates that sleep or wait may share a CPU; more would only queue
MB_PER_WORKER = 128  # the least memory_mb a candidate may be given


def host_memory_mb() -> int:
    """Physical memory of the host, in MB: no candidate or batch may be given more."""
    return (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) >> 20


def default_workers() -> int:
    """One worker per CPU this process may run on: candidates are CPU-bound."""
    return max(1, len(os.sched_getaffinity(0)))


def max_workers() -> int:
    """The most candidates this machine may run at once: WORKERS_PER_CPU per CPU, and no more than fit its
    memory at the smallest memory_mb (each worker is a thread here and up to `max_processes` processes there)."""
    return max(1, min(WORKERS_PER_CPU * default_workers(), host_memory_mb() // MB_PER_WORKER))


def _check_count(name: str, value: object, low: int, high: int, hint: str) -> None:
    if not (type(value) is int and low <= value <= high):
        raise ValueError(f"{name} must be a whole number from {low} to {high} (got {value!r}): {hint}")


@dataclass(frozen=True)
class SandboxConfig:
    """How long, how much and how many: limits applied to every candidate of a batch.

    `timeout_s` is the wall-clock budget of one candidate, tests included (its CPU limit is one second
    more). `memory_mb` bounds one candidate: each of its processes (address space) and, where the host
    lets us create cgroups, all its processes together (resident memory, shared memory and memfd
    included). `batch_memory_mb` bounds the whole batch the same way (default: `workers` x `memory_mb`,
    at most three quarters of the host's memory). The working directory is a tmpfs of `max_disk_mb` and
    `max_files` entries (where the mount namespace holds). `hidden_paths` are covered in the candidate's
    view besides what it always hides (view.py). `disabled_layers` switches off isolation layers, to
    test the fallbacks or to run on a machine where a layer misbehaves; the outcome always reports the
    layers actually used.
    """

    timeout_s: float = 10.0
    memory_mb: int = 1024
    workers: int = field(default_factory=default_workers)
    max_processes: int = 32
    max_file_mb: int = 64
    max_open_files: int = 256
    max_output_bytes: int = 64 * 1024
    max_disk_mb: int = 64
    max_files: int = 10_000
    hidden_paths: tuple[str, ...] = ()
    disabled_layers: frozenset[str] = frozenset()
    batch_memory_mb: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout_s, int | float) and math.isfinite(self.timeout_s)
                and 0 < self.timeout_s <= MAX_TIMEOUT_S):
            raise ValueError(f"timeout_s must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} (got "
                             f"{self.timeout_s}): give the seconds one candidate may run, tests included")
        host = host_memory_mb()
        _check_count("workers", self.workers, 1, max_workers(), f"this machine runs at most {WORKERS_PER_CPU} "
                     f"per CPU and one per {MB_PER_WORKER} MB of memory")
        _check_count("memory_mb", self.memory_mb, MB_PER_WORKER, host, "the interpreter alone maps about 100 MB "
                     "of address space, and no candidate may have more than this host's memory")
        if self.batch_memory_mb is None:
            object.__setattr__(self, "batch_memory_mb", max(self.memory_mb, min(self.workers * self.memory_mb,
                                                                                host * 3 // 4)))
        _check_count("batch_memory_mb", self.batch_memory_mb, self.memory_mb, host, "the whole batch's memory, "
                     "from memory_mb up to this host's")
        _check_count("max_processes", self.max_processes, 2, 1024, "the candidate's own process and threads "
                     "count against it")
        _check_count("max_file_mb", self.max_file_mb, 1, host, "the largest file a candidate may write, in MB")
        _check_count("max_open_files", self.max_open_files, 16, 1 << 16, "the interpreter itself holds a few")
        _check_count("max_output_bytes", self.max_output_bytes, 1, 64 << 20, "output kept per stream; the rest "
                     "is read and dropped")
        _check_count("max_disk_mb", self.max_disk_mb, 1, self.memory_mb, "the size of the working directory's "
                     "tmpfs, whose pages count against memory_mb")
        _check_count("max_files", self.max_files, 16, 1_000_000, "files and directories the working directory "
                     "may hold")
        paths = tuple(self.hidden_paths)
        if len(paths) > 64 or not all(type(p) is str and os.path.isabs(p) for p in paths):
            raise ValueError(f"hidden_paths must be at most 64 absolute paths (got {paths[:3]!r}...): the files "
                             "and directories the candidate must not see, such as the tests file")
        object.__setattr__(self, "hidden_paths", paths)
        unknown = set(self.disabled_layers) - set(LAYERS)
        if unknown:
            raise ValueError(f"unknown isolation layers {sorted(unknown)} in disabled_layers: choose from {LAYERS}")
        object.__setattr__(self, "disabled_layers", frozenset(self.disabled_layers))
