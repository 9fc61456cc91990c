"""The container's directory seen from the host: what is in it (to tell what a call changed),
how much disk it uses, and, for a root server, handing new entries to the container's uid.

The walk never follows a symbolic link: the code inside may point one anywhere (the server's
DuckDB file, /etc/shadow), and the host must not read through it. Links are neither counted
nor reported as changed files; whoever reads a container's files on the host must open them
without following links as well (docs/sandbox.md).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(slots=True)
class Scan:
    """One walk of the directory: each regular file's (mtime_ns, size, inode) and the disk used."""

    files: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    disk_bytes: int = 0


def scan(root: Path, *, owner: int | None = None) -> Scan:
    """Walk ``root`` without following links. With ``owner``, entries (links too) owned by
    anyone else are given to ``owner`` first: the server adds files as root, and the code
    running as ``owner`` must be able to change them.

    Every directory is opened relative to its parent's descriptor with O_NOFOLLOW, and every
    chown is made relative to it without following links: a process left running in the
    sandbox may swap a directory for a link to /etc while a root server walks, and the walk
    must neither read nor chown through it.
    """
    result = Scan()
    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return result
    # Depth first, one open descriptor per level (not per directory waiting its turn).
    stack: list[tuple[int, Iterator[str], str]] = [(top, iter(_names(top)), "")]
    while stack:
        fd, names, relative = stack[-1]
        name = next(names, None)
        if name is None:
            os.close(fd)
            stack.pop()
            continue
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if owner is not None and (info.st_uid != owner or info.st_gid != owner):
                os.chown(name, owner, owner, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue  # removed meanwhile
        result.disk_bytes += info.st_blocks * 512
        path = f"{relative}{name}"
        if stat.S_ISDIR(info.st_mode):
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # swapped for a link, removed, or too deep for our descriptors
            stack.append((child, iter(_names(child)), f"{path}/"))
        elif stat.S_ISREG(info.st_mode):
            result.files[path] = (info.st_mtime_ns, info.st_size, info.st_ino)
    return result


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _names(fd: int) -> list[str]:
    try:
        return os.listdir(fd)
    except OSError:
        return []


def disk_bytes(root: Path) -> int:
    return scan(root).disk_bytes


def changed(before: Scan, after: Scan) -> list[str]:
    """Files of ``after`` that are new or differ from ``before``, sorted."""
    return sorted(name for name, meta in after.files.items() if before.files.get(name) != meta)
