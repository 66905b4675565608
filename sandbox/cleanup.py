"""Remove a candidate's working directory whatever it left there, without recursion and without raising.

The candidate owns its directory and may fill it with anything: thousands of nested directories (deeper
than the interpreter's recursion limit and longer than PATH_MAX as a path), directories whose modes deny
reading or entering them, symbolic links to files it must not reach. `remove_tree` walks the tree with one
open directory descriptor at a time: it descends into a subdirectory by name relative to the current one
and climbs back through `..`, so neither the depth nor the length of a path matters. Memory is one list of
pending subdirectory names per level, so the cost is linear in the number of entries.

Only the tree's own directories have their mode changed (to 0700, so that they can be listed and
emptied); the parent of the tree (e.g. /tmp) is never touched. Symbolic links are removed, never followed.
The candidate's processes are all dead before this runs, so nothing moves the tree under the walk.
"""

from __future__ import annotations

import contextlib
import os
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _subdirectories(fd: int, errors: list[str]) -> list[str]:
    """Unlink every non-directory in the directory `fd`; return the names of its subdirectories."""
    with contextlib.suppress(OSError):
        os.chmod(fd, 0o700)
    subdirectories = []
    try:
        with os.scandir(fd) as entries:
            names = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    except OSError as exc:
        errors.append(f"list: {exc.strerror}")
        return []
    for name, is_dir in names:
        if is_dir:
            subdirectories.append(name)
            continue
        try:
            os.unlink(name, dir_fd=fd)
        except OSError as exc:
            errors.append(f"unlink {name!r}: {exc.strerror}")
    return subdirectories


def remove_tree(path: str) -> str | None:
    """Delete the directory `path` and everything beneath it. Never raises: returns None when the tree is
    gone, else a sentence saying what stayed behind (for the outcome's detail)."""
    errors: list[str] = []
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return None
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"could not remove {path}: {exc.strerror}"
    pending = [_subdirectories(fd, errors)]  # per level: subdirectories still to empty and remove
    names: list[str] = []  # the path from `path` down to the directory `fd` holds
    try:
        while pending:
            if pending[-1]:
                name = pending[-1].pop()
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    errors.append(f"open {name!r}: {exc.strerror}")
                    continue
                os.close(fd)
                fd = child
                names.append(name)
                pending.append(_subdirectories(fd, errors))
                continue
            pending.pop()
            if not names:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            try:
                os.rmdir(names.pop(), dir_fd=fd)
            except OSError as exc:
                errors.append(f"rmdir: {exc.strerror}")
    except OSError as exc:
        errors.append(f"walk: {exc.strerror}")
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        errors.append(f"rmdir {path}: {exc.strerror}")
    if not errors:
        return None
    return f"could not remove all of {path} ({len(errors)} errors, first: {errors[0]})"
