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
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(slots=True)
class Scan:
    """One walk of the directory: each regular file's (mtime_ns, size, inode) and the disk used."""

    files: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    disk_bytes: int = 0


def scan(root: Path, *, owner: int | None = None) -> Scan:
    """Walk ``root`` without following links. With ``owner``, entries (links too) owned by
    anyone else are given to ``owner`` first (lchown): the server adds files as root, and the
    code running as ``owner`` must be able to change them."""
    result = Scan()
    stack = [(str(root), "")]
    while stack:
        path, relative = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue  # removed meanwhile, or a directory the code made unreadable
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
                if owner is not None and (info.st_uid != owner or info.st_gid != owner):
                    os.lchown(entry.path, owner, owner)
            except OSError:
                continue
            result.disk_bytes += info.st_blocks * 512
            name = f"{relative}{entry.name}"
            if stat.S_ISDIR(info.st_mode):
                stack.append((entry.path, f"{name}/"))
            elif stat.S_ISREG(info.st_mode):
                result.files[name] = (info.st_mtime_ns, info.st_size, info.st_ino)
    return result


def disk_bytes(root: Path) -> int:
    return scan(root).disk_bytes


def changed(before: Scan, after: Scan) -> list[str]:
    """Files of ``after`` that are new or differ from ``before``, sorted."""
    return sorted(name for name, meta in after.files.items() if before.files.get(name) != meta)
