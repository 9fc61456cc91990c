"""Rewrite a DuckDB file whole, so that what was deleted from it is gone from it.

A deleted row is not gone from a DuckDB file: its bytes stay in the WAL until a checkpoint,
and in free blocks after it, until something else is written there. Troupe versions before
schema 10 stored durable runs' requests with their MCP credentials (then deleted them), so a
file they wrote may still hold those bytes. :func:`rewrite` copies every table into a new file
(DuckDB's ``COPY FROM DATABASE``) and puts it in the old one's place, with no WAL:
:class:`~troupe.storage.DuckDBStore` does it by itself when it opens such a file, and
``troupe vacuum`` does it on demand (the server stopped).

The old file's blocks are freed by the file system, not overwritten: on a disk that must not
keep them, the file system or the disk has to be encrypted (docs/security.md).
"""

from __future__ import annotations

import contextlib
import os

import duckdb

__all__ = ["rewrite"]


def _quoted(path: str) -> str:
    return "'" + path.replace("'", "''") + "'"


def rewrite(path: str | os.PathLike[str], *, row_group_size: int | None = None) -> None:
    """Replace the DuckDB file at ``path`` with a copy of its tables and rows (and no WAL).

    Safe to interrupt: the copy is made beside the file (``<path>.rewrite``) and moved over it
    in one rename; a copy left by an interrupted rewrite is thrown away by the next one.

    Args:
        path: the database file; no process may have it open.
        row_group_size: the new file's ``ROW_GROUP_SIZE`` (DuckDB's default when None).

    Raises:
        duckdb.Error: the file cannot be opened (another process holds it) or copied.
    """
    path = os.fspath(path)
    copy = path + ".rewrite"
    for leftover in (copy, copy + ".wal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(leftover)
    options = f" (ROW_GROUP_SIZE {row_group_size})" if row_group_size else ""
    conn = duckdb.connect(":memory:", config={"temp_directory": path + ".tmp"})
    try:
        conn.execute(f"ATTACH {_quoted(path)} AS old")  # replays the WAL
        conn.execute(f"ATTACH {_quoted(copy)} AS new{options}")
        conn.execute("COPY FROM DATABASE old TO new")
        conn.execute("CHECKPOINT new")
        conn.execute("DETACH new")
        conn.execute("DETACH old")  # checkpoints the old file: its WAL is in it now
    finally:
        conn.close()
    with contextlib.suppress(FileNotFoundError):
        os.remove(path + ".wal")  # (none is left after DETACH; never replay one onto the copy)
    os.replace(copy, path)
