"""Limits and switches for one batch of candidates, validated once, in one place."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

# Every layer the child may apply (see isolation.py); `disabled_layers` may name any of them.
LAYERS = ("pidns", "netns", "seccomp-net", "mountns-ro", "landlock-ro", "ipcns", "uid", "cgroup", "memwatch")


MAX_TIMEOUT_S = 3600.0  # an hour per candidate: beyond it, a run is a hang, not a test


def host_memory_mb() -> int:
    """Physical memory of the host, in MB: no candidate or batch may be given more."""
    return (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) >> 20


def default_workers() -> int:
    """One worker per CPU this process may run on: candidates are CPU-bound."""
    return max(1, len(os.sched_getaffinity(0)))


@dataclass(frozen=True)
class SandboxConfig:
    """How long, how much and how many: limits applied to every candidate of a batch.

    `timeout_s` is the wall-clock budget of one candidate, tests included (its CPU limit is one second
    more). `memory_mb` bounds one candidate: each of its processes (address space) and, where the host
    lets us create cgroups, all its processes together (resident memory, shared memory and memfd
    included). `batch_memory_mb` bounds the whole batch the same way (default: `workers` x `memory_mb`,
    at most three quarters of the host's memory). `disabled_layers` switches off isolation layers, to
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
    disabled_layers: frozenset[str] = frozenset()
    batch_memory_mb: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout_s, int | float) and math.isfinite(self.timeout_s)
                and 0 < self.timeout_s <= MAX_TIMEOUT_S):
            raise ValueError(f"timeout_s must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} (got "
                             f"{self.timeout_s}): give the seconds one candidate may run, tests included")
        host = host_memory_mb()
        if self.memory_mb < 128:
            raise ValueError(f"memory_mb={self.memory_mb} is too small: the interpreter alone maps about 100 MB "
                             "of address space; give at least 128")
        if self.memory_mb > host:
            raise ValueError(f"memory_mb={self.memory_mb} is more than this host's {host} MB of memory: give at "
                             f"most {host}")
        if self.batch_memory_mb is None:
            object.__setattr__(self, "batch_memory_mb", max(self.memory_mb, min(self.workers * self.memory_mb,
                                                                                host * 3 // 4)))
        if not self.memory_mb <= self.batch_memory_mb <= host:
            raise ValueError(f"batch_memory_mb={self.batch_memory_mb} must be between memory_mb "
                             f"({self.memory_mb}) and this host's {host} MB")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1 (got {self.workers})")
        if self.max_processes < 2:
            raise ValueError(f"max_processes must be at least 2 (got {self.max_processes}): the candidate's own "
                             "process and threads count against it")
        for name in ("max_file_mb", "max_open_files", "max_output_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1 (got {getattr(self, name)})")
        unknown = set(self.disabled_layers) - set(LAYERS)
        if unknown:
            raise ValueError(f"unknown isolation layers {sorted(unknown)} in disabled_layers: choose from {LAYERS}")
        object.__setattr__(self, "disabled_layers", frozenset(self.disabled_layers))
