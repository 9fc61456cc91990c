"""Where :class:`~troupe.storage.rag.RagStore` calls run: one thread of their own.

The thread uses the RagStore's own DuckDB connection, so no call waits for the responses
the main store's thread is writing, nor holds them up. Calls run in order: a read issued
after a write returned sees it.

Example::

    rag = RagExecutor.over(duckdb_store)
    await rag.call("get_file", "", "file-abc")
    await rag.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from typing import Any

from .base import StorageError, Store
from .rag import RagStore

__all__ = ["RagExecutor"]


class RagExecutor:
    """Runs a :class:`RagStore`'s methods by name, off the event loop (module docstring)."""

    def __init__(self, rag: RagStore) -> None:
        self.rag = rag
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="troupe-rag")

    @classmethod
    def over(cls, store: Store) -> RagExecutor:
        """Over the files and vector stores of ``store``'s database.

        Raises:
            StorageError: ``store`` is not a DuckDB store (files and vector stores need DuckDB).
        """
        cursor = getattr(store, "cursor", None)
        if cursor is None:
            raise StorageError("files and vector stores need the DuckDB store")
        return cls(RagStore(cursor, store.path))  # type: ignore[attr-defined]

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``RagStore.<method>(*args, **kwargs)`` on its thread; what it returned or raised.

        Raises:
            StorageError: no such method (only :attr:`RagStore.WRITES` and :attr:`RagStore.READS` are callable).
        """
        if method not in RagStore.WRITES and method not in RagStore.READS:
            raise StorageError(f"no vector store call named {method!r}")
        fn = functools.partial(getattr(self.rag, method), *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn)

    async def close(self) -> None:
        """Let the calls under way finish, then close the connections (and a store in memory's files)."""
        await asyncio.to_thread(self._thread.shutdown, wait=True)
        self.rag.close()
