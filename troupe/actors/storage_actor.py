"""The ``StorageActor``: the single owner of the DuckDB file.

DuckDB allows one writing process, so exactly one named actor opens the file,
pinned to the head node; hosts and the ingress reach it through
:class:`RayStoreClient`. Writes are group-committed (many finished responses per
transaction); reads run on the same thread, in order with the writes.
"""

from __future__ import annotations

from typing import Any

import ray

from troupe.storage import ResponseRecord

from .settings import RuntimeSettings
from .store_client import LocalStoreClient, StoreClient

__all__ = ["StorageService", "RayStoreClient", "storage_actor", "STORAGE_ACTOR_NAME"]

STORAGE_ACTOR_NAME = "troupe-storage"


class StorageService:
    """The storage actor's body (a plain class; wrapped by ``ray.remote`` below)."""

    def __init__(self, path: str) -> None:
        self._client = LocalStoreClient.open(path)

    async def write_response(self, record: ResponseRecord) -> None:
        await self._client.write_response(record)

    async def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return await getattr(self._client, name)(*args, **kwargs)

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        await self._client.close()


def storage_actor(settings: RuntimeSettings) -> ray.actor.ActorHandle:
    """The storage actor of this Ray namespace, created on the head node if it is not running."""
    return (
        ray.remote(StorageService)
        .options(
            name=STORAGE_ACTOR_NAME,
            namespace=settings.namespace,
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=10_000,
            max_restarts=-1,
            # The DuckDB file lives on the head node's disk.
            resources={"node:__internal_head__": 0.001},
        )
        .remote(settings.storage_path)
    )


async def _unwrap(ref: ray.ObjectRef) -> Any:
    try:
        return await ref
    except ray.exceptions.RayTaskError as exc:
        # Our own errors (StorageError, …) travel inside Ray's; raise the original.
        if isinstance(exc.cause, Exception):
            raise exc.cause from None
        raise


class RayStoreClient(StoreClient):
    """Store calls forwarded to the storage actor."""

    def __init__(self, handle: ray.actor.ActorHandle) -> None:
        self.handle = handle

        async def call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return await _unwrap(handle.call.remote(name, args, kwargs))

        async def write(record: ResponseRecord) -> None:
            await _unwrap(handle.write_response.remote(record))

        async def close() -> None:
            """The actor outlives any one client; nothing to release here."""

        super().__init__(call, write, close)

    @classmethod
    async def connect(cls, settings: RuntimeSettings) -> RayStoreClient:
        handle = storage_actor(settings)
        await _unwrap(handle.ping.remote())
        return cls(handle)

    @classmethod
    def by_name(cls, settings: RuntimeSettings) -> RayStoreClient:
        """From inside another actor: the running storage actor (created by the runtime)."""
        return cls(ray.get_actor(STORAGE_ACTOR_NAME, namespace=settings.namespace))
