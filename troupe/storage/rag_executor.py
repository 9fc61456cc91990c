"""Where the files and vector stores' calls run: a :class:`~troupe.storage.rag.RagStore` on a
thread of its own.

The thread uses the RagStore's own DuckDB connection, so no call waits for the responses
the main store's thread is writing, nor holds them up. Calls run in order: a read issued
after a write returned sees it. The async store (:mod:`troupe.runtime.store_client`) sends
every :class:`~troupe.storage.contract.Files` method here.

Example::

    rag = RagExecutor.over(duckdb_store)
    await rag.run(functools.partial(rag.rag.get_file, "", "file-abc"))
    await rag.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import TypeVar

from .base import StorageError
from .contract import Store
from .rag import RagStore

__all__ = ["RagExecutor"]

T = TypeVar("T")


class RagExecutor:
    """Runs calls of a :class:`RagStore` off the event loop, one at a time, in order."""

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

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` (a call of :attr:`rag`) on its thread; what it returned or raised."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn)

    async def close(self) -> None:
        """Let the calls under way finish, then close the connections (and a store in memory's files)."""
        await asyncio.to_thread(self._thread.shutdown, wait=True)
        self.rag.close()
