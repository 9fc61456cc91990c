"""Containers' files on disk: one directory per container, ``<root>/<container id>/``, which the
container's sandbox mounts at ``/mnt/data``.

The root is ``<storage path>.containers/`` beside the DuckDB file (or a directory the
configuration names); a store in memory keeps its containers in a temporary directory removed
when it closes. A container's files are what its code and its clients put there, so nothing
here trusts what it finds: code in the sandbox may replace any file or directory with a
symbolic link to anywhere (the DuckDB file, ``/etc/shadow``). Every path is walked from the
container's directory one component at a time, each opened relative to its parent's descriptor
with ``O_NOFOLLOW``; only regular files are read or reported; a walk is ``os.fwalk``, which
never follows a link; a container's directory is removed with ``shutil.rmtree``, which does
not either (on Linux it works on descriptors too).

An upload is written to a temporary name in the directory, synced, and renamed into place
before its row is committed; a file is unlinked after its row is deleted.

Example::

    dirs = ContainerDirs.beside("troupe.duckdb")            # troupe.duckdb.containers/
    dirs.make("cntr_1")
    dirs.write("cntr_1", "data.csv", io.BytesIO(b"a,b\\n"))   # (size, mtime_ns)
    dirs.read("cntr_1", "data.csv")                         # b'a,b\\n'
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

from .base import StorageError

__all__ = ["ContainerDirs", "check_relative"]

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}\Z")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY_CHUNK = 1 << 20


def check_relative(path: str) -> list[str]:
    """The components of a path relative to a container's directory.

    Raises:
        StorageError: empty, absolute, with an empty, ``.`` or ``..`` component, or a NUL.
    """
    parts = path.split("/")
    if not path or "\x00" in path or any(p in ("", ".", "..") for p in parts):
        raise StorageError(f"not a path inside a container: {path!r}")
    return parts


class ContainerDirs:
    """The containers' directories under ``root``; ``temporary``: ``root`` is removed by :meth:`close`."""

    def __init__(self, root: str, *, temporary: bool = False) -> None:
        self.root = os.path.abspath(root)
        self._temporary = temporary
        try:
            os.makedirs(self.root, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot make the containers' directory {self.root}: {exc}") from exc

    @classmethod
    def beside(cls, database: str, directory: str = "") -> ContainerDirs:
        """``directory`` if given; else ``<database>.containers``, a temporary one for ``:memory:``."""
        if directory:
            return cls(directory)
        if database == ":memory:":
            return cls(tempfile.mkdtemp(prefix="troupe-containers-"), temporary=True)
        return cls(database + ".containers")

    def path(self, container_id: str) -> str:
        """The absolute path of a container's directory."""
        if not _ID.match(container_id):
            raise StorageError(f"not a container id: {container_id!r}")
        return os.path.join(self.root, container_id)

    def make(self, container_id: str) -> str:
        """Make a container's directory (there already is fine); its path."""
        path = self.path(container_id)
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot make the directory of container {container_id}: {exc}") from exc
        return path

    def remove(self, container_id: str) -> None:
        """Remove a container's directory and everything in it (missing is fine)."""
        shutil.rmtree(self.path(container_id), ignore_errors=True)

    def close(self) -> None:
        if self._temporary:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- files -------------------------------------------------------------------------

    def exists(self, container_id: str, relative: str) -> bool:
        """Whether anything (a file, a directory, a link) is at ``relative``."""
        with self._parent(container_id, relative) as (fd, name):
            if fd is None:
                return False
            try:
                os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                return False
            return True

    def write(self, container_id: str, name: str, source: BinaryIO) -> tuple[int, int]:
        """Write ``source`` (read to its end) as ``name`` in the container's top directory,
        replacing what is there unless it is a directory; ``(size, mtime_ns)`` of the file.

        Raises:
            StorageError: ``name`` is not a plain name, the directory is missing, the disk refused.
        """
        if "/" in name or name in ("", ".", ".."):
            raise StorageError(f"not a file name: {name!r}")
        partial = f".troupe-{secrets.token_hex(8)}.partial"
        try:
            top = os.open(self.path(container_id), _DIR_FLAGS)
        except OSError as exc:
            raise StorageError(f"container {container_id} has no directory: {exc}") from exc
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=top)  # fmt: skip
            try:
                with os.fdopen(fd, "wb", closefd=False) as out:
                    shutil.copyfileobj(source, out, _COPY_CHUNK)
                os.fsync(fd)
                info = os.fstat(fd)
            finally:
                os.close(fd)
            os.replace(partial, name, src_dir_fd=top, dst_dir_fd=top)
            return info.st_size, info.st_mtime_ns
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(partial, dir_fd=top)
            raise StorageError(f"cannot write {name!r} in container {container_id}: {exc}") from exc
        finally:
            os.close(top)

    def stat(self, container_id: str, relative: str) -> tuple[int, int] | None:
        """``(size, mtime_ns)`` of the regular file at ``relative``; None if there is none (a
        link, a directory, nothing)."""
        with self._parent(container_id, relative) as (fd, name):
            if fd is None:
                return None
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                return None
            return (info.st_size, info.st_mtime_ns) if stat.S_ISREG(info.st_mode) else None

    def read(self, container_id: str, relative: str) -> bytes | None:
        """The bytes of the regular file at ``relative``; None if there is none."""
        with self._parent(container_id, relative) as (fd, name):
            if fd is None:
                return None
            try:
                file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
            except OSError:
                return None
            try:
                if not stat.S_ISREG(os.fstat(file).st_mode):  # a FIFO or a device: never read
                    return None
                with os.fdopen(file, "rb", closefd=False) as f:
                    return f.read()
            except OSError as exc:
                raise StorageError(f"cannot read {relative!r} in container {container_id}: {exc}") from exc
            finally:
                os.close(file)

    def unlink(self, container_id: str, relative: str) -> None:
        """Remove the file at ``relative`` (nothing there, or a directory, is fine)."""
        with self._parent(container_id, relative) as (fd, name):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)

    def scan(self, container_id: str) -> dict[str, tuple[int, int]]:
        """Every regular file under the container's directory: relative path → ``(size,
        mtime_ns)``. Links are neither followed nor listed; an empty dict if there is no directory."""
        found: dict[str, tuple[int, int]] = {}
        top = self.path(container_id)
        try:
            for folder, _dirs, names, fd in os.fwalk(top, follow_symlinks=False):
                prefix = os.path.relpath(folder, top)
                for name in names:
                    try:
                        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue  # removed meanwhile
                    if stat.S_ISREG(info.st_mode):
                        relative = name if prefix == "." else f"{prefix}/{name}"
                        found[relative] = (info.st_size, info.st_mtime_ns)
        except OSError:
            pass
        return found

    @contextlib.contextmanager
    def _parent(self, container_id: str, relative: str) -> Iterator[tuple[int | None, str]]:
        """``(descriptor of the directory holding relative's last component, that component)``,
        walked without following links; ``(None, name)`` when a directory on the way is missing
        or is not a directory."""
        parts = check_relative(relative)
        try:
            fd = os.open(self.path(container_id), _DIR_FLAGS)
        except OSError:
            yield None, parts[-1]
            return
        try:
            for part in parts[:-1]:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    os.close(fd)
                    fd = -1
                    break
                os.close(fd)
                fd = child
            yield (fd if fd >= 0 else None), parts[-1]
        finally:
            if fd >= 0:
                os.close(fd)
