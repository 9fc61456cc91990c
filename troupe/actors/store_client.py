"""Async access to the store, in-process or through the ``StorageActor``.

Every :class:`~troupe.storage.Store` method is available as a coroutine of the
same name and arguments, plus :meth:`StoreClient.write_response`, which
group-commits a finished response and returns once it is durable.

:class:`LocalStoreClient` runs the store on one dedicated thread in this
process; ``troupe.actors.storage_actor.RayStoreClient`` forwards the same calls
to the single storage actor that owns the DuckDB file.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from troupe.storage import ResponseRecord, Store
from troupe.storage.group_commit import GroupCommitWriter

__all__ = ["StoreClient", "LocalStoreClient", "STORE_METHODS", "open_store"]


def open_store(path: str) -> Store:
    """The DuckDB store at ``path``; ``:memory:`` keeps everything in memory."""
    from troupe.storage.duckdb_store import DuckDBStore

    return DuckDBStore(None if path == ":memory:" else path)

# The Store methods a client forwards (everything but write_responses, which goes
# through group commit as write_response).
STORE_METHODS = frozenset(
    {
        "get_response",
        "get_thread_id",
        "delete_response",
        "list_responses",
        "list_input_items",
        "chain_items",
        "step_traces",
        "create_conversation",
        "get_conversation",
        "update_conversation",
        "delete_conversation",
        "add_conversation_items",
        "list_conversation_items",
        "get_conversation_item",
        "delete_conversation_item",
        "conversation_items",
        "put_eval_run",
        "get_eval_run",
        "list_eval_runs",
        "write_eval_results",
        "eval_results",
    }
)


class StoreClient:
    """Async store calls through ``call(method, args, kwargs)``; see the module docstring."""

    def __init__(
        self,
        call: Callable[[str, tuple[Any, ...], dict[str, Any]], Awaitable[Any]],
        write: Callable[[ResponseRecord], Awaitable[None]],
        close: Callable[[], Awaitable[None]],
    ) -> None:
        self._call = call
        self._write = write
        self._close = close

    async def write_response(self, record: ResponseRecord) -> None:
        """Store a finished response; returns once it is committed.

        Raises:
            StorageError: this record could not be stored; nothing of it was
                written (the records group-committed with it are not affected).
        """
        await self._write(record)

    async def close(self) -> None:
        await self._close()

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name not in STORE_METHODS:
            raise AttributeError(name)

        async def method(*args: Any, **kwargs: Any) -> Any:
            return await self._call(name, args, kwargs)

        method.__name__ = name
        return method


class LocalStoreClient(StoreClient):
    """The store on a dedicated thread of this process, writes group-committed."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writer = GroupCommitWriter(store.write_responses)

        async def call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return await self.writer.run_sync(functools.partial(getattr(store, name), *args, **kwargs))

        async def close() -> None:
            await self.writer.close()
            store.close()

        super().__init__(call, self.writer.submit, close)

    @classmethod
    def open(cls, path: str) -> LocalStoreClient:
        """A client over the DuckDB file at ``path`` (``:memory:`` for a throwaway one)."""
        return cls(open_store(path))
