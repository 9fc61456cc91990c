"""The plumbing of the areas that run on the files and vector stores' thread
(:class:`~troupe.storage.rag_executor.RagExecutor`), each on a DuckDB connection of its own, and
copy between the Files API's bytes and the containers' directories: the containers
(:mod:`.containers`) and the session artifacts (:mod:`.artifacts`).

Their work is mostly file I/O, which must not hold up the responses' writes on the store's own
connection; the thread runs their calls one at a time, in order, so what a call reads holds
until it writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb

from ..base import Order, Page, StorageError
from ..container_files import ContainerDirs
from ..file_bytes import FileBytes
from .connection import check_page_args, transaction

__all__ = ["SideConnection"]


class SideConnection:
    """A DuckDB connection of its own, its lock, transactions and pages, and the files it copies.

    Args:
        conn: a DuckDB connection of its own to the store's database (``DuckDBStore.cursor()``).
        files: the Files API's bytes.
        dirs: the containers' directories.
        clock: the time, in Unix seconds (tests move it).
    """

    def __init__(
        self, conn: duckdb.DuckDBPyConnection, files: FileBytes, dirs: ContainerDirs,
        clock: Callable[[], float] = time.time,
    ) -> None:  # fmt: skip
        self._conn = conn
        self._lock = threading.RLock()
        self.files = files
        self.dirs = dirs
        self.clock = clock

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection inside a transaction (errors roll back; DuckDB's become StorageError)."""
        with self._lock, transaction(self._conn) as conn:
            yield conn

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except duckdb.Error as exc:
                raise StorageError(f"DuckDB: {exc}") from exc

    def _page(
        self, sql: str, params: list[Any], anchor_sql: str, anchor_params: list[Any], after: str | None, limit: int,
        order: Order, build: Callable[[tuple[Any, ...]], dict[str, Any]],
    ) -> Page:  # fmt: skip
        """``sql`` (its first columns ``created_at, id``, ending in a WHERE clause) as a page after
        the id ``after`` (an unknown one gives an empty page), ``order`` by creation."""
        check_page_args(limit, order)
        forward = order == "asc"
        if after is not None:
            anchor = self._rows(anchor_sql, [*anchor_params, after])
            if not anchor:
                return Page(data=[], has_more=False)
            sql += f" AND (created_at, id) {'>' if forward else '<'} (?, ?)"
            params = [*params, *anchor[0]]
        direction = "ASC" if forward else "DESC"
        rows = self._rows(f"{sql} ORDER BY created_at {direction}, id {direction} LIMIT ?", [*params, limit + 1])
        return Page(data=[build(row) for row in rows[:limit]], has_more=len(rows) > limit)
