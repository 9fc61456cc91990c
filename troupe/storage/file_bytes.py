"""Uploaded files' bytes, on disk beside the DuckDB file: ``<path>.files/<file id>``.

Why not in DuckDB (a ``BLOB`` column): a checkpoint rewrites a table's newest row group and
holds its values in memory while it does (:mod:`troupe.storage.duckdb_store`, Memory), so a
few files of tens of megabytes inline would need more than the 128MB ``memory_limit`` the
storage actor runs with, and a checkpoint that fails under the limit invalidates the
database. On disk, a 32 MB upload costs DuckDB one small row, the bytes are written and read
without passing through DuckDB's buffer pool, and a backup copies ``<path>.files/`` with the
file (as it does ``<path>.journal/``).

A file is written to a temporary name, synced, and renamed into place before its row is
committed, and unlinked after its row is deleted: a crash between the two leaves at most an
unreferenced file, never a row without its bytes. A store in memory keeps its files in a
temporary directory removed when it closes.

Example::

    files = FileBytes.beside("troupe.duckdb")      # troupe.duckdb.files/
    files.write("file-abc", b"hello")
    files.read("file-abc")                         # b'hello'
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import BinaryIO

from .base import StorageError

__all__ = ["FileBytes"]


class FileBytes:
    """A directory of files named by id. ``temporary``: removed by :meth:`close`."""

    def __init__(self, directory: str, *, temporary: bool = False) -> None:
        self.directory = directory
        self._temporary = temporary
        os.makedirs(directory, exist_ok=True)

    @classmethod
    def beside(cls, database: str) -> FileBytes:
        """The directory of the DuckDB file ``database``; a temporary one for ``:memory:``."""
        if database == ":memory:":
            return cls(tempfile.mkdtemp(prefix="troupe-files-"), temporary=True)
        return cls(database + ".files")

    def _path(self, file_id: str) -> str:
        if not file_id or "/" in file_id or file_id.startswith("."):
            raise StorageError(f"not a file id: {file_id!r}")
        return os.path.join(self.directory, file_id)

    def write(self, file_id: str, data: bytes) -> None:
        """Store ``data`` as ``file_id``, durably (synced and renamed into place)."""
        path = self._path(file_id)
        partial = os.path.join(self.directory, f".{file_id}.partial")
        try:
            with open(partial, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(partial, path)
        except OSError as exc:
            raise StorageError(f"cannot store the file {file_id}: {exc}") from exc

    def read(self, file_id: str) -> bytes:
        """The bytes of ``file_id``.

        Raises:
            StorageError: they are missing or unreadable.
        """
        try:
            with open(self._path(file_id), "rb") as f:
                return f.read()
        except OSError as exc:
            raise StorageError(f"cannot read the file {file_id}: {exc}") from exc

    def open(self, file_id: str) -> BinaryIO:
        """The bytes of ``file_id`` as a file to read (and close), for copying without holding
        them all (a container's copy of a file).

        Raises:
            StorageError: they are missing or unreadable.
        """
        try:
            return open(self._path(file_id), "rb")
        except OSError as exc:
            raise StorageError(f"cannot read the file {file_id}: {exc}") from exc

    def remove(self, file_id: str) -> None:
        """Forget ``file_id`` (missing is fine)."""
        try:
            os.unlink(self._path(file_id))
        except FileNotFoundError:
            pass

    def close(self) -> None:
        if self._temporary:
            shutil.rmtree(self.directory, ignore_errors=True)
