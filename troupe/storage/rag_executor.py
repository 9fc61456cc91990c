"""Where the files and vector stores' calls run: a :class:`~troupe.storage.rag.RagStore` on a
thread of its own; and the containers' (:class:`~troupe.storage.duckdb_store.containers.ContainerTables`),
beside it on the same thread, since a container's files are copied from the Files API's.

The thread uses the RagStore's own DuckDB connection (and the containers another, the artifacts a third), so no call
waits for the responses the main store's thread is writing, nor holds them up. Calls run in
order: a read issued after a write returned sees it. The async store
(:mod:`troupe.runtime.store_client`) sends every :class:`~troupe.storage.contract.Files`,
:class:`~troupe.storage.contract.Containers` and :class:`~troupe.storage.contract.Artifacts` method here.

Example::

    rag = RagExecutor.over(duckdb_store)
    await rag.run(functools.partial(rag.rag.get_file, "", "file-abc"))
    await rag.run(functools.partial(rag.bound("get_container"), "", "cntr_abc"))
    await rag.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

from .base import StorageError
from .container_files import ContainerDirs
from .contract import ARTIFACTS_METHODS, CONTAINERS_METHODS, Store
from .duckdb_store.artifacts import ArtifactTables
from .duckdb_store.containers import ContainerTables
from .rag import RagStore

__all__ = ["RagExecutor"]

T = TypeVar("T")


class RagExecutor:
    """Runs calls of a :class:`RagStore`, of its :class:`ContainerTables` and of its
    :class:`ArtifactTables` off the event loop, one at a time, in order."""

    def __init__(self, rag: RagStore, containers: ContainerTables, artifacts: ArtifactTables) -> None:
        self.rag = rag
        self.containers = containers
        self.artifacts = artifacts
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="troupe-rag")

    @classmethod
    def over(cls, store: Store, containers_directory: str = "") -> RagExecutor:
        """Over the files, vector stores and containers of ``store``'s database.

        Args:
            containers_directory: where the containers' directories go; ``""``: beside the
                database (``<path>.containers/``; a temporary directory for one in memory).

        Raises:
            StorageError: ``store`` is not a DuckDB store (files and vector stores need DuckDB),
                or the containers' directory cannot be made.
        """
        cursor = getattr(store, "cursor", None)
        if cursor is None:
            raise StorageError("files and vector stores need the DuckDB store")
        path: str = store.path  # type: ignore[attr-defined]
        rag = RagStore(cursor, path)
        try:
            dirs = ContainerDirs.beside(path, containers_directory)
        except BaseException:
            rag.close()
            raise
        containers = ContainerTables(cursor(), rag.file_bytes, dirs)
        return cls(rag, containers, ArtifactTables(cursor(), rag.file_bytes, dirs))

    def bound(self, method: str) -> Callable[..., Any]:
        """The store method of that name: the containers', the artifacts' or the files and vector stores'."""
        if method in CONTAINERS_METHODS:
            return getattr(self.containers, method)
        return getattr(self.artifacts if method in ARTIFACTS_METHODS else self.rag, method)

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` (a call of :attr:`rag`) on its thread; what it returned or raised."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn)

    async def close(self) -> None:
        """Let the calls under way finish, then close the connections (and a store in memory's files)."""
        await asyncio.to_thread(self._thread.shutdown, wait=True)
        self.artifacts.close()
        self.containers.close()
        self.rag.close()
